"""The ``parameters`` of a FIL model, read as Triton's FIL backend reads them.

Pure Python: nothing here imports xgboost, lightgbm or treelite, so the rules are testable on
their own and ``tritonx check`` can apply them cheaply.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from tritonx.errors import invalid_arg, unsupported

log = logging.getLogger("tritonx.backend.fil")

#: ``model_type`` -> the file Triton's FIL backend reads when ``default_model_filename`` is unset.
MODEL_FILES: dict[str, str] = {
    "xgboost": "xgboost.model",
    "xgboost_json": "xgboost.json",
    "xgboost_ubj": "xgboost.ubj",
    "lightgbm": "model.txt",
    "treelite_checkpoint": "checkpoint.tl",
}
#: FIL's default ``model_type``.
DEFAULT_MODEL_TYPE = "xgboost"

#: Parameters that only tune FIL's GPU execution: accepted (values checked), no effect on the
#: CPU, which is the only place this backend runs models.
GPU_ONLY = ("chunk_size", "layout", "transfer_threshold")
#: FIL's layout names (``layout``).
LAYOUTS = ("depth_first", "breadth_first", "layered", "layered_children_together")
#: Parameters FIL removed in 25.09 and now ignores with a warning: all tuned GPU execution only
#: (``output_class``, also removed, is still honoured, as FIL honours it).
REMOVED = ("algo", "threads_per_tree", "storage_type", "blocks_per_sm")
#: FIL's CPU-only "Herring" optimisation switch (deprecated there): results are the same with
#: or without it, so it is accepted and has no effect here.
CPU_TUNING = ("use_experimental_optimizations",)

KNOWN_KEYS = frozenset(
    {
        "model_type",
        "is_classifier",
        "output_class",
        "predict_proba",
        "threshold",
        "xgboost_allow_unknown_field",
        "cpu_nthread",
        *GPU_ONLY,
        *REMOVED,
        *CPU_TUNING,
    }
)


@dataclass(frozen=True, slots=True)
class FILSettings:
    """A FIL model's parameters, validated.

    :param model_type: the serialization format (``xgboost``, ``xgboost_json``, ...).
    :param is_classifier: FIL's ``is_classifier`` (or the legacy ``output_class``).
    :param predict_proba: return one score per class instead of a class index.
    :param threshold: the decision threshold of binary classifiers.
    :param allow_unknown_field: XGBoost JSON/UBJSON: ignore unknown fields.
    :param nthread: threads per prediction (FIL's ``cpu_nthread``; -1 or 0: all cores).
    :param ignored: parameters accepted without effect here (GPU tuning...), for the log.
    """

    model_type: str = DEFAULT_MODEL_TYPE
    is_classifier: bool = False
    predict_proba: bool = False
    threshold: float = 0.5
    allow_unknown_field: bool = False
    nthread: int = -1
    ignored: tuple[str, ...] = ()

    @property
    def default_filename(self) -> str:
        """The file FIL reads for this ``model_type`` when the config names none."""
        return MODEL_FILES[self.model_type]


def _bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1"):
        return True
    if v in ("false", "0"):
        return False
    raise invalid_arg(f"expected the parameter '{key}' to be true or false, got '{value}'")


def _int(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise invalid_arg(
            f"expected the parameter '{key}' to be an integer, got '{value}'"
        ) from None


def _float(key: str, value: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise invalid_arg(f"expected the parameter '{key}' to be a number, got '{value}'") from None


def parse_settings(parameters: Mapping[str, str], model: str = "") -> FILSettings:
    """Read FIL's ``parameters``; unknown keys and bad values are refused (Triton's FIL would
    ignore an unknown key: here a misspelled one must not pass unnoticed)."""
    unknown = sorted(set(parameters) - KNOWN_KEYS)
    if unknown:
        raise invalid_arg(
            f"unknown parameter(s) {', '.join(repr(k) for k in unknown)} for FIL model "
            f"'{model}'; the fil backend reads: {', '.join(sorted(KNOWN_KEYS))}"
        )
    model_type = parameters.get("model_type", DEFAULT_MODEL_TYPE).strip()
    if model_type not in MODEL_FILES:
        raise unsupported(f"{model_type} not recognized as a valid serialization format.")
    # the legacy output_class wins over is_classifier, as in FIL
    if "output_class" in parameters:
        is_classifier = _bool("output_class", parameters["output_class"])
    else:
        is_classifier = _bool("is_classifier", parameters.get("is_classifier", "false"))
    threshold = _float("threshold", parameters.get("threshold", "0.5"))
    nthread = _int("cpu_nthread", parameters.get("cpu_nthread", "-1"))
    ignored: list[str] = []
    for key in GPU_ONLY:
        if key not in parameters:
            continue
        value = parameters[key]
        if key == "layout" and value.strip() not in LAYOUTS:
            raise invalid_arg(f"Unknown nvForest layout name: {value}")
        if key in ("chunk_size", "transfer_threshold") and _int(key, value) < 0:
            raise invalid_arg(f"expected the parameter '{key}' to be >= 0, got '{value}'")
        ignored.append(key)
    ignored += [k for k in (*REMOVED, *CPU_TUNING) if k in parameters]
    if "use_experimental_optimizations" in parameters:
        _bool("use_experimental_optimizations", parameters["use_experimental_optimizations"])
    return FILSettings(
        model_type=model_type,
        is_classifier=is_classifier,
        predict_proba=_bool("predict_proba", parameters.get("predict_proba", "false")),
        threshold=threshold,
        allow_unknown_field=_bool(
            "xgboost_allow_unknown_field", parameters.get("xgboost_allow_unknown_field", "false")
        ),
        nthread=nthread,
        ignored=tuple(ignored),
    )


def log_ignored(settings: FILSettings, model: str, logger: logging.Logger = log) -> None:
    """Say which parameters were accepted without effect (as FIL warns of removed ones)."""
    for key in settings.ignored:
        if key in REMOVED:
            logger.warning(
                "model '%s': the `%s` parameter was removed from Triton's FIL in 25.09; ignored",
                model,
                key,
            )
        elif key in GPU_ONLY:
            logger.info("model '%s': `%s` only tunes GPU execution; ignored on the CPU", model, key)
        else:
            logger.info("model '%s': `%s` does not change results; ignored here", model, key)
