"""The rules of Triton's model identifiers (``tritonx._core.namespaces``, groundwork for
``--model-namespacing``): the texts and codes are Triton's ``ModelRepositoryManager``'s."""

from pathlib import Path

import pytest

from tritonx._core.namespaces import (
    GlobalMap,
    ModelId,
    metric_labels,
    scan_ids,
    unresolved_steps,
)
from tritonx.builtin.local_repository import LocalRepository
from tritonx.errors import Code, TritonXError


def repositories(tmp_path: Path) -> list[LocalRepository]:
    """Triton's L0_model_namespacing test_duplication layout."""
    layout = {
        "addsub_repo": ("composing_model", "simple_addsub"),
        "subadd_repo": ("composing_model", "simple_subadd"),
    }
    repos = []
    for repo, models in layout.items():
        for model in models:
            (tmp_path / repo / model).mkdir(parents=True)
        repos.append(LocalRepository(str(tmp_path / repo), {}))
    return repos


def test_identifier_prints_as_triton() -> None:
    assert str(ModelId("", "m")) == "m"
    assert str(ModelId("/models/a", "m")) == "/models/a::m"


def test_scan_without_namespacing_finds_duplicates(tmp_path: Path) -> None:
    repos = repositories(tmp_path)
    unique, duplicates = scan_ids(((r, r.list_models()) for r in repos), namespacing=False)
    assert set(unique) == {ModelId("", "simple_addsub"), ModelId("", "simple_subadd")}
    assert duplicates == {ModelId("", "composing_model"): [r.url for r in repos]}


def test_scan_with_namespacing_keeps_both(tmp_path: Path) -> None:
    add, sub = repositories(tmp_path)
    unique, duplicates = scan_ids(((r, r.list_models()) for r in (add, sub)), namespacing=True)
    assert duplicates == {}
    assert unique[ModelId(add.url, "composing_model")] is add
    assert unique[ModelId(sub.url, "composing_model")] is sub


def test_find_unknown_unique_ambiguous() -> None:
    known = GlobalMap()
    a, b = ModelId("/a", "composing_model"), ModelId("/b", "composing_model")
    known.add(ModelId("/a", "simple_addsub"))
    known.add(a)
    assert known.find("simple_addsub") == ModelId("/a", "simple_addsub")
    assert known.find("composing_model") == a
    known.add(b)
    with pytest.raises(TritonXError) as info:
        known.find("composing_model")
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "There are 2 identifiers of model 'composing_model' in global map, model namespace "
        "must be provided to resolve ambiguity."
    )
    with pytest.raises(TritonXError) as info:
        known.find("nothing")
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == "Request for unknown model: 'nothing' is not found"
    assert known.named("composing_model") == [a, b]
    known.discard(a)
    assert known.find("composing_model") == b
    known.discard(b)
    assert known.named("composing_model") == []


def test_ensemble_steps_prefer_their_namespace() -> None:
    # Triton's test_dynamic_resolution: addsub's composing model goes and comes back
    known = GlobalMap()
    add_ens, sub_ens = ModelId("/add", "simple_addsub"), ModelId("/sub", "simple_subadd")
    add_c, sub_c = ModelId("/add", "composing_model"), ModelId("/sub", "composing_model")
    for mid in (add_ens, sub_ens, add_c, sub_c):
        known.add(mid)
    assert known.resolve_step(add_ens, "composing_model") == (add_c, True)
    assert known.resolve_step(sub_ens, "composing_model") == (sub_c, True)
    known.discard(add_c)
    assert known.resolve_step(add_ens, "composing_model") == (sub_c, False)
    known.add(add_c)
    assert known.resolve_step(add_ens, "composing_model") == (add_c, True)
    # several elsewhere, none in its own namespace: not resolved
    other = ModelId("/other", "simple")
    assert known.resolve_step(other, "composing_model") == (None, False)
    assert known.resolve_step(other, "missing") == (None, False)
    error = unresolved_steps(other, ["missing", "composing_model", "missing"])
    assert error.code is Code.INVALID_ARG
    assert error.message == (
        "ensemble /other::simple contains models that are not available or ambiguous: "
        "composing_model, missing"
    )


def test_metric_labels() -> None:
    assert metric_labels(ModelId("", "m")) == {"model": "m"}
    assert metric_labels(ModelId("/r", "m")) == {"namespace": "/r", "model": "m"}
