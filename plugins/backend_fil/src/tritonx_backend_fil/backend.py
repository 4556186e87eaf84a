"""The ``fil`` backend: tree models (XGBoost, LightGBM, Treelite checkpoints) on the CPU, with
the inputs, outputs and post-processing of Triton's FIL backend.

Every model is read with Treelite, as FIL reads it (the same formats, the same acceptance and
error texts, the same number of features and classes). Predictions come from the measured
fastest CPU predictor for the format (see the README): Treelite's GTIL for XGBoost and
Treelite checkpoints, LightGBM's own ``predict`` for LightGBM models; FIL's output rules
(class index, threshold, ``predict_proba``) are applied on top.

xgboost/lightgbm/treelite are imported inside :meth:`FILBackend.load` and
:meth:`FILBackend.check_notes`, never at import time.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

import tritonx
from tritonx import (
    AutoCompleteContext,
    Backend,
    InferenceRequest,
    InferenceResponse,
    LoadContext,
    ModelConfig,
    ModelInstance,
)
from tritonx.datatypes import DataType
from tritonx.errors import Code, TritonXError, invalid_arg, not_found, unsupported
from tritonx_backend_fil.settings import FILSettings, log_ignored, parse_settings

INPUT = "input__0"
OUTPUT = "output__0"
SHAP_OUTPUT = "treeshap_output"

#: Treelite's TaskType values.
BINARY_CLF, REGRESSOR, MULTI_CLF = 0, 1, 2

#: ``--backend-config=fil,predictor=...`` values: ``auto`` (per format, the fastest predictor
#: that needs nothing but the model: GTIL, or LightGBM's own for LightGBM), ``gtil`` (Treelite's
#: GTIL for every format, FIL's own CPU path) or ``tl2cgen`` (every model compiled to C with
#: TL2cgen at load: the fastest predictions, seconds of compilation per load, a C compiler and
#: the ``tl2cgen`` package needed).
PREDICTORS = ("auto", "gtil", "tl2cgen")

Predict = Callable[[np.ndarray], np.ndarray]


def _import(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TritonXError(
            f"the fil backend needs the {name.split('.')[0]} package: {exc}", Code.UNAVAILABLE
        ) from exc


def model_file(ctx_path: Path | None, version_path: Path, settings: FILSettings) -> Path:
    """The model file: the config's ``default_model_filename`` or FIL's name for the
    ``model_type``; a folder gets FIL's name appended (as FIL does)."""
    path = ctx_path if ctx_path is not None else version_path / settings.default_filename
    if path.is_dir():
        path = path / settings.default_filename
    return path


def framework_error(exc: BaseException) -> TritonXError:
    """A framework exception during prediction: INTERNAL with the framework's message."""
    if isinstance(exc, TritonXError):
        return exc
    return TritonXError(str(exc) or type(exc).__name__, Code.INTERNAL)


@dataclass(frozen=True, slots=True)
class Forest:
    """A model read with Treelite: what FIL knows about it."""

    model: Any  # treelite.Model
    num_feature: int
    num_class: int
    num_tree: int
    task_type: int

    def describe(self, model_type: str) -> str:
        return (
            f"{model_type}: {self.num_tree} trees, {self.num_feature} features, "
            f"{self.num_class} class{'es' if self.num_class != 1 else ''}"
        )


def read_forest(path: Path, settings: FILSettings, model: str) -> Forest:
    """Read ``path`` with Treelite as FIL does; FIL's ``predict_proba`` post-processor for
    multi-class models is set on the result (softmax over per-class trees)."""
    treelite = _import("treelite")
    if not path.is_file():
        raise not_found(
            f"unable to find '{path}' for model '{model}' (model_type '{settings.model_type}' "
            f"reads '{settings.default_filename}' unless default_model_filename names another "
            "file)"
        )
    kind = settings.model_type
    try:
        if kind == "xgboost":
            tl = treelite.frontend.load_xgboost_model_legacy_binary(path)
        elif kind in ("xgboost_json", "xgboost_ubj"):
            tl = treelite.frontend.load_xgboost_model(
                path,
                format_choice="json" if kind == "xgboost_json" else "ubjson",
                allow_unknown_field=settings.allow_unknown_field,
            )
        elif kind == "lightgbm":
            tl = treelite.frontend.load_lightgbm_model(path)
        else:
            tl = treelite.Model.deserialize(path)
    except Exception as exc:  # treelite.TreeliteError and friends: FIL reports them as is
        hint = ""
        if kind == "xgboost" and _looks_like_json_or_ubj(path):
            hint = (
                " (the file is XGBoost JSON or UBJSON, which XGBoost >= 2.1 writes even under a "
                "'.model' name: set model_type to xgboost_json or xgboost_ubj)"
            )
        raise TritonXError(
            f"unable to load model '{model}' from '{path}' as {kind}: {exc}{hint}", Code.UNKNOWN
        ) from exc
    header = tl.get_header_accessor()
    num_target = int(header.get_field("num_target")[0])
    if num_target != 1:
        raise unsupported(
            f"unable to load model '{model}': Multi-target model not supported "
            f"(num_target = {num_target})"
        )
    task_type = int(header.get_field("task_type")[0])
    if settings.predict_proba and task_type == MULTI_CLF:
        leaf_vector = header.get_field("leaf_vector_shape")
        header.set_field(
            "postprocessor", "softmax" if int(leaf_vector[1]) == 1 else "identity_multiclass"
        )
    return Forest(
        model=tl,
        num_feature=int(tl.num_feature),
        num_class=int(header.get_field("num_class")[0]),
        num_tree=int(tl.num_tree),
        task_type=task_type,
    )


def _looks_like_json_or_ubj(path: Path) -> bool:
    """Whether the file starts as XGBoost's JSON (``{"``) or UBJSON (``{L``, ``{i``...) do."""
    try:
        with path.open("rb") as f:
            head = f.read(2)
    except OSError:
        return False
    return len(head) == 2 and head[0:1] == b"{"


def output_widths(forest: Forest, settings: FILSettings) -> tuple[int, ...]:
    """The ``output__0`` widths FIL can fill for this model and these parameters."""
    if settings.is_classifier and not settings.predict_proba:
        return (1,)
    if settings.is_classifier and forest.num_class == 1:
        return (1, 2)  # a binary classifier: P(1), or [P(0), P(1)]
    return (forest.num_class,)


def _dims_text(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def validate_io(config: ModelConfig, forest: Forest, settings: FILSettings) -> int:
    """Check the config's inputs and outputs against the model as FIL lays them out; returns
    the width of ``output__0``."""
    name = config.name
    batched = config.max_batch_size > 0
    if [io.name for io in config.inputs] != [INPUT]:
        raise invalid_arg(
            f"model '{name}': a FIL model has exactly one input, named '{INPUT}' "
            f"(configured: {', '.join(io.name for io in config.inputs) or 'none'})"
        )
    (io,) = config.inputs
    want_in = (forest.num_feature,) if batched else (-1, forest.num_feature)
    if io.datatype is not DataType.FP32:
        raise invalid_arg(
            f"model '{name}': input '{INPUT}' must be TYPE_FP32 (FIL computes in 32-bit "
            f"floats), not TYPE_{io.datatype.value}"
        )
    if io.dims[-1:] != want_in[-1:] or len(io.dims) != len(want_in):
        raise invalid_arg(
            f"model '{name}': input '{INPUT}' has dims {_dims_text(io.dims)}, the model has "
            f"{forest.num_feature} features (expected dims {_dims_text(want_in)})"
        )
    extra = [o.name for o in config.outputs if o.name != OUTPUT]
    if SHAP_OUTPUT in extra:
        raise unsupported(
            f"model '{name}': the '{SHAP_OUTPUT}' output (SHAP values) is not supported by "
            "tritonx's fil backend"
        )
    if extra or OUTPUT not in config.output_map:
        raise invalid_arg(
            f"model '{name}': a FIL model has one output, named '{OUTPUT}' "
            f"(configured: {', '.join(o.name for o in config.outputs) or 'none'})"
        )
    out = config.output_map[OUTPUT]
    if out.datatype is not DataType.FP32:
        raise invalid_arg(
            f"model '{name}': output '{OUTPUT}' must be TYPE_FP32, not TYPE_{out.datatype.value}"
        )
    widths = output_widths(forest, settings)
    width = out.dims[-1] if out.dims else -1
    if width not in widths or len(out.dims) != (1 if batched else 2):
        want = " or ".join(_dims_text((w,) if batched else (-1, w)) for w in widths)
        why = (
            "one class index per sample"
            if settings.is_classifier and not settings.predict_proba
            else f"{forest.num_class} score(s) per sample"
        )
        raise invalid_arg(
            f"model '{name}': output '{OUTPUT}' has dims {_dims_text(out.dims)}, expected {want} "
            f"({why}; is_classifier={str(settings.is_classifier).lower()}, "
            f"predict_proba={str(settings.predict_proba).lower()})"
        )
    return int(width)


def gtil_predictor(forest: Forest, nthread: int) -> Predict:
    """Treelite's GTIL (FIL's own CPU predictor): scores as ``[n, num_class]``."""
    gtil = _import("treelite.gtil")
    model = forest.model
    threads = nthread if nthread > 0 else -1

    def predict(x: np.ndarray) -> np.ndarray:
        out = gtil.predict(model, x, nthread=threads)
        return np.asarray(out).reshape(len(x), -1)

    return predict


def lightgbm_predictor(path: Path, forest: Forest, settings: FILSettings) -> Predict:
    """LightGBM's own ``predict`` with FIL's post-processing: for multi-class models with
    ``predict_proba``, softmax over the raw scores (FIL's rule, also for one-vs-all models)."""
    lgb = _import("lightgbm")
    try:
        booster = lgb.Booster(model_file=str(path))
    except Exception as exc:
        raise TritonXError(f"unable to load '{path}' with lightgbm: {exc}", Code.UNKNOWN) from exc
    if booster.num_feature() != forest.num_feature:  # pragma: no cover - treelite agrees
        raise invalid_arg(f"lightgbm and treelite disagree on the features of '{path}'")
    softmax = settings.predict_proba and forest.task_type == MULTI_CLF
    threads = settings.nthread if settings.nthread > 0 else 0

    def predict(x: np.ndarray) -> np.ndarray:
        if softmax:
            z = np.asarray(booster.predict(x, raw_score=True, num_threads=threads))
            z = z.reshape(len(x), -1)
            e = np.exp(z - z.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        return np.asarray(booster.predict(x, num_threads=threads)).reshape(len(x), -1)

    return predict


class CompiledModels:
    """TL2cgen libraries compiled by one backend, by the model's serialized content (so the
    instances of a model version share one compilation); removed when the backend closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folder: Path | None = None
        self._libs: dict[str, Path] = {}
        self._locks: dict[str, threading.Lock] = {}

    def library(self, model: Any, name: str) -> Path:
        tl2cgen = _import("tl2cgen")
        key = hashlib.sha256(model.serialize_bytes()).hexdigest()
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="tritonx-fil-"))
            lock = self._locks.setdefault(key, threading.Lock())
            folder = self._folder
        with lock:
            lib = self._libs.get(key)
            if lib is not None:
                return lib
            lib = folder / f"{key[:16]}.so"
            try:
                # quantize=0: TL2cgen's quantized thresholds misroute inputs equal to a split
                # threshold (measured: up to 9e-5 off on XGBoost training rows)
                tl2cgen.export_lib(model, toolchain="gcc", libpath=lib, params={"quantize": 0})
            except Exception as exc:
                raise TritonXError(
                    f"unable to load model '{name}': TL2cgen could not compile it "
                    f"(--backend-config=fil,predictor=tl2cgen needs gcc): {exc}",
                    Code.UNAVAILABLE,
                ) from exc
            self._libs[key] = lib
            return lib

    def close(self) -> None:
        with self._lock:
            folder, self._folder = self._folder, None
            self._libs.clear()
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def tl2cgen_predictor(forest: Forest, nthread: int, lib: Path) -> Predict:
    """A TL2cgen-compiled library of the forest (FIL's post-processing compiled in)."""
    tl2cgen = _import("tl2cgen")
    predictor = tl2cgen.Predictor(lib, nthread=nthread if nthread > 0 else None)

    def predict(x: np.ndarray) -> np.ndarray:
        out = predictor.predict(tl2cgen.DMatrix(x))
        return np.asarray(out).reshape(len(x), -1)

    return predict


def fil_output(scores: np.ndarray, settings: FILSettings, num_class: int, width: int) -> np.ndarray:
    """FIL's output rules on the model's scores ``[n, num_class]``: class index for classifiers
    without ``predict_proba`` (argmax for multi-class, ``score > threshold`` for binary),
    ``[1 - p, p]`` for a binary classifier with a two-wide ``predict_proba`` output."""
    if settings.is_classifier and not settings.predict_proba:
        if num_class > 1:
            index = scores.argmax(axis=1)
            index[scores.max(axis=1) <= 0] = 0  # FIL's running maximum starts at 0
            return index.astype(np.float32).reshape(-1, 1)
        return (scores > settings.threshold).astype(np.float32).reshape(-1, 1)
    if settings.is_classifier and num_class == 1 and width == 2:
        p = scores.reshape(-1, 1).astype(np.float32)
        return np.hstack([1 - p, p])
    return scores.astype(np.float32, copy=False)


class FILBackend(Backend):
    """Triton's ``fil`` backend (XGBoost, LightGBM and Treelite models), on the CPU.

    ``--backend-config=fil,predictor=gtil`` makes every model predict with Treelite's GTIL
    (FIL's own CPU code) instead of the measured fastest predictor for its format.
    """

    name: ClassVar[str] = "fil"
    #: the file depends on ``model_type``: see :data:`tritonx_backend_fil.settings.MODEL_FILES`
    default_model_filename: ClassVar[str | None] = None
    reports_missing_model_file: ClassVar[bool] = True
    config_keys: ClassVar[frozenset[str] | None] = frozenset({"predictor"})

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        self.predictor = self.config.get("predictor", "auto").strip().lower()
        if self.predictor not in PREDICTORS:
            raise invalid_arg(
                f"--backend-config=fil,predictor={self.predictor}: expected one of "
                + ", ".join(PREDICTORS)
            )
        self.compiled = CompiledModels()

    def predictor_for(self, settings: FILSettings) -> str:
        """The predictor a model of these settings uses: ``gtil``, ``lightgbm`` or
        ``tl2cgen``."""
        if self.predictor == "auto":
            return "lightgbm" if settings.model_type == "lightgbm" else "gtil"
        return self.predictor

    def close(self) -> None:
        """Remove the TL2cgen libraries compiled for this server."""
        self.compiled.close()

    def check_notes(self, ctx: AutoCompleteContext) -> dict[str, str]:
        """Read the model with Treelite and check the config against it (``tritonx check``)."""
        config = ctx.config.view()
        settings = parse_settings(config.parameters, config.name)
        path = model_file(
            ctx.model_path if config.raw.default_model_filename else None,
            ctx.version_path,
            settings,
        )
        forest = read_forest(path, settings, config.name)
        validate_io(config, forest, settings)
        return {
            "model": forest.describe(settings.model_type),
            "predictor": self.predictor_for(settings),
        }

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Read the model, check the config against it and make its predictor."""
        config = ctx.config
        name = ctx.model_name
        settings = parse_settings(ctx.parameters, name)
        if ctx.instance.kind != "KIND_CPU":
            raise unsupported(
                f"unable to load model '{name}': tritonx's fil backend runs models on the CPU "
                f"only, instance '{ctx.instance.name}' is {ctx.instance.kind} (use KIND_CPU, or "
                "KIND_AUTO on a machine without GPUs)"
            )
        log_ignored(settings, name, ctx.logger)
        path = model_file(
            ctx.model_path if config.raw.default_model_filename else None,
            ctx.version_path,
            settings,
        )
        forest = read_forest(path, settings, name)
        width = validate_io(config, forest, settings)
        which = self.predictor_for(settings)
        if which == "lightgbm":
            predict = lightgbm_predictor(path, forest, settings)
        elif which == "tl2cgen":
            lib = self.compiled.library(forest.model, name)
            predict = tl2cgen_predictor(forest, settings.nthread, lib)
        else:
            predict = gtil_predictor(forest, settings.nthread)
        ctx.logger.info(
            "loaded %s (%s) for instance %s, predictor %s",
            path,
            forest.describe(settings.model_type),
            ctx.instance.name,
            which,
        )
        return FILModelInstance(
            predict, settings, forest, width, which, batched=config.max_batch_size > 0
        )


class FILModelInstance(ModelInstance):
    """One loaded forest: a whole batch of requests is predicted in one call."""

    def __init__(
        self,
        predict: Predict,
        settings: FILSettings,
        forest: Forest,
        width: int,
        predictor: str,
        *,
        batched: bool = True,
    ) -> None:
        self.batched = batched
        self.predict: Predict | None = predict
        self.settings = settings
        self.num_class = forest.num_class
        self.width = width
        self.predictor = predictor

    def _run(self, x: np.ndarray) -> np.ndarray:
        assert self.predict is not None, "the instance was unloaded"
        if not len(x):  # no rows (a [0, features] input): no scores, not a framework error
            return np.empty((0, max(self.num_class, 1)), np.float32)
        return self.predict(x)

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """Predict every request's rows in one call (``input__0`` stacked on the batch axis).

        Should the framework fail on a batch of several requests, each runs alone, so only the
        request it fails on gets the error (INTERNAL, the framework's message). A model with
        ``max_batch_size: 0`` runs each request (its ``[rows, features]`` input) alone.
        Marks the compute phases: input (stacking), infer (the prediction), output (FIL's
        output rules and the split into responses).
        """
        timer = tritonx.compute_timer()
        if len(requests) > 1 and not self.batched:
            timer.input_done()
            return self._one_by_one(requests, timer)
        if len(requests) == 1:
            x = requests[0].inputs[INPUT]
        else:
            x = tritonx.concat_inputs(requests)[INPUT]
        x = np.ascontiguousarray(x, dtype=np.float32)
        timer.input_done()
        try:
            scores = self._run(x)
        except Exception as exc:
            if len(requests) == 1:
                timer.output_started()
                return [InferenceResponse.failed(framework_error(exc))]
            return self._one_by_one(requests, timer)
        timer.output_started()
        try:
            out = fil_output(scores, self.settings, self.num_class, self.width)
            if len(requests) == 1:
                return [InferenceResponse(outputs={OUTPUT: out})]
            return tritonx.split_outputs(requests, {OUTPUT: out})
        except Exception as exc:  # the scores do not fit the output: every request fails
            error = framework_error(exc)
            return [InferenceResponse.failed(error) for _ in requests]

    def _one_by_one(
        self, requests: Sequence[InferenceRequest], timer: tritonx.ComputeTimer
    ) -> list[InferenceResponse]:
        results: list[np.ndarray | TritonXError] = []
        for request in requests:
            try:
                x = np.ascontiguousarray(request.inputs[INPUT], dtype=np.float32)
                results.append(self._run(x))
            except Exception as exc:
                results.append(framework_error(exc))
        timer.output_started()
        return [
            InferenceResponse.failed(r)
            if isinstance(r, TritonXError)
            else InferenceResponse(
                outputs={OUTPUT: fil_output(r, self.settings, self.num_class, self.width)}
            )
            for r in results
        ]

    def unload(self) -> None:
        """Drop the predictor (and with it the model)."""
        self.predict = None
