"""Request tracing (Triton's trace extension): sampling, per-request activity timestamps and
tensors, and where the traces go (the Triton JSON trace file, or OpenTelemetry spans).

The transports ask :meth:`TraceManager.sample` for a :class:`Trace` when a request arrives
(one attribute check when tracing is off) and put its :attr:`Trace.root` on the
:class:`~tritonx.types.InferenceRequest`; the core reports the activities Triton records as
the request flows (``REQUEST_START``, ``QUEUE_START``, ``COMPUTE_START``,
``COMPUTE_INPUT_END``, ``COMPUTE_OUTPUT_START``, ``COMPUTE_END``, ``REQUEST_END``), the
transports add their own (``HTTP_RECV_START``... ``GRPC_SEND_END``) and finish the trace once
the response is sent. Requests made on behalf of a traced request (ensemble steps, BLS calls
given ``parent=``) get a child :class:`RequestTrace` whose ``parent_id`` is the parent's id.

Everything here runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from tritonx._dataplane.heap import trim_heap
from tritonx._dataplane.trace_settings import (
    OPENTELEMETRY,
    TENSORS,
    TIMESTAMPS,
    TRITON,
    NewSetting,
    TraceConfig,
    check_trace_config,
    level_names,
    otel_missing,
)
from tritonx.errors import invalid_arg

if TYPE_CHECKING:
    from tritonx._dataplane.trace_otel import OtelExporter, OtelTrace

log = logging.getLogger("tritonx.trace")

_now = time.perf_counter_ns

#: Trace ids: 1, 2, ... (0 means "no parent"), shared by every trace of the process.
_ids = itertools.count(1)

#: Finished traces a setting holds before writing them to its file whatever the log frequency
#: (tritonserver holds them until ``log_frequency`` traces accumulated, or until shutdown with
#: 0: a client setting level TENSORS, rate 1, count -1 could grow the server without limit).
MAX_HELD_TRACES = 1024
#: Serialized bytes of finished traces a setting holds before writing them to its file.
MAX_HELD_BYTES = 4 * 1024 * 1024
#: Bytes of traces written to files after which the heap is trimmed (see :func:`tritonx._dataplane.heap.trim_heap`).
TRIM_AFTER_BYTES = 4 * 1024 * 1024


# ---------------------------------------------------------------------------------- files


class TraceFile:
    """The Triton-mode trace file: one JSON array, written as traces are saved, closed with
    ``]`` at shutdown (until then the array is open: ``[{...},{...}``); with a log frequency,
    each batch of traces goes to its own ``<file>.<n>`` (tritonserver
    ``TraceManager::TraceFile``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._index = 0
        self._file: Any = None
        self._closed = False
        #: bytes written since the heap was last trimmed
        self._untrimmed = 0

    def save(self, traces: list[bytes], to_index_file: bool) -> None:
        """Append ``traces`` (serialized entries) to the file, or write them to the next
        indexed file."""
        body = b",".join(traces)
        self._untrimmed += len(body)
        if self._untrimmed >= TRIM_AFTER_BYTES:
            self._untrimmed = 0
            trim_heap()
        try:
            if to_index_file:
                path = f"{self.name}.{self._index}"
                self._index += 1
                with open(path, "wb") as out:
                    out.write(b"[" + body + b"]")
                return
            if self._file is None:
                if self._closed:
                    return
                self._file = open(self.name, "wb")
                self._file.write(b"[")
            else:
                self._file.write(b",")
            self._file.write(body)
            self._file.flush()
        except OSError as exc:
            log.error("failed creating trace file: %s", exc)

    def close(self) -> None:
        """Close the array (``]``) if anything was written."""
        self._closed = True
        if self._file is not None:
            try:
                self._file.write(b"]")
                self._file.close()
            except OSError as exc:
                log.error("failed closing trace file: %s", exc)
            self._file = None


# ---------------------------------------------------------------------------------- settings


class TraceSetting:
    """One trace setting in force (the global one, or one model's): its values, what it
    specifies itself, and its sampling counters (tritonserver ``TraceSetting``).

    Finished traces are held, then written together: to ``<file>.<n>`` every
    ``log_frequency`` traces, or to ``<file>`` at shutdown with ``log_frequency`` 0, as
    tritonserver does; unlike tritonserver, once :data:`MAX_HELD_TRACES` traces or
    :data:`MAX_HELD_BYTES` bytes are held they are written at once (to the next indexed file
    with a log frequency, appended to ``<file>`` without one), so what a setting holds in
    memory stays bounded whatever a client sets.
    """

    def __init__(
        self,
        level: int,
        rate: int,
        count: int,
        log_frequency: int,
        file: TraceFile,
        mode: str,
        options: tuple[tuple[str, str], ...],
        specified: frozenset[str] = frozenset(),
    ) -> None:
        self.level = level
        self.rate = rate
        self.count = count
        self.log_frequency = log_frequency
        self.file = file
        self.mode = mode
        self.options = options
        #: which of level, rate, count, log_frequency this setting sets itself
        self.specified = specified
        self.sample = 0
        self.created = 0
        self.collected = 0
        self.in_stream = 0
        self.stream: list[bytes] = []
        #: bytes of the traces in :attr:`stream`
        self.held_bytes = 0
        #: traces sampled under this setting and not yet written
        self.inflight = 0
        #: replaced by an update: write what is left once its last trace is written
        self.retired = False
        if not level:
            self.invalid_reason = "tracing is disabled"
        elif rate == 0:
            self.invalid_reason = "sample rate must be non-zero"
        elif mode == TRITON and not file.name:
            self.invalid_reason = "trace file name is not given"
        else:
            self.invalid_reason = ""

    @property
    def valid(self) -> bool:
        """Whether requests may be sampled (tritonserver ``Valid()``)."""
        return not self.invalid_reason and self.count != 0

    def take(self, force: bool = False) -> bool:
        """Count one request; whether to trace it (tritonserver ``SampleTrace``)."""
        hit = False
        if self.rate != 0:
            if not self.valid and not force:
                return False
            self.sample += 1
            hit = self.sample % self.rate == 0
            if hit and self.count > 0:
                self.count -= 1
                self.created += 1
            elif hit and self.count == 0:
                hit = False
        return hit or force

    def write(self, entries: list[bytes]) -> None:
        """A finished trace's entries (tritonserver ``WriteTrace``): kept until the log
        frequency (or the count) is reached, then saved to an indexed file."""
        self.inflight -= 1
        self.in_stream += 1
        self.collected += 1
        serialized = b",".join(entries)
        self.stream.append(serialized)
        self.held_bytes += len(serialized)
        if (self.count == 0 and self.collected == self.created) or (
            self.log_frequency and self.in_stream >= self.log_frequency
        ):
            self._save(True)
        elif (
            self.in_stream >= MAX_HELD_TRACES
            or self.held_bytes >= MAX_HELD_BYTES
            or (self.retired and self.inflight <= 0)
        ):
            self.flush()

    def _save(self, to_index_file: bool) -> None:
        stream, self.stream = self.stream, []
        self.in_stream = 0
        self.held_bytes = 0
        if stream:
            self.file.save(stream, to_index_file)

    def flush(self) -> None:
        """Save what is held (at shutdown, when the setting was replaced, or once it holds
        :data:`MAX_HELD_TRACES` traces or :data:`MAX_HELD_BYTES` bytes)."""
        if self.mode == TRITON and self.stream:
            self._save(bool(self.log_frequency))


# ---------------------------------------------------------------------------------- traces


class RequestTrace:
    """The trace of one request (Triton's ``InferenceTrace``): an id, its parent's id (0 for
    a request from a client) and the activities reported for it.

    The core calls :meth:`start` when the request is accepted and :meth:`end` when it is
    answered; schedulers :meth:`report` the timestamps in between. Give a request made on
    behalf of this one ``trace=this.spawn_child()`` (the data plane does that for
    ``ServerHandle.infer(..., parent=request)``).
    """

    __slots__ = ("_entries", "_trace", "id", "model_name", "model_version", "parent_id", "started")

    def __init__(self, trace: Trace, parent_id: int = 0) -> None:
        self.id = next(_ids)
        self.parent_id = parent_id
        self.model_name = ""
        self.model_version = -1
        self.started = False
        self._trace: Trace = trace
        self._entries: list[bytes] = trace.stream(self.id)

    @property
    def trace(self) -> Trace:
        """The sampled trace this request belongs to."""
        return self._trace

    @property
    def timestamps(self) -> bool:
        """Whether timestamps are recorded (level TIMESTAMPS)."""
        return bool(self._trace.level & TIMESTAMPS)

    @property
    def tensors(self) -> bool:
        """Whether tensors are recorded (level TENSORS, ``triton`` mode)."""
        return bool(self._trace.level & TENSORS) and self._trace.otel is None

    def spawn_child(self) -> RequestTrace:
        """A trace for a request made on behalf of this one (``parent_id`` = this id)."""
        return RequestTrace(self._trace, self.id)

    def start(self, model_name: str, model_version: int, request_id: str) -> None:
        """The request was accepted for ``model_name`` at ``model_version``: REQUEST_START."""
        self.model_name = model_name
        self.model_version = model_version
        self.started = True
        trace = self._trace
        trace.pending += 1
        if not trace.level & TIMESTAMPS:
            return
        ns = _now()
        if trace.otel is not None:
            trace.otel.request_start(self, request_id, ns)
            return
        header: dict[str, Any] = {
            "id": self.id,
            "model_name": model_name,
            "model_version": model_version,
        }
        if request_id:
            header["request_id"] = request_id
        if self.parent_id:
            header["parent_id"] = self.parent_id
        self._entries.append(orjson.dumps(header))
        self._timestamp("REQUEST_START", ns)

    def report(self, activity: str, ns: int) -> None:
        """A timestamp activity (QUEUE_START, COMPUTE_START...) at ``ns``
        (``time.perf_counter_ns()``). Ignored once the request has ended (a decoupled
        model's last response can beat its execution's timings to the event loop)."""
        trace = self._trace
        if not trace.level & TIMESTAMPS or not self.started:
            return
        if trace.otel is not None:
            trace.otel.activity(self, activity, ns)
        else:
            self._timestamp(activity, ns)

    def _timestamp(self, activity: str, ns: int) -> None:
        self._entries.append(
            b'{"id":%d,"timestamps":[{"name":"%s","ns":%d}]}' % (self.id, activity.encode(), ns)
        )

    def report_tensors(self, activity: str, tensors: Mapping[str, np.ndarray]) -> None:
        """Tensors at TENSOR_QUEUE_INPUT / TENSOR_BACKEND_OUTPUT (level TENSORS)."""
        if not self.tensors or not self.started:
            return
        for name, array in tensors.items():
            self._entries.append(
                orjson.dumps(
                    {"id": self.id, "activity": activity, "tensor": tensor_json(name, array)}
                )
            )

    def end(self) -> None:
        """The request was answered: REQUEST_END; the trace is written once every request
        of it and its transport are done."""
        if not self.started:
            return
        self.report("REQUEST_END", _now())
        self.started = False
        self._trace.release()


class Trace:
    """A sampled trace: the client's request (:attr:`root`), the requests made on its behalf
    and the transport's own timestamps (tritonserver ``TraceManager::Trace``).

    The transport calls :meth:`capture` for its timestamps and :meth:`finish` once the
    response is sent.
    """

    def __init__(
        self, manager: TraceManager, setting: TraceSetting, otel: OtelTrace | None
    ) -> None:
        self.manager = manager
        self.setting = setting
        self.level = setting.level
        self.otel = otel
        self._streams: dict[int, list[bytes]] = {}
        #: the transport, plus every started and not yet ended request
        self.pending = 1
        self.root = RequestTrace(self)
        self._root_id = self.root.id
        if otel is not None:
            otel.bind(self.root)

    @property
    def id(self) -> int:
        """The id of the client's request's trace."""
        return self._root_id

    def stream(self, trace_id: int) -> list[bytes]:
        entries: list[bytes] = []
        self._streams[trace_id] = entries
        return entries

    def capture(self, name: str, ns: int) -> None:
        """A transport timestamp (HTTP_RECV_START, GRPC_SEND_END...) of the root request."""
        if not self.level & TIMESTAMPS:
            return
        if self.otel is not None:
            self.otel.capture(name, ns)
        else:
            self.root._timestamp(name, ns)

    def finish(self) -> None:
        """The transport is done with the trace (the response was sent, or failed)."""
        self.release()

    def release(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.manager.complete(self)

    def clear(self) -> None:
        """Drop the entries once written (whatever still refers to the trace, e.g. a
        request object kept by a backend, no longer keeps them)."""
        for entries in self._streams.values():
            entries.clear()

    def entries(self) -> list[bytes]:
        """Every entry of the trace, request by request (parent first)."""
        out: list[bytes] = []
        for trace_id in sorted(self._streams):
            out.extend(self._streams[trace_id])
        return out


def tensor_json(name: str, array: np.ndarray) -> dict[str, str]:
    """A tensor as a TENSORS trace records it: comma-separated values, the shape and the
    datatype (FP16/BF16 data is left empty, as tritonserver does; BYTES elements are quoted).
    """
    from tritonx.datatypes import DataType

    try:
        datatype = DataType.from_numpy(array.dtype).value
    except Exception:
        datatype = str(array.dtype)
    flat = np.asarray(array).reshape(-1)
    if datatype in ("FP16", "BF16"):
        data = ""
    elif flat.dtype == object:
        data = ",".join(
            '"' + (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) + '"'
            for v in flat
        )
    elif flat.dtype == np.bool_:
        data = ",".join("1" if v else "0" for v in flat)
    elif flat.dtype.kind == "f":
        data = ",".join(f"{float(v):g}" for v in flat)
    else:
        data = ",".join(str(int(v)) for v in flat)
    return {
        "name": name,
        "data": data,
        "shape": ",".join(str(d) for d in array.shape),
        "dtype": datatype,
    }


# ---------------------------------------------------------------------------------- manager


class TraceManager:
    """The server's trace settings (global and per model) and sampler.

    :param config: the start-up configuration (``--trace-config``).
    """

    def __init__(self, config: TraceConfig | None = None) -> None:
        config = config or TraceConfig()
        check_trace_config(config)
        self.config = config
        self._files: dict[str, TraceFile] = {}
        file = self._file(config.file)
        # the start-up setting (what a cleared global setting returns to) and the global one
        self._default, self._global = (
            TraceSetting(
                config.level,
                config.rate,
                config.count,
                config.log_frequency,
                file,
                config.mode,
                config.options,
            )
            for _ in range(2)
        )
        self._models: dict[str, TraceSetting] = {}
        self._fallback: set[str] = set()
        self._retired: list[TraceSetting] = []
        self.exporter: OtelExporter | None = None
        if config.mode == OPENTELEMETRY:
            missing = otel_missing()
            if missing is not None:
                raise invalid_arg(missing)
            from tritonx._dataplane.trace_otel import OtelExporter

            self.exporter = OtelExporter(config.options)
            if config.level & TENSORS:
                log.warning(
                    "trace level TENSORS is not supported in opentelemetry mode: only "
                    "timestamps are exported"
                )
        #: whether any setting may sample: the transports' one check per request
        self.active = False
        self._refresh()
        if config.level and not self._global.valid and self._global.invalid_reason:
            log.warning(
                "tracing is set to %s but no trace is taken: %s",
                "|".join(level_names(config.level)),
                self._global.invalid_reason,
            )

    # ------------------------------------------------------------------ settings

    def _file(self, name: str) -> TraceFile:
        file = self._files.get(name)
        if file is None:
            file = self._files[name] = TraceFile(name)
        return file

    def _refresh(self) -> None:
        self.active = self._global.valid or any(s.valid for s in self._models.values())
        if self.exporter is not None and not self.active:
            # opentelemetry: a request carrying a context is traced even at rate 0
            self.active = bool(self._global.level) or any(s.level for s in self._models.values())

    def setting(self, model_name: str = "") -> TraceSetting:
        """The setting requests for ``model_name`` are sampled with (the global one when the
        model has none, or for "")."""
        return self._models.get(model_name, self._global) if model_name else self._global

    def update(self, model_name: str, new: NewSetting) -> None:
        """Apply a trace-extension update (tritonserver ``UpdateTraceSetting``).

        :raises TritonXError: INVALID_ARG "Attempting to set invalid trace setting :..." when
            the result could not trace (except when it turns tracing off).
        """
        self._update(model_name, new)
        if not model_name:
            for name in list(self._fallback):
                self._update(name, NewSetting())
        self._refresh()

    def _update(self, model_name: str, new: NewSetting) -> None:
        if model_name:
            current = self._models.get(model_name)
            fallback = self._global
        else:
            current = self._global
            fallback = self._default
        fields = ("level", "rate", "count", "log_frequency")
        values: dict[str, int] = {name: getattr(fallback, name) for name in fields}
        specified = set()
        for name in fields:
            if getattr(new, f"clear_{name}"):
                continue
            given = getattr(new, name)
            if given is not None:
                values[name] = given
                specified.add(name)
            elif current is not None and name in current.specified:
                values[name] = getattr(current, name)
                specified.add(name)
        if model_name:
            if not specified:
                self._retire(self._models.pop(model_name, None))
                self._fallback.discard(model_name)
                return
            # the trace file cannot be set per model, so a model always follows the global
            # setting for it (tritonserver keeps it in 'fallback_used_models_' too)
            self._fallback.add(model_name)
        setting = TraceSetting(
            values["level"],
            values["rate"],
            values["count"],
            values["log_frequency"],
            fallback.file,
            fallback.mode,
            fallback.options,
            frozenset(specified),
        )
        if not setting.valid and setting.level:
            raise invalid_arg(f"Attempting to set invalid trace setting :{setting.invalid_reason}")
        if model_name:
            self._retire(self._models.get(model_name))
            self._models[model_name] = setting
        else:
            self._retire(self._global)
            self._global = setting

    def _retire(self, setting: TraceSetting | None) -> None:
        if setting is None:
            return
        setting.retired = True
        if setting.inflight <= 0:
            setting.flush()
        else:
            self._retired.append(setting)

    def describe(self, model_name: str = "") -> dict[str, str | list[str]]:
        """The settings as the trace extension returns them, in tritonserver's order."""
        s = self.setting(model_name)
        out: dict[str, str | list[str]] = {
            "trace_level": level_names(s.level),
            "trace_rate": str(s.rate),
            "trace_count": str(s.count),
        }
        if s.mode == TRITON:
            out["log_frequency"] = str(s.log_frequency)
            out["trace_file"] = s.file.name
        out["trace_mode"] = s.mode
        for key, value in s.options:
            out[key] = value
        return out

    def describe_lists(self, model_name: str = "") -> dict[str, list[str]]:
        """:meth:`describe` with every value a list (gRPC ``TraceSettingResponse``; a
        repeated option such as ``resource`` keeps all its values)."""
        s = self.setting(model_name)
        out = {
            key: value if isinstance(value, list) else [value]
            for key, value in self.describe(model_name).items()
        }
        for key in {k for k, _ in s.options}:
            out[key] = [v for k, v in s.options if k == key]
        return out

    # ------------------------------------------------------------------ sampling

    def sample(self, model_name: str, headers: Mapping[str, str] | None = None) -> Trace | None:
        """A new :class:`Trace` for a request to ``model_name`` if it is sampled, else None.

        ``headers`` (HTTP headers or gRPC metadata) may carry a W3C ``traceparent``: in
        ``opentelemetry`` mode such a request is always traced, under that context.
        """
        setting = self.setting(model_name)
        context = None
        force = False
        if self.exporter is not None and setting.level and headers is not None:
            context = self.exporter.extract(headers)
            force = context is not None
        if not setting.take(force):
            return None
        setting.inflight += 1
        otel = self.exporter.start(context) if self.exporter is not None else None
        return Trace(self, setting, otel)

    def complete(self, trace: Trace) -> None:
        """Every part of ``trace`` is done: write it (or end its root span)."""
        setting = trace.setting
        if trace.otel is not None:
            setting.inflight -= 1
            trace.otel.finish()
            return
        setting.write(trace.entries())
        trace.clear()
        if setting.retired and setting.inflight <= 0 and setting in self._retired:
            self._retired.remove(setting)

    def close(self) -> None:
        """Save every trace still held and close the trace files (at shutdown)."""
        for setting in self._settings():
            setting.flush()
        self._retired.clear()
        for file in self._files.values():
            file.close()

    async def aclose(self) -> None:
        """:meth:`close`, then export the OpenTelemetry spans still queued (off the loop:
        the collector may be served by this very loop)."""

        self.close()
        if self.exporter is not None:
            await asyncio.to_thread(self.exporter.shutdown)

    def _settings(self) -> Iterator[TraceSetting]:
        yield from self._retired
        yield self._global
        yield from self._models.values()
