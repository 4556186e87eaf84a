"""Model conventions: which tritonx models the OpenAI API can serve, and how a request is
written for them and their answers read.

Generation (``/v1/completions``, ``/v1/chat/completions``): a model with a BYTES input
``text_input`` and a BYTES output ``text_output``, in one of Triton's two formats:

* **vllm** (Triton's vLLM backend): ``text_input``, ``stream`` (BOOL), ``sampling_parameters``
  (BYTES, JSON: ``max_tokens``, ``temperature``, ``top_p``, ``seed``, ``stop``...),
  ``exclude_input_in_output`` (BOOL), and when the model declares them ``return_logprobs``,
  ``return_finish_reason``, ``return_num_input_tokens``, ``return_num_output_tokens``
  (outputs ``logprobs``, ``finish_reason``, ``num_input_tokens``, ``num_output_tokens``).
* **tensorrtllm** (TensorRT-LLM's ensemble and BLS models): one tensor per parameter:
  ``text_input``, ``max_tokens``, ``stream``, ``stop_words``, ``bad_words``, ``temperature``,
  ``top_p`` / ``runtime_top_p``, ``top_k`` / ``runtime_top_k``, ``seed`` / ``random_seed``,
  ``frequency_penalty``, ``presence_penalty``, ``repetition_penalty``, ``min_tokens`` /
  ``min_length``, ``exclude_input_in_output``, ``beam_width``, ``num_return_sequences``,
  ``return_num_input_tokens``, ``return_num_output_tokens``.

Only the inputs a model declares are sent (with its datatypes and shapes); a model with a
required input outside its format's list does not follow the convention. A decoupled model
streams (``stream`` = true when the client streams), another answers once.

Embeddings (``/v1/embeddings``): a model with exactly one input, BYTES, and one output, FP32
(e.g. the MiniLM ensemble: TEXT -> EMBEDDING): the texts go in batches of the model's
``max_batch_size`` (or into its variable first dimension), one vector per text comes back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from tritonx import DataType, ModelConfig
from tritonx.config import IOConfig
from tritonx_frontend_openai.errors import OpenAIError, invalid


@dataclass(frozen=True)
class GenerateParams:
    """What one generation request asks of a model (one choice)."""

    prompt: str
    #: the client streams (and the model is decoupled): ask the model to stream
    stream: bool
    max_tokens: int
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    #: top log probabilities wanted per token (0: the chosen token's only); None: none
    logprobs: int | None = None
    #: the answer starts with the prompt (the frontend adds it: models are always asked to
    #: exclude the prompt from their output)
    echo: bool = False
    #: vLLM's sampling parameters beyond OpenAI's (top_k, min_p, repetition_penalty,
    #: min_tokens, ignore_eos), when the client sent them
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Output:
    """What one response of a generation model says."""

    text: bytes
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: vLLM's log probabilities of this response's tokens (a list of {token id: {logprob,
    #: rank, decoded_token}}), when returned
    logprobs: list[dict[str, Any]] | None = None
    finish_reason: str | None = None


#: vLLM-format inputs this frontend writes.
VLLM_INPUTS = frozenset(
    {
        "text_input",
        "stream",
        "sampling_parameters",
        "exclude_input_in_output",
        "sampling_param_exclude_input_from_output",
        "return_logprobs",
        "return_finish_reason",
        "return_cumulative_logprob",
        "return_num_input_tokens",
        "return_num_output_tokens",
    }
)

#: TensorRT-LLM-format inputs this frontend writes.
TRTLLM_INPUTS = frozenset(
    {
        "text_input",
        "max_tokens",
        "stream",
        "stop_words",
        "bad_words",
        "temperature",
        "top_p",
        "runtime_top_p",
        "top_k",
        "runtime_top_k",
        "seed",
        "random_seed",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "min_tokens",
        "min_length",
        "exclude_input_in_output",
        "beam_width",
        "num_return_sequences",
        "return_num_input_tokens",
        "return_num_output_tokens",
    }
)

#: the vLLM sampling parameters beyond OpenAI's that a request may carry, and the
#: TensorRT-LLM inputs they go to
EXTRA_SAMPLING: dict[str, tuple[str, ...]] = {
    "top_k": ("top_k", "runtime_top_k"),
    "min_p": (),
    "repetition_penalty": ("repetition_penalty",),
    "min_tokens": ("min_tokens", "min_length"),
    "ignore_eos": (),
}

_ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")


class Generator:
    """A generation model's convention (see the module docstring).

    :ivar format: ``vllm`` or ``tensorrtllm``.
    :ivar decoupled: the model streams its responses.
    :ivar logprobs: the model returns vLLM's log probabilities when asked.
    """

    kind = "generate"

    def __init__(self, config: ModelConfig, fmt: str) -> None:
        self.format = fmt
        self.decoupled = config.decoupled
        self.batching = config.max_batch_size > 0
        self.inputs: dict[str, IOConfig] = dict(config.input_map)
        outputs = config.output_map
        self.echo_input = next((n for n in _ECHO_INPUTS if n in self.inputs), None)
        self.logprobs = fmt == "vllm" and "return_logprobs" in self.inputs and "logprobs" in outputs

    def request_inputs(self, params: GenerateParams) -> dict[str, np.ndarray]:
        """The input tensors of one request for ``params``.

        :raises OpenAIError: a value does not fit the model's tensor (too many stop words for
            a fixed shape).
        """
        values: dict[str, Any] = {}
        defaults: dict[str, Any] = {}
        if self.format == "vllm":
            values["text_input"] = params.prompt
            values["stream"] = params.stream
            values["sampling_parameters"] = orjson.dumps(_sampling_parameters(params))
            if self.echo_input is not None:
                values[self.echo_input] = True  # the frontend echoes the prompt itself
            values["return_logprobs"] = params.logprobs is not None
            values["return_finish_reason"] = True
            values["return_cumulative_logprob"] = False
            values["return_num_input_tokens"] = True
            values["return_num_output_tokens"] = True
        else:
            values, defaults = _trtllm_values(params)
        out: dict[str, np.ndarray] = {}
        for name, io in self.inputs.items():
            if name in values:
                out[name] = tensor(io, values[name], self.batching)
            elif name in defaults and not io.optional:
                out[name] = tensor(io, defaults[name], self.batching)
        return out

    def read(self, outputs: Mapping[str, np.ndarray]) -> Output:
        """One response's text (bytes: a token may end inside a UTF-8 character), counts,
        log probabilities and finish reason, as far as the model returned them."""
        text = outputs.get("text_output")
        out = Output(text=_join_bytes(text) if text is not None else b"")
        prompt = outputs.get("num_input_tokens")
        if prompt is not None and prompt.size:
            out.prompt_tokens = int(np.asarray(prompt).reshape(-1)[0])
        completion = outputs.get("num_output_tokens")
        if completion is not None and completion.size:
            out.completion_tokens = int(np.asarray(completion).reshape(-1).sum())
        logprobs = outputs.get("logprobs")
        if logprobs is not None and logprobs.size:
            raw = _join_bytes(logprobs)
            try:
                parsed = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, list):
                out.logprobs = parsed
        reason = outputs.get("finish_reason")
        if reason is not None and reason.size:
            out.finish_reason = _join_bytes(reason).decode("utf-8", "replace") or None
        return out


class Embedder:
    """An embedding model's convention: one BYTES input, one FP32 output."""

    kind = "embed"

    def __init__(self, config: ModelConfig) -> None:
        (self.input,) = config.inputs
        (self.output,) = config.outputs
        self.decoupled = config.decoupled
        self.max_batch_size = config.max_batch_size
        dims = self.output.dims
        self.dimensions = dims[-1] if dims and dims[-1] > 0 else None

    def batches(self, texts: Sequence[str]) -> list[tuple[int, dict[str, np.ndarray]]]:
        """(index of the first text, the request's inputs) for each request ``texts`` take."""
        io = self.input
        if self.max_batch_size > 0:
            size = self.max_batch_size
            shape_of = _fit(io.dims, 1)
            if shape_of is None:
                raise invalid(f"the embedding model's input {io.name} does not take one text")
            out = []
            for start in range(0, len(texts), size):
                chunk = texts[start : start + size]
                array = _bytes_array(chunk).reshape((len(chunk), *shape_of))
                out.append((start, {io.name: array}))
            return out
        if any(d < 0 for d in io.dims):  # all the texts in the variable dimension
            shape = _fit(io.dims, len(texts))
            assert shape is not None
            return [(0, {io.name: _bytes_array(texts).reshape(shape)})]
        shape = _fit(io.dims, 1)
        if shape is None:
            raise invalid(f"the embedding model's input {io.name} does not take one text")
        return [(i, {io.name: _bytes_array([t]).reshape(shape)}) for i, t in enumerate(texts)]

    def vectors(self, outputs: Mapping[str, np.ndarray], count: int) -> np.ndarray:
        """The ``count`` vectors of one response, float32, one row each."""
        array = outputs.get(self.output.name)
        if array is None or array.size == 0 or array.size % count:
            raise OpenAIError(
                500,
                f"the embedding model returned no {self.output.name} of {count} vectors",
                type="server_error",
            )
        return np.ascontiguousarray(np.asarray(array, dtype=np.float32).reshape(count, -1))


Convention = Generator | Embedder


def detect(config: ModelConfig, request_format: str = "auto") -> Convention | str:
    """The convention ``config`` follows, or why it follows none (a sentence)."""
    inputs, outputs = config.input_map, config.output_map
    text_in, text_out = inputs.get("text_input"), outputs.get("text_output")
    if text_in is not None or text_out is not None:
        if text_in is None or text_in.datatype is not DataType.BYTES:
            return "no BYTES input text_input"
        if text_out is None or text_out.datatype is not DataType.BYTES:
            return "no BYTES output text_output"
        fmt = request_format
        if fmt == "auto":
            vllm = config.backend == "vllm" or "sampling_parameters" in inputs
            fmt = "vllm" if vllm else "tensorrtllm"
        known = VLLM_INPUTS if fmt == "vllm" else TRTLLM_INPUTS
        unknown = [n for n in config.required_inputs if n not in known]
        if unknown:
            return f"required input(s) {', '.join(unknown)} outside the {fmt} format"
        return Generator(config, fmt)
    if len(config.inputs) == 1 and len(config.outputs) == 1:
        (source,), (target,) = config.inputs, config.outputs
        if source.datatype is DataType.BYTES and target.datatype is DataType.FP32:
            return Embedder(config)
    return "neither text_input -> text_output (generation) nor one BYTES input -> one FP32 output (embeddings)"


def tensor(io: IOConfig, value: Any, batching: bool) -> np.ndarray:
    """``value`` (a scalar, or a list of strings) as the tensor ``io`` of one request."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    shape = _fit(io.dims, len(items))
    if shape is None:
        raise invalid(
            f"the model's input {io.name} (dims {list(io.dims)}) cannot hold {len(items)} values",
            param="stop" if io.name == "stop_words" else None,
        )
    if batching:
        shape = (1, *shape)
    if io.datatype is DataType.BYTES:
        return _bytes_array(items).reshape(shape)
    dtype = io.numpy_dtype
    if np.issubdtype(dtype, np.unsignedinteger):
        items = [int(v) % (1 << (8 * np.dtype(dtype).itemsize)) for v in items]
    return np.asarray(items, dtype=dtype).reshape(shape)


def _fit(dims: Sequence[int], count: int) -> tuple[int, ...] | None:
    """``dims`` with the last variable dimension holding ``count`` elements (the others 1),
    or None when ``count`` elements do not fit."""
    shape = [d if d > 0 else 1 for d in dims]
    variable = [i for i, d in enumerate(dims) if d < 0]
    if variable:
        shape[variable[-1]] = count
    if math.prod(shape) != count:
        return None
    return tuple(shape)


def _bytes_array(items: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item.encode("utf-8") if isinstance(item, str) else item
    return out


def _join_bytes(array: np.ndarray) -> bytes:
    parts = []
    for item in np.asarray(array).reshape(-1):
        if isinstance(item, bytes):
            parts.append(item)
        elif isinstance(item, str):
            parts.append(item.encode("utf-8"))
        else:
            parts.append(str(item).encode("utf-8"))
    return b"".join(parts)


def _sampling_parameters(params: GenerateParams) -> dict[str, Any]:
    out: dict[str, Any] = {"max_tokens": params.max_tokens}
    for name in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty"):
        value = getattr(params, name)
        if value is not None:
            out[name] = value
    if params.stop:
        out["stop"] = list(params.stop)
    if params.logprobs is not None:
        out["logprobs"] = max(params.logprobs, 1)
    out.update(params.extra)
    return out


def _trtllm_values(params: GenerateParams) -> tuple[dict[str, Any], dict[str, Any]]:
    """The TensorRT-LLM inputs' values the request sets, and the defaults (OpenAI's) of the
    others, sent only to a model that requires them."""
    given: dict[str, Any] = {
        "text_input": params.prompt,
        "max_tokens": params.max_tokens,
        "stream": params.stream,
        "exclude_input_in_output": True,  # the frontend echoes the prompt itself
        "return_num_input_tokens": True,
        "return_num_output_tokens": True,
    }
    if params.stop:
        given["stop_words"] = list(params.stop)
    pairs: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("temperature", ("temperature",)),
        ("top_p", ("top_p", "runtime_top_p")),
        ("seed", ("seed", "random_seed")),
        ("frequency_penalty", ("frequency_penalty",)),
        ("presence_penalty", ("presence_penalty",)),
    )
    for name, targets in pairs:
        value = getattr(params, name)
        if value is not None:
            given.update(dict.fromkeys(targets, value))
    for name, targets in EXTRA_SAMPLING.items():
        if name in params.extra:
            given.update(dict.fromkeys(targets, params.extra[name]))
    defaults: dict[str, Any] = {
        "stop_words": [""],
        "bad_words": [""],
        "temperature": 1.0,
        "top_p": 1.0,
        "runtime_top_p": 1.0,
        "top_k": 0,
        "runtime_top_k": 0,
        "seed": 0,
        "random_seed": 0,
        "frequency_penalty": 0.0,
        "presence_penalty": 0.0,
        "repetition_penalty": 1.0,
        "min_tokens": 0,
        "min_length": 0,
        "beam_width": 1,
        "num_return_sequences": 1,
    }
    return given, defaults


__all__ = [
    "Convention",
    "Embedder",
    "GenerateParams",
    "Generator",
    "Output",
    "detect",
    "tensor",
]
