"""The rules of Triton's model identifiers (``tritonx._core.namespaces``, groundwork for
``--model-namespacing``): the texts and codes are Triton's ``ModelRepositoryManager``'s."""

import pytest

from tritonx._core.namespaces import (
    GlobalMap,
    ModelId,
    Namespaces,
    step_model,
    unresolved_steps,
)
from tritonx.errors import Code, TritonXError


def test_identifier_prints_as_triton() -> None:
    assert str(ModelId("", "m")) == "m"
    assert str(ModelId("/models/a", "m")) == "/models/a::m"


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
    from google.protobuf import text_format

    from tritonx.proto import model_config_pb2

    add_ens, sub_ens = ModelId("/add", "simple_addsub"), ModelId("/sub", "simple_subadd")
    add_c, sub_c = ModelId("/add", "composing_model"), ModelId("/sub", "composing_model")
    ids = {str(m): m for m in (add_ens, sub_ens, add_c, sub_c)}
    spaces = Namespaces(ids)
    config = text_format.Parse(
        'ensemble_scheduling { step [ { model_name: "composing_model" model_version: -1 } ] }',
        model_config_pb2.ModelConfig(),
    )
    listed = set(ids)
    assert spaces.steps(str(add_ens), config, listed) == {"composing_model": str(add_c)}
    assert spaces.steps(str(sub_ens), config, listed) == {"composing_model": str(sub_c)}
    listed.discard(str(add_c))
    assert spaces.steps(str(add_ens), config, listed) == {"composing_model": str(sub_c)}
    spaces.stamp_steps(config, {"composing_model": str(sub_c)})
    assert config.ensemble_scheduling.step[0].model_namespace == "/sub"
    assert step_model(config.ensemble_scheduling.step[0]) == str(sub_c)
    listed.add(str(add_c))
    assert spaces.steps(str(add_ens), config, listed) == {"composing_model": str(add_c)}
    # several elsewhere, none in its own namespace: not resolved (Triton's message)
    other = ModelId("/other", "simple")
    ids[str(other)] = other
    with pytest.raises(TritonXError) as info:
        spaces.steps(str(other), config, listed)
    assert info.value.code is Code.INVALID_ARG
    assert info.value.message == (
        "ensemble /other::simple contains models that are not available or ambiguous: "
        "composing_model"
    )
    error = unresolved_steps(other, ["missing", "composing_model", "missing"])
    assert error.message.endswith("ambiguous: composing_model, missing")
