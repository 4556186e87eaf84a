"""The ``openvino`` backend: one compiled model and one infer request per model instance.

openvino is imported inside :meth:`OpenVINOBackend.load` and
:meth:`OpenVINOBackend.auto_complete_config`, never at import time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
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
from tritonx.errors import Code, TritonXError, invalid_arg, unavailable
from tritonx_backend_openvino import ports
from tritonx_backend_openvino.ports import DATATYPE_TO_ELEMENT, PortInfo
from tritonx_backend_openvino.settings import OpenVINOSettings, parse_settings

log = logging.getLogger("tritonx.backend.openvino")

#: The file inside a version folder when the config names none (Triton's rule).
MODEL_FILE = "model.xml"
#: Triton's ``default-max-batch-size`` (the server passes 4 to every backend by default).
DEFAULT_MAX_BATCH_SIZE = 4
#: OpenVINO device names that are not hardware but pick or combine devices.
VIRTUAL_DEVICES = ("AUTO", "MULTI", "HETERO", "BATCH")


def _import_ov() -> Any:
    try:
        import openvino
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise TritonXError(
            f"the openvino backend needs the openvino package: {exc}", Code.UNAVAILABLE
        ) from exc
    return openvino


def ov_error(what: str, exc: BaseException) -> TritonXError:
    """An OpenVINO exception as Triton's openvino backend reports it (INTERNAL)."""
    if isinstance(exc, TritonXError):
        return exc
    return TritonXError(f"openvino error in {what} : {exc}", Code.INTERNAL)


def port_info(ov: Any, port: Any, model: str, what: str) -> PortInfo:
    """A :class:`PortInfo` from an ``openvino.Output`` (a model input or output)."""
    names = frozenset(port.get_names())
    if not names:
        raise invalid_arg(
            f"unable to load model '{model}': an {what} of the model has no name (models "
            "must be saved with names assigned to their inputs and outputs)"
        )
    shape = port.get_partial_shape()
    dims = (
        None
        if shape.rank.is_dynamic
        else tuple(d.get_length() if d.is_static else -1 for d in shape)
    )
    layout = ov.layout_helpers.get_layout(port)
    return PortInfo(
        name=port.get_any_name(),
        names=names,
        element=port.get_element_type().get_type_name(),
        dims=dims,
        batch_layout=bool(ov.layout_helpers.has_batch(layout)),
    )


def read_model(ov: Any, core: Any, path: Path | None, model: str) -> Any:
    """``core.read_model(path)``: IR (``.xml`` with its ``.bin``), ONNX, or any other format
    OpenVINO's frontends read."""
    if path is None:
        raise unavailable(f"no model file is configured for model '{model}'")
    if not path.exists():
        raise unavailable(f"unable to find '{path}' for model '{model}'")
    try:
        return core.read_model(str(path))
    except Exception as exc:
        raise ov_error("reading model", exc) from exc


def make_core(ov: Any, settings: OpenVINOSettings) -> Any:
    """An ``openvino.Core`` with the model's CPU extension (``CPU_EXTENSION_PATH``) added."""
    core = ov.Core()
    if settings.cpu_extension:
        if not Path(settings.cpu_extension).is_file():
            raise invalid_arg(
                f"CPU_EXTENSION_PATH '{settings.cpu_extension}' is not a file (an absolute path "
                "to a shared library of OpenVINO extensions is expected)"
            )
        try:
            core.add_extension(settings.cpu_extension)
        except Exception as exc:
            raise ov_error(" loading custom CPU extensions", exc) from exc
        log.info("CPU extensions is loaded %s", settings.cpu_extension)
    return core


class OpenVINOBackend(Backend):
    """Triton's ``openvino`` backend (default file ``model.xml``; ``model.onnx`` and the other
    formats OpenVINO reads through ``default_model_filename``).

    ``--backend-config=openvino,default-max-batch-size=N`` sets the ``max_batch_size`` that
    auto-complete gives models whose layout has a batch dimension (default 4).
    """

    name: ClassVar[str] = "openvino"
    default_model_filename: ClassVar[str | None] = MODEL_FILE
    #: only the global default-max-batch-size
    config_keys: ClassVar[frozenset[str] | None] = frozenset()

    def __init__(self, config: Mapping[str, str]) -> None:
        super().__init__(config)
        value = self.config.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE)).strip()
        if not value.lstrip("-").isdigit():
            raise invalid_arg(f"failed to convert 'default-max-batch-size' value '{value}'")
        self.default_max_batch_size = int(value)

    def auto_complete_config(self, ctx: AutoCompleteContext) -> None:
        """Fill ``max_batch_size``, ``dynamic_batching``, inputs and outputs from the model."""
        ov = _import_ov()
        config = ctx.config
        settings = parse_settings(config.view().parameters)
        core = make_core(ov, settings)
        model = read_model(ov, core, ctx.model_path, config.name)
        inputs = [port_info(ov, p, config.name, "input") for p in model.inputs]
        outputs = [port_info(ov, p, config.name, "output") for p in model.outputs]
        del model
        ports.auto_complete(config, inputs, outputs, self.default_max_batch_size)

    def load(self, ctx: LoadContext) -> ModelInstance:
        """Read the model, fit it to the config (datatypes, dynamic or fixed batch,
        ``RESHAPE_IO_LAYERS``), compile it for this instance and create its infer request."""
        ov = _import_ov()
        config = ctx.config
        name = ctx.model_name
        settings = parse_settings(ctx.parameters)
        if ctx.instance.kind != "KIND_CPU":
            raise invalid_arg(
                f"unable to load model '{name}', Triton OpenVINO backend supports only Kind CPU "
                "and AUTO"
            )
        core = make_core(ov, settings)
        _check_device(core, settings.device)
        model = read_model(ov, core, ctx.model_path, name)
        inputs = [port_info(ov, p, name, "input") for p in model.inputs]
        ports.validate_inputs(config, inputs, check_dims=not settings.reshape_io)
        model = _fit(ov, model, config, settings, inputs)
        outputs = [port_info(ov, p, name, "output") for p in model.outputs]
        ports.validate_outputs(config, outputs)
        _configure(core, settings)
        try:
            compiled = core.compile_model(model, settings.device)
            request = compiled.create_infer_request()
        except Exception as exc:
            raise ov_error("loading model", exc) from exc
        try:
            precision = compiled.get_property("INFERENCE_PRECISION_HINT")
        except Exception:  # a virtual device (AUTO...) does not report it
            precision = settings.properties.get("INFERENCE_PRECISION_HINT")
        ctx.logger.info(
            "compiled %s for instance %s on %s (inference precision %s)",
            ctx.model_path,
            ctx.instance.name,
            settings.device,
            precision,
        )
        return OpenVINOModelInstance(ov, compiled, request, config, settings)


def _check_device(core: Any, device: str) -> None:
    available = list(core.available_devices)
    root = device.split(":")[0].split(".")[0]
    if root in VIRTUAL_DEVICES or device in available or root in available:
        return
    raise unavailable(
        f"OpenVINO device '{device}' (TARGET_DEVICE) is not available here; available "
        f"devices: {', '.join(available) or 'none'}"
    )


def _configure(core: Any, settings: OpenVINOSettings) -> None:
    """Set the properties on the core for the device, as Triton does. For a virtual device
    (AUTO, MULTI, HETERO...) the inference precision goes to the hardware devices under it, which
    are the ones that have it (OpenVINO refuses it on the virtual device), and the other
    properties to the virtual device itself."""
    properties = dict(settings.properties)
    root = settings.device.split(":")[0].split(".")[0]
    try:
        if root in VIRTUAL_DEVICES:
            precision = properties.pop("INFERENCE_PRECISION_HINT", None)
            if precision is not None:
                for device in core.available_devices:
                    supported = core.get_property(device, "SUPPORTED_PROPERTIES")
                    if "INFERENCE_PRECISION_HINT" in supported:
                        core.set_property(device, {"INFERENCE_PRECISION_HINT": precision})
            if properties:
                core.set_property(root, properties)
        else:
            core.set_property(settings.device, properties)
    except Exception as exc:
        raise ov_error("configuring openvino core", exc) from exc


def _fit(
    ov: Any,
    model: Any,
    config: ModelConfig,
    settings: OpenVINOSettings,
    inputs: Sequence[PortInfo],
) -> Any:
    """The model with the config's datatypes on its tensors (OpenVINO converts, as in Triton)
    and its input shapes set: the batch dimension dynamic (or ``max_batch_size`` with
    ``SKIP_OV_DYNAMIC_BATCHSIZE``/``ENABLE_BATCH_PADDING``), the config's dims with
    ``RESHAPE_IO_LAYERS``."""
    from openvino.preprocess import PrePostProcessor

    max_batch = config.max_batch_size
    outputs = [port_info(ov, p, config.name, "output") for p in model.outputs]
    try:
        ppp = PrePostProcessor(model)
        for io in config.inputs:
            port = ports.find_port(inputs, io.name)
            assert port is not None  # validated
            element = getattr(ov.Type, DATATYPE_TO_ELEMENT[io.datatype])
            ppp.input(port.name).tensor().set_element_type(element)
        for io in config.outputs:
            port = ports.find_port(outputs, io.name)
            if port is None:
                raise invalid_arg(
                    f"unexpected inference output '{io.name}', allowed outputs are: "
                    + ", ".join(p.name for p in outputs)
                )
            if io.datatype in DATATYPE_TO_ELEMENT:
                element = getattr(ov.Type, DATATYPE_TO_ELEMENT[io.datatype])
                ppp.output(port.name).tensor().set_element_type(element)
        model = ppp.build()
    except TritonXError:
        raise
    except Exception as exc:
        raise ov_error("setting precisions", exc) from exc
    shapes: dict[str, Any] = {}
    batch_dim = max_batch if settings.static_batch else -1
    for io in config.inputs:
        port = ports.find_port(inputs, io.name)
        assert port is not None
        if settings.reshape_io:
            dims = list(io.reshape if io.reshape is not None else io.dims)
            if any(d < -1 or d == 0 for d in dims):
                raise TritonXError(
                    "openvino backend does not support dimensions values other than `-1` or "
                    "positive integers",
                    Code.INTERNAL,
                )
            shape = [batch_dim, *dims] if max_batch > 0 else dims
        elif max_batch > 0 and port.dims:
            shape = [batch_dim, *port.dims[1:]]
        else:
            continue
        if tuple(shape) != port.dims:
            shapes[port.name] = ov.PartialShape(shape)
    if shapes:
        try:
            model.reshape(shapes)
        except Exception as exc:
            hint = (
                " (set SKIP_OV_DYNAMIC_BATCHSIZE to YES to compile a fixed batch of max_batch_size)"
                if max_batch > 0 and not settings.static_batch
                else ""
            )
            raise ov_error("setting input shapes" + hint, exc) from exc
    return model


@dataclass(frozen=True, slots=True)
class _Tensor:
    """A configured input or output and the compiled model's port it maps to."""

    name: str
    port: Any
    datatype: DataType
    dims: tuple[int, ...]
    scalar: bool


class OpenVINOModelInstance(ModelInstance):
    """One compiled model and its infer request, serving one instance.

    Several requests whose shapes agree run as one batch (stacked on the batch axis); if such
    a batch fails, each request runs alone so only the bad one fails.
    """

    def __init__(
        self,
        ov: Any,
        compiled: Any,
        request: Any,
        config: ModelConfig,
        settings: OpenVINOSettings,
    ) -> None:
        self._ov = ov
        self._compiled = compiled
        self._request = request
        self._max_batch = config.max_batch_size
        self._padding = settings.batch_padding
        self._static = settings.static_batch and self._max_batch > 0
        self._inputs = {io.name: self._tensor(compiled.input(io.name), io) for io in config.inputs}
        self._outputs = [self._tensor(compiled.output(io.name), io) for io in config.outputs]

    @staticmethod
    def _tensor(port: Any, io: Any) -> _Tensor:
        shape = port.get_partial_shape()
        scalar = shape.rank.is_static and shape.rank.get_length() == 0
        return _Tensor(io.name, port, io.datatype, io.dims, scalar)

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """Run ``requests``: batched when possible, one by one otherwise.

        Marks Triton's compute phases on :func:`tritonx.compute_timer`: input (stacking and
        wrapping the inputs as OpenVINO tensors), infer (the infer request, and copying its
        outputs out of the request's buffers), output (slicing and splitting the results).
        """
        timer = tritonx.compute_timer()
        if len(requests) > 1 and self._max_batch > 0 and _same_shapes(requests):
            try:
                inputs = tritonx.concat_inputs(requests)
                wanted = self._wanted(requests)
                feeds, batch = self._feeds(inputs)
                timer.input_done()
                results = self._infer(feeds, wanted)
                timer.output_started()
                outputs = self._shape_outputs(results, wanted, batch)
            except Exception:
                pass  # run them one by one, so only the failing request gets the error
            else:
                return tritonx.split_outputs(requests, outputs)
        prepared: list[tuple[list[_Tensor], dict[str, Any], int] | BaseException] = []
        for request in requests:
            try:
                feeds, batch = self._feeds(request.inputs)
                prepared.append((self._wanted([request]), feeds, batch))
            except Exception as exc:
                prepared.append(_as_error(exc, "setting input tensors"))
        timer.input_done()
        ran: list[list[np.ndarray] | BaseException] = []
        for item in prepared:
            if isinstance(item, BaseException):
                ran.append(item)
                continue
            try:
                ran.append(self._infer(item[1], item[0]))
            except Exception as exc:
                ran.append(_as_error(exc, "running inference"))
        timer.output_started()
        responses: list[InferenceResponse] = []
        for item, result in zip(prepared, ran, strict=True):
            if isinstance(result, BaseException):
                responses.append(InferenceResponse.failed(_as_error(result, "inference")))
                continue
            assert not isinstance(item, BaseException)
            outputs = self._shape_outputs(result, item[0], item[2])
            responses.append(InferenceResponse(outputs=outputs))
        return responses

    def compiled_property(self, name: str) -> Any:
        """A property of the compiled model (``INFERENCE_PRECISION_HINT``, ``NUM_STREAMS``,
        ``PERFORMANCE_HINT``, ``INFERENCE_NUM_THREADS``...), as OpenVINO reports it."""
        if self._compiled is None:
            raise unavailable("the model instance is unloaded")
        return self._compiled.get_property(name)

    def unload(self) -> None:
        """Drop the infer request and the compiled model (OpenVINO frees their memory)."""
        self._request = None
        self._compiled = None

    # ------------------------------------------------------------------ internals

    def _wanted(self, requests: Sequence[InferenceRequest]) -> list[_Tensor]:
        names: set[str] = set()
        for request in requests:
            if request.requested_outputs is None:
                return self._outputs
            names.update(request.requested_outputs)
        return [t for t in self._outputs if t.name in names] or self._outputs

    def _feeds(self, inputs: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], int]:
        """The inputs as OpenVINO tensors (sharing the arrays' memory where they allow it),
        padded to ``max_batch_size`` with ``ENABLE_BATCH_PADDING``; and the batch size."""
        ov = self._ov
        batch = next(iter(inputs.values())).shape[0] if self._max_batch > 0 and inputs else 1
        if self._static and batch != self._max_batch:
            if not self._padding:
                raise TritonXError(
                    f"expected requests with batch size '{self._max_batch}', got '{batch}'... "
                    "this error can be avoided by setting 'ENABLE_BATCH_PADDING' parameter in "
                    "model configuration to 'YES' at a performance cost.",
                    Code.INTERNAL,
                )
        feeds: dict[str, Any] = {}
        for name, array in inputs.items():
            spec = self._inputs[name]
            if spec.scalar and array.size == 1:
                array = array.reshape(())
            if self._static and batch < self._max_batch:
                pad = np.zeros((self._max_batch - batch, *array.shape[1:]), array.dtype)
                array = np.concatenate([array, pad])
            if not (array.flags.c_contiguous and array.flags.writeable):
                array = np.array(array, order="C")  # OpenVINO shares only writable C arrays
            if spec.datatype is DataType.BF16:
                feeds[name] = ov.Tensor(array, array.shape, ov.Type.bf16)
            else:
                feeds[name] = ov.Tensor(array, shared_memory=True)
        return feeds, batch

    def _infer(self, feeds: Mapping[str, Any], wanted: Sequence[_Tensor]) -> list[np.ndarray]:
        """Run the infer request; the outputs are copied out of its reused buffers."""
        request = self._request
        for name, tensor in feeds.items():
            request.set_tensor(self._inputs[name].port, tensor)
        request.infer()
        results = []
        for spec in wanted:
            data = request.get_tensor(spec.port).data
            if spec.datatype is DataType.BF16:
                data = data.view(np.uint16)
            results.append(np.array(data, copy=True))
        return results

    def _shape_outputs(
        self, results: Sequence[np.ndarray], wanted: Sequence[_Tensor], batch: int
    ) -> dict[str, np.ndarray]:
        outputs: dict[str, np.ndarray] = {}
        for spec, array in zip(wanted, results, strict=True):
            if self._static and array.ndim and array.shape[0] != batch:
                array = array[:batch]  # drop the padding rows
            if spec.scalar:
                array = array.reshape((batch, *spec.dims) if self._max_batch > 0 else spec.dims)
            outputs[spec.name] = array
        return outputs


def _same_shapes(requests: Sequence[InferenceRequest]) -> bool:
    first = requests[0].inputs
    for request in requests[1:]:
        if request.inputs.keys() != first.keys():
            return False
        for name, array in request.inputs.items():
            if array.shape[1:] != first[name].shape[1:]:
                return False
    return True


def _as_error(exc: BaseException, what: str) -> TritonXError:
    return exc if isinstance(exc, TritonXError) else ov_error(what, exc)
