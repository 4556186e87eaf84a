"""FIL's ``parameters`` as this backend reads them (no framework needed)."""

from __future__ import annotations

import pytest

from tritonx.errors import Code, TritonXError
from tritonx_backend_fil.settings import MODEL_FILES, parse_settings


def test_defaults_are_fils() -> None:
    s = parse_settings({})
    assert (s.model_type, s.is_classifier, s.predict_proba, s.threshold) == (
        "xgboost", False, False, 0.5,
    )  # fmt: skip
    assert s.default_filename == "xgboost.model"
    assert MODEL_FILES == {
        "xgboost": "xgboost.model",
        "xgboost_json": "xgboost.json",
        "xgboost_ubj": "xgboost.ubj",
        "lightgbm": "model.txt",
        "treelite_checkpoint": "checkpoint.tl",
    }


def test_output_class_is_the_legacy_is_classifier_and_wins() -> None:
    assert parse_settings({"output_class": "true"}).is_classifier
    assert not parse_settings({"output_class": "false", "is_classifier": "true"}).is_classifier
    assert parse_settings({"is_classifier": "true", "threshold": "0.25"}).threshold == 0.25


def test_gpu_only_and_removed_parameters_are_accepted_and_listed() -> None:
    params = {
        "chunk_size": "4",
        "layout": "layered",
        "transfer_threshold": "2",
        "algo": "TREE_REORG",
        "threads_per_tree": "4",
        "storage_type": "SPARSE",
        "blocks_per_sm": "2",
        "use_experimental_optimizations": "true",
    }
    assert set(parse_settings(params).ignored) == set(params)


@pytest.mark.parametrize(
    ("params", "code", "text"),
    [
        ({"model_type": "pickle"}, Code.UNSUPPORTED, "pickle not recognized"),
        ({"predict_proba": "maybe"}, Code.INVALID_ARG, "'predict_proba' to be true or false"),
        ({"threshold": "high"}, Code.INVALID_ARG, "'threshold' to be a number"),
        ({"cpu_nthread": "all"}, Code.INVALID_ARG, "'cpu_nthread' to be an integer"),
        ({"layout": "spiral"}, Code.INVALID_ARG, "Unknown nvForest layout name: spiral"),
        ({"chunk_size": "-2"}, Code.INVALID_ARG, "'chunk_size' to be >= 0"),
        ({"treeshap": "true"}, Code.INVALID_ARG, "unknown parameter(s) 'treeshap'"),
    ],
)
def test_bad_parameters_are_refused(params: dict[str, str], code: Code, text: str) -> None:
    with pytest.raises(TritonXError) as info:
        parse_settings(params, "m")
    assert info.value.code is code
    assert text in info.value.message
