"""Server settings (from the CLI or the in-process API) and a read-only view of a model config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from tritonx.datatypes import DataType
from tritonx.proto import model_config_pb2
from tritonx.types import TensorSpec

#: Where the example repository served by ``tritonx serve`` without arguments lives.
EXAMPLE_REPOSITORY = Path(__file__).parent / "examples" / "model_repository"


@dataclass(frozen=True)
class ServerSettings:
    """Everything ``tritonx serve`` (or ``tritonx.Server(...)``) can be told.

    Field names follow tritonserver's flags (``--model-control-mode`` → ``model_control_mode``).
    Port 0 picks a free port (tests); ``None`` for a listener disables it.
    """

    #: repository paths or URLs (``s3://...`` needs a repository plugin for that scheme)
    model_repository: tuple[str, ...] = ()
    model_control_mode: str = "none"  # none | explicit | poll
    load_model: tuple[str, ...] = ()
    repository_poll_secs: float = 15.0
    #: tritonx only (``--reload``, :mod:`tritonx._core.reloader`): watch the local
    #: repositories and reload a model whose files change (development; needs watchfiles)
    reload: bool = False
    exit_on_error: bool = True
    strict_readiness: bool = True
    disable_auto_complete_config: bool = False
    model_load_thread_count: int = 4
    #: ``--model-load-retry-count``: times a version whose instances failed to load or warm
    #: up is created again before the load fails (Triton's ``CreateModel`` retries)
    model_load_retry_count: int = 0
    #: ``--model-config-name``: read ``<model>/configs/<name>.pbtxt`` where it exists
    #: instead of ``config.pbtxt`` (:func:`tritonx._core.model_config.config_path`)
    model_config_name: str = ""
    #: ``--model-namespacing``: models of the same name may live in several repositories;
    #: each repository is its own namespace (Triton's model namespacing)
    model_namespacing: bool = False
    exit_timeout_secs: float = 30.0
    #: tritonx only (``--model-unload-timeout-secs``): seconds an unload (also the one a
    #: reload or a repository poll does) waits for the version's requests in flight and its
    #: instances' unload; then queued requests fail, executions still running are aborted (a
    #: python model's worker process is killed) or abandoned, and the unload completes
    model_unload_timeout_secs: float = 30.0
    #: tritonx only (``--model-load-on-demand``, :mod:`tritonx._core.residency`): a request
    #: for a model that is in a repository but not loaded loads it first (explicit or poll
    #: mode; poll mode then loads nothing at start-up)
    model_load_on_demand: bool = False
    #: tritonx only: seconds a request waits for its model's on-demand load (and for room
    #: under the budgets); then UNAVAILABLE. 0: no limit
    model_load_on_demand_timeout_secs: float = 60.0
    #: tritonx only (``--max-loaded-models``): most models loaded at once; the least recently
    #: used ones with no request in flight are unloaded to make room. 0: no limit
    max_loaded_models: int = 0
    #: tritonx only (``--model-memory-budget``): bytes the loaded models may add to the
    #: server's resident memory (its workers' included); the least recently used ones are
    #: unloaded to make room. 0: no limit
    model_memory_budget: int = 0
    #: tritonx only (``--model-idle-unload-secs``): unload a model no request used for this
    #: many seconds (pinned models excepted). 0: never
    model_idle_unload_secs: float = 0.0
    #: tritonx only (``--model-min-residency-secs``): a model loaded less than this many
    #: seconds ago is not unloaded to make room for a request's model; a request whose model
    #: could only get room that way is refused at once (UNAVAILABLE). 0: no minimum
    model_min_residency_secs: float = 1.0
    #: tritonx only (``--unknown-model-rescan-secs``): with ``--model-load-on-demand``, a
    #: request for a name the repositories did not list when last read is refused without
    #: reading them again, unless that read is older than this many seconds (a poll, the
    #: index, load and unload APIs read them again). 0: read them for every such request
    unknown_model_rescan_secs: float = 1.0
    #: tritonx only (``--event-loop-watchdog-secs``, :mod:`tritonx._core.watchdog`): when
    #: the event loop does not run for this many seconds, log its stack and count it in
    #: ``tritonx_event_loop_blocked_total``; 0: no watchdog
    event_loop_watchdog_secs: float = 5.0
    id: str = "triton"
    backend_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    cache_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    #: ``--reuse-http-port``: bind the HTTP port with ``SO_REUSEPORT``, so that several servers
    #: (each with this set) listen on it and the kernel spreads new connections over them
    reuse_http_port: bool = False
    http_thread_count: int = 8
    http_max_input_size: int = 64 * 1024 * 1024
    #: tritonx only (``tritonx._transports.http.listener``): seconds a connection may take to send a
    #: request's headers, from its opening or from the first byte of a later request
    #: (also bounds a TLS handshake); then it is closed. 0: no limit.
    http_header_timeout_secs: float = 60.0
    #: tritonx only: seconds without a byte while a request body is read; then 408 and the
    #: connection is closed. 0: no limit.
    http_body_timeout_secs: float = 60.0
    #: tritonx only: seconds an idle connection is kept open between requests (longer than
    #: common load balancers' idle timeouts). 0: no limit.
    http_keepalive_timeout_secs: float = 620.0
    #: tritonx only: most open HTTP connections; beyond it new clients wait in the listen
    #: backlog and an idle connection is closed to make room. 0: from the open-file limit
    #: (``tritonx._transports.http.listener.default_max_connections``).
    http_max_connections: int = 0
    #: tritonx only (``--http-fast-infer``): serve plain ``/infer`` requests below aiohttp's
    #: ``web`` layer (:mod:`tritonx._transports.http.fast_infer`); same answers, less CPU per request
    http_fast_infer: bool = True
    #: ``--http-restricted-api``: category (``tritonx._runtime.security.RESTRICTED_CATEGORIES``) →
    #: (header, value) a request to that category's endpoints must carry, else 403
    http_restricted_api: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: ``--http-header-forward-pattern``: headers of ``/infer`` requests whose name this
    #: regular expression matches become request parameters (:mod:`tritonx._dataplane.header_forward`)
    http_header_forward_pattern: str = ""
    #: HTTPS (tritonx only, named after the ``--grpc-*`` TLS flags): PEM files; mutual
    #: requires and verifies client certificates against ``http_root_cert``
    http_use_ssl: bool = False
    http_use_ssl_mutual: bool = False
    http_server_cert: str = ""
    http_server_key: str = ""
    http_root_cert: str = ""
    #: tritonx only: serve the live status page (``GET /``, :mod:`tritonx._transports.http.status_page`)
    http_status_page: bool = True
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    #: ``--reuse-grpc-port``: the same for the gRPC port
    reuse_grpc_port: bool = False
    grpc_infer_allocation_pool_size: int = 8
    #: tritonx only: largest gRPC message received (after decompression) or sent, in bytes;
    #: larger ones are refused with RESOURCE_EXHAUSTED (tritonserver: INT32_MAX, the default)
    grpc_max_message_size: int = 2**31 - 1
    #: tritonx only: largest size a compressed gRPC request message may inflate to, in
    #: bytes; a larger one is refused RESOURCE_EXHAUSTED once that much is inflated
    grpc_max_decompressed_message_size: int = 64 << 20
    grpc_keepalive_time: int = 7_200_000
    grpc_keepalive_timeout: int = 20_000
    grpc_keepalive_permit_without_calls: bool = False
    grpc_http2_max_pings_without_data: int = 2
    grpc_http2_min_recv_ping_interval_without_data: int = 300_000
    grpc_http2_max_ping_strikes: int = 2
    #: ``--grpc-restricted-protocol``: category → (key, value); the client sends metadata
    #: ``triton-grpc-protocol-<key>: <value>``, else UNAVAILABLE
    grpc_restricted_protocol: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    #: ``--grpc-header-forward-pattern``: the same for the metadata of inference calls
    grpc_header_forward_pattern: str = ""
    #: ``--grpc-infer-response-compression-level``: none, low, medium or high; the responses
    #: of ModelInfer / ModelStreamInfer are compressed with the algorithm grpc's level picks
    grpc_infer_response_compression_level: str = "none"
    #: ``--grpc-engine``: "loop" (HTTP/2 framed on the event loop, :mod:`tritonx._transports.grpc.engine`)
    #: or "aio" (grpcio's grpc.aio server)
    grpc_engine: str = "loop"
    #: tritonx only, the event-loop engine's bounds per connection (HTTP/2 settings where
    #: HTTP/2 has one): open streams (SETTINGS_MAX_CONCURRENT_STREAMS; more are refused
    #: REFUSED_STREAM), metadata bytes of a call (SETTINGS_MAX_HEADER_LIST_SIZE; a call past
    #: it gets RESOURCE_EXHAUSTED, a header block decoding to 4x it ends the connection),
    #: seconds an unfinished header block may wait, answer bytes waiting for the client's
    #: window (an answer past it gets RESOURCE_EXHAUSTED), seconds such data may wait without
    #: progress (then its streams are reset), client resets and refused streams per second
    #: (then GOAWAY ENHANCE_YOUR_CALM; 0: no limit), and ModelStreamInfer requests of all
    #: calls in flight on one connection (a call's next message is read when one ends)
    grpc_max_concurrent_streams: int = 100
    #: tritonx only: open gRPC connections at most (0: half the open-file limit); at the cap
    #: the oldest one without a call open is sent away, else the new one
    grpc_max_connections: int = 0
    grpc_max_header_list_size: int = 16 << 10
    grpc_header_timeout_secs: int = 10
    grpc_max_send_buffer: int = 32 << 20
    #: tritonx only: the same, all connections together
    grpc_max_send_buffer_total: int = 256 << 20
    grpc_send_timeout_secs: int = 60
    grpc_max_reset_rate: int = 100
    grpc_max_stream_in_flight: int = 128
    #: tritonx only: request message bytes the event-loop engine holds at once, server-wide
    #: (received, not yet parsed); a message past it gets RESOURCE_EXHAUSTED unless it is
    #: the only one, and so does one whose announced size passes a quarter of it on its
    #: connection (unless it is the connection's only one)
    grpc_max_buffered_request_bytes: int = 1 << 30
    #: ``--grpc-max-connection-age`` / ``-grace`` (ms; 0: not set, grpc's default)
    grpc_max_connection_age: int = 0
    grpc_max_connection_age_grace: int = 0
    #: ``--grpc-use-ssl`` / ``--grpc-use-ssl-mutual`` and their PEM files
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str = ""
    grpc_server_key: str = ""
    grpc_root_cert: str = ""
    allow_metrics: bool = True
    allow_gpu_metrics: bool = True
    allow_cpu_metrics: bool = True
    metrics_address: str | None = None
    metrics_port: int = 8002
    metrics_interval_ms: int = 2000
    metrics_config: Mapping[str, str] = field(default_factory=dict)
    #: ``--metric-sink <name>[,<key>=<value>]``: the metric sink plugins to run, with settings
    metric_sinks: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: ``--frontend-config <name>,<key>=<value>``: settings of installed frontends
    #: (:mod:`tritonx.frontend`; ``allow``, ``address``, ``port`` and the frontend's own keys)
    frontend_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    rate_limit: str = "off"
    #: tritonx only (``--inline-execution-us``, :mod:`tritonx._core.execution`): run a batch
    #: on the event loop, not on an idle instance's thread, when the model's executions
    #: average under this many microseconds and its instances allow it; 0: never
    inline_execution_us: float = 100.0
    rate_limit_resource: tuple[str, ...] = ()
    #: ``--allow-client-shm``: clients may register and unregister system / CUDA shared
    #: memory regions (``tritonx._dataplane.shared_memory``); false answers those calls UNSUPPORTED
    allow_client_shm: bool = False
    #: ``--trace-config level=...``: ``TIMESTAMPS`` and/or ``TENSORS``; empty: tracing off
    trace_level: tuple[str, ...] = ()
    #: ``--trace-config rate=``: trace one request in this many
    trace_rate: int = 1000
    #: ``--trace-config count=``: traces to take, -1 for no limit
    trace_count: int = -1
    #: ``--trace-config triton,log-frequency=``: write every that many traces to
    #: ``<trace_file>.<n>``; 0 writes ``trace_file`` at shutdown
    trace_log_frequency: int = 0
    #: ``--trace-config triton,file=``: the trace file of ``triton`` mode
    trace_file: str = ""
    #: ``--trace-config mode=``: ``triton`` (JSON trace file) or ``opentelemetry`` (OTLP/HTTP)
    trace_mode: str = "triton"
    #: ``--trace-config opentelemetry,<key>=<value>`` pairs (url, resource, bsp_*)
    trace_opentelemetry: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class IOConfig:
    """One configured input or output."""

    name: str
    datatype: DataType
    dims: tuple[int, ...]
    optional: bool = False
    allow_ragged_batch: bool = False
    reshape: tuple[int, ...] | None = None
    #: outputs: the classification labels file, relative to the model's folder
    label_filename: str = ""
    #: the numpy dtype arrays of this tensor have (object for BYTES, uint16 for BF16)
    numpy_dtype: Any = None

    def __post_init__(self) -> None:
        if self.numpy_dtype is None:
            object.__setattr__(self, "numpy_dtype", self.datatype.numpy_dtype)


class ModelConfig:
    """A read-only view over Triton's ``inference.ModelConfig`` protobuf message.

    ``raw`` is the message itself (what the config endpoints return); the properties give the
    parts the core and backends use most, already converted to Python types.
    """

    __slots__ = ("__dict__", "raw")

    def __init__(self, raw: model_config_pb2.ModelConfig) -> None:
        self.raw = raw

    @property
    def name(self) -> str:
        return self.raw.name

    @property
    def backend(self) -> str:
        return self.raw.backend

    @property
    def platform(self) -> str:
        return self.raw.platform

    @property
    def max_batch_size(self) -> int:
        return self.raw.max_batch_size

    @property
    def decoupled(self) -> bool:
        return self.raw.model_transaction_policy.decoupled

    @cached_property
    def inputs(self) -> tuple[IOConfig, ...]:
        return tuple(_io(t, optional=t.optional) for t in self.raw.input)

    @cached_property
    def outputs(self) -> tuple[IOConfig, ...]:
        return tuple(_io(t) for t in self.raw.output)

    @cached_property
    def input_map(self) -> dict[str, IOConfig]:
        return _by_name(self.inputs)

    @cached_property
    def required_inputs(self) -> tuple[str, ...]:
        """Names of the inputs a request must carry (not ``optional``), in config order."""
        return tuple(n for n, t in self.input_map.items() if not t.optional)

    @cached_property
    def output_map(self) -> dict[str, IOConfig]:
        return _by_name(self.outputs)

    @cached_property
    def parameters(self) -> dict[str, str]:
        """The config's ``parameters`` map as plain strings."""
        return {k: v.string_value for k, v in self.raw.parameters.items()}

    def metadata_specs(self, outputs: bool = False) -> tuple[TensorSpec, ...]:
        """Inputs (or outputs) as model metadata shows them: a leading -1 when batching."""
        prefix = (-1,) if self.max_batch_size > 0 else ()
        return tuple(
            TensorSpec(t.name, t.datatype.value, prefix + t.dims)
            for t in (self.outputs if outputs else self.inputs)
        )

    def to_json_dict(self) -> dict[str, Any]:
        """The config as Triton's ``/config`` endpoint prints it (:func:`config_to_json_dict`)."""
        return config_to_json_dict(self.raw)

    def __repr__(self) -> str:
        return f"ModelConfig(name={self.name!r}, backend={self.backend!r})"


def _by_name(tensors: tuple[IOConfig, ...]) -> dict[str, IOConfig]:
    """Tensors by name; Triton keeps the first of duplicate names."""
    out: dict[str, IOConfig] = {}
    for t in tensors:
        out.setdefault(t.name, t)
    return out


def _io(t: Any, optional: bool = False) -> IOConfig:
    dt = model_config_pb2.DataType.Name(t.data_type)
    return IOConfig(
        name=t.name,
        datatype=DataType.from_config(dt) if dt != "TYPE_INVALID" else DataType.BYTES,
        dims=tuple(t.dims),
        optional=optional,
        allow_ragged_batch=getattr(t, "allow_ragged_batch", False),
        reshape=tuple(t.reshape.shape) if t.HasField("reshape") else None,
        label_filename=getattr(t, "label_filename", ""),
    )


# The 64-bit fields Triton's ModelConfigToJson turns back into JSON numbers (exactly these).
_INT64_PATHS: tuple[tuple[str, ...], ...] = (
    ("input", "*", "dims"),
    ("input", "*", "reshape", "shape"),
    ("output", "*", "dims"),
    ("output", "*", "reshape", "shape"),
    ("version_policy", "specific", "versions"),
    ("dynamic_batching", "max_queue_delay_microseconds"),
    ("dynamic_batching", "priority_levels"),
    ("dynamic_batching", "default_priority_level"),
    ("dynamic_batching", "default_queue_policy", "default_timeout_microseconds"),
    ("dynamic_batching", "priority_queue_policy", "*", "default_timeout_microseconds"),
    ("sequence_batching", "max_sequence_idle_microseconds"),
    ("sequence_batching", "oldest", "max_queue_delay_microseconds"),
    ("sequence_batching", "direct", "max_queue_delay_microseconds"),
    ("sequence_batching", "state", "*", "dims"),
    ("ensemble_scheduling", "step", "*", "model_version"),
    ("model_warmup", "*", "inputs", "*", "dims"),
)


def config_to_json_dict(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """The config as Triton's ``ModelConfigToJson`` prints it: proto field names, every
    scalar and repeated field printed, enums as names, and Triton's list of 64-bit fields as
    JSON numbers (protobuf's JSON mapping prints 64-bit integers as strings)."""
    out = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    for path in _INT64_PATHS:
        _to_numbers(out, path)
    return out


def _to_numbers(node: Any, path: tuple[str, ...]) -> None:
    key, rest = path[0], path[1:]
    if key == "*":
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            _to_numbers(child, rest)
        return
    if not isinstance(node, dict) or key not in node:
        return
    if rest:
        _to_numbers(node[key], rest)
    elif isinstance(node[key], list):
        node[key] = [int(v) for v in node[key]]
    else:
        node[key] = int(node[key])


class EditableModelConfig:
    """The config a backend completes in ``auto_complete_config`` (``AutoCompleteContext.config``).

    Read it through :meth:`view` (a :class:`ModelConfig` snapshot) or :meth:`to_dict`
    (Triton's JSON form); change it with the typed setters below or replace it wholesale with
    :meth:`update_from_dict`. Every change is checked against Triton's schema.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: model_config_pb2.ModelConfig) -> None:
        self._raw = raw

    # reading
    def view(self) -> ModelConfig:
        """A read-only snapshot of the config as it stands."""
        snapshot = model_config_pb2.ModelConfig()
        snapshot.CopyFrom(self._raw)
        return ModelConfig(snapshot)

    def to_dict(self) -> dict[str, Any]:
        """The config in Triton's JSON form (as ``/config`` prints it)."""
        return self.view().to_json_dict()

    @property
    def name(self) -> str:
        return self._raw.name

    @property
    def max_batch_size(self) -> int:
        return self._raw.max_batch_size

    @max_batch_size.setter
    def max_batch_size(self, value: int) -> None:
        self._raw.max_batch_size = int(value)

    @property
    def input_count(self) -> int:
        """Configured inputs, ``batch_input`` entries included (Triton's auto-complete rule)."""
        return len(self._raw.input) + len(self._raw.batch_input)

    @property
    def output_count(self) -> int:
        return len(self._raw.output)

    @property
    def has_scheduler(self) -> bool:
        """Whether a scheduling block (dynamic, sequence or ensemble) is set."""
        return self._raw.WhichOneof("scheduling_choice") is not None

    # changing
    def add_input(
        self,
        name: str,
        datatype: str | DataType,
        dims: Sequence[int],
        *,
        reshape: Sequence[int] | None = None,
        optional: bool = False,
    ) -> None:
        """Append an input (``datatype`` as ``FP32``, ``TYPE_FP32`` or a :class:`DataType`)."""
        io = self._raw.input.add(name=name, data_type=_config_type(datatype), dims=list(dims))
        if reshape is not None:
            io.reshape.shape.extend(reshape)
        if optional:
            io.optional = True

    def add_output(
        self,
        name: str,
        datatype: str | DataType,
        dims: Sequence[int],
        *,
        reshape: Sequence[int] | None = None,
    ) -> None:
        """Append an output."""
        io = self._raw.output.add(name=name, data_type=_config_type(datatype), dims=list(dims))
        if reshape is not None:
            io.reshape.shape.extend(reshape)

    def enable_dynamic_batching(self) -> None:
        """Add an empty ``dynamic_batching {}`` block (Triton's defaults)."""
        self._raw.dynamic_batching.SetInParent()

    def update_from_dict(self, config: Mapping[str, Any]) -> None:
        """Replace the whole config with ``config`` (Triton's JSON form, as :meth:`to_dict`).

        :raises TritonXError: INVALID_ARG when ``config`` does not fit Triton's schema.
        """
        from tritonx.errors import invalid_arg

        replaced = model_config_pb2.ModelConfig()
        try:
            json_format.ParseDict(dict(config), replaced)
        except json_format.ParseError as exc:
            raise invalid_arg(f"invalid model configuration for '{self.name}': {exc}") from exc
        self._raw.CopyFrom(replaced)

    def __repr__(self) -> str:
        return f"EditableModelConfig(name={self.name!r})"


def _config_type(datatype: str | DataType) -> int:
    if isinstance(datatype, DataType):
        name = datatype.config_name
    else:
        name = datatype if datatype.startswith("TYPE_") else DataType(datatype).config_name
    return int(model_config_pb2.DataType.Value(name))


__all__ = [
    "EXAMPLE_REPOSITORY",
    "EditableModelConfig",
    "IOConfig",
    "ModelConfig",
    "ServerSettings",
    "config_to_json_dict",
]
