"""The flags of ``tritonx serve``, declared as data (tritonserver's names and meanings).

:data:`SERVE_OPTIONS` lists them in ``--help`` order; :func:`serve_options` adds them to the
command, then every flag of :data:`NOT_IMPLEMENTED_FLAGS` as a hidden option that refuses.
The values are parsed here (click types); what they mean together is checked once by
:func:`tritonx._runtime.settings_check.validate_settings` when the server starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from tritonx._runtime.refused_flags import NOT_IMPLEMENTED_FLAGS
from tritonx._runtime.security import RESTRICTED_CATEGORIES

_TRUE = {"true", "on", "1", "yes"}
_FALSE = {"false", "off", "0", "no"}

#: A decorator adding one option to a click command.
Decorator = Callable[[Any], Any]


class TritonBool(click.ParamType):
    """tritonserver's booleans: true/false, on/off, 1/0 (case-insensitive)."""

    name = "boolean"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        self.fail(f"'{value}' is not a boolean (true/false, on/off, 1/0)", param, ctx)


BOOL = TritonBool()


class IntBool(click.ParamType):
    """tritonserver's ``ParseIntBoolOption`` (``--log-verbose``): an integer, or true (1) /
    false (0)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text == "true":
            return 1
        if text == "false":
            return 0
        try:
            number = int(text)
        except ValueError:
            self.fail(f"'{value}' is not an integer (or true/false)", param, ctx)
        if number < 0:
            self.fail(f"'{value}' must be 0 or more", param, ctx)
        return number


# ---------------------------------------------------------------------------------- kinds


#: what makes an option a tritonserver boolean: ``--flag=<bool>``, a bare ``--flag`` is true
SWITCH: dict[str, Any] = {"type": BOOL, "is_flag": False, "flag_value": True}


def switch(name: str, default: bool | None, help: str, *, show: bool = True) -> Decorator:
    """``--flag=<bool>``; a bare ``--flag`` means true."""
    return click.option(name, default=default, show_default=show, help=help, **SWITCH)


def value(
    name: str, type: Any, default: Any, help: str | None = None, show: bool = True
) -> Decorator:
    """A typed value, its default shown (unless ``show`` is false)."""
    return click.option(name, type=type, default=default, show_default=show, help=help)


def text(name: str, help: str | None = None, metavar: str | None = None) -> Decorator:
    """A string, empty unless given."""
    return click.option(name, default="", metavar=metavar, help=help)


def many(name: str, help: str, metavar: str | None = None) -> Decorator:
    """A repeatable string."""
    return click.option(name, multiple=True, metavar=metavar, help=help)


def listener(prefix: str, label: str, port: int) -> list[Decorator]:
    """``--allow-<prefix>``, ``--<prefix>-address``, ``--<prefix>-port`` and
    ``--reuse-<prefix>-port`` of the HTTP or gRPC listener (``label``)."""
    return [
        switch(
            f"--allow-{prefix}",
            None,
            ("Serve HTTP/REST" if prefix == "http" else "Serve gRPC")
            + " [default: true; false when AIP_MODE=PREDICTION (Vertex AI)].",
            show=False,
        ),
        value(f"--{prefix}-address", None, "0.0.0.0"),
        value(f"--{prefix}-port", int, port),
        switch(
            f"--reuse-{prefix}-port",
            False,
            f"Allow several servers to listen on the same {label} port when every one of them "
            "sets this (SO_REUSEPORT: the kernel spreads new connections over them). Each "
            "server keeps its own models, statistics and registrations: serve the same models "
            "from every one.",
        ),
    ]


def tls(prefix: str, served: str, use_ssl: str, mutual: str) -> list[Decorator]:
    """``--<prefix>-use-ssl[-mutual]`` and the PEM files of a listener (``served``: how its
    TLS is named in the help)."""
    return [
        switch(f"--{prefix}-use-ssl", False, use_ssl),
        switch(f"--{prefix}-use-ssl-mutual", False, mutual),
        text(f"--{prefix}-server-cert", f"PEM server certificate for {served}.", "FILE"),
        text(f"--{prefix}-server-key", f"PEM server private key for {served}.", "FILE"),
        text(
            f"--{prefix}-root-cert",
            f"PEM root certificate(s) that verify {'HTTPS' if prefix == 'http' else 'gRPC'} "
            "clients.",
            "FILE",
        ),
    ]


NON_NEGATIVE = click.FloatRange(min=0)
POSITIVE = click.IntRange(min=1)
TRITONX_ONLY = " (tritonx only)."

# ---------------------------------------------------------------------------------- serve

#: The flags of ``tritonx serve``, in ``--help`` order.
SERVE_OPTIONS: list[Decorator] = [
    click.option(
        "--model-repository",
        "--model-store",
        "model_repository",
        multiple=True,
        help="Model repository: a path, or a URL whose scheme a repository plugin serves "
        "(repeatable). Default: the bundled example repository.",
    ),
    value(
        "--model-control-mode",
        click.Choice(["none", "poll", "explicit"], case_sensitive=False),
        "none",
        "How models are loaded and unloaded.",
    ),
    many("--load-model", "Model to load at start-up in explicit mode ('*' = all)."),
    value("--repository-poll-secs", float, 15.0, "Seconds between repository polls (poll mode)."),
    switch(
        "--reload",
        False,
        "Development: watch the local model repositories and reload a model whose files "
        "change, without downtime (the old version serves until the new one is ready; "
        "outside explicit mode a new model folder is loaded, a removed one unloaded). Needs "
        "pip install 'tritonx[reload]'" + TRITONX_ONLY,
    ),
    switch(
        "--exit-on-error",
        None,
        "Exit if a model fails to load at start-up [default: true; false when serving the "
        "bundled example repository].",
        show=False,
    ),
    switch("--strict-readiness", True, "Ready only when every model is ready."),
    switch(
        "--model-namespacing",
        False,
        "Each model repository is a namespace: models of the same name may be in several "
        "repositories; an ensemble's composing models resolve in its own repository first.",
    ),
    click.option(
        "--disable-auto-complete-config",
        is_flag=True,
        default=False,
        help="Do not complete configs from model files.",
    ),
    switch("--strict-model-config", False, "Deprecated: same as --disable-auto-complete-config."),
    value("--model-load-thread-count", click.IntRange(min=1), 4, "Models loaded in parallel."),
    text(
        "--model-config-name",
        "Read each model's configs/NAME.pbtxt instead of its config.pbtxt, for the models "
        "that have one.",
        "NAME",
    ),
    value(
        "--model-load-retry-count",
        click.IntRange(min=0),
        0,
        "Times a model version whose instances failed to load (or warm up) is loaded again "
        "before its load fails.",
    ),
    value(
        "--exit-timeout-secs",
        float,
        30.0,
        "Seconds to wait for in-flight requests at shutdown (SIGINT, SIGTERM); then executions "
        "still running are stopped (python models' worker processes killed), and a process "
        "still alive 5 s later exits at once with status 1.",
    ),
    value(
        "--model-unload-timeout-secs",
        NON_NEGATIVE,
        30.0,
        "Seconds an unload (or the unload of the old version a reload does) waits for the "
        "requests in flight and the instances' unload; then queued requests fail, python "
        "models' worker processes are killed, instance threads still executing are abandoned "
        "and the unload completes" + TRITONX_ONLY,
    ),
    switch(
        "--model-load-on-demand",
        False,
        "Load a model that is in a repository but not loaded when a request (inference, "
        "metadata, config) asks for it; the request waits for the load. Needs "
        "--model-control-mode=explicit or poll (poll mode then loads no model at start-up)"
        + TRITONX_ONLY,
    ),
    value(
        "--model-load-on-demand-timeout-secs",
        NON_NEGATIVE,
        60.0,
        "Seconds a request waits for its model's on-demand load (and for room under the "
        "budgets); then UNAVAILABLE. 0: no limit" + TRITONX_ONLY,
    ),
    value(
        "--max-loaded-models",
        click.IntRange(min=0),
        0,
        "Most models loaded at once: before a load, the least recently used models with no "
        "request in flight are unloaded (models listed with --load-model never are). "
        "0: no limit. Needs --model-load-on-demand" + TRITONX_ONLY,
    ),
    value(
        "--model-memory-budget",
        click.IntRange(min=0),
        0,
        "Bytes the loaded models may add to the server's resident memory (their worker "
        "processes included), measured: the least recently used models with no request in "
        "flight are unloaded to stay within it. 0: no limit. Needs --model-load-on-demand"
        + TRITONX_ONLY,
    ),
    value(
        "--model-idle-unload-secs",
        NON_NEGATIVE,
        0.0,
        "Unload a model no request used for this many seconds (models listed with "
        "--load-model excepted). 0: never. Needs --model-load-on-demand" + TRITONX_ONLY,
    ),
    value(
        "--model-min-residency-secs",
        NON_NEGATIVE,
        1.0,
        "A model loaded less than this many seconds ago is not unloaded to make room for the "
        "model a request asks for: when only such models could make room, the request gets "
        "UNAVAILABLE at once (counted in tritonx_model_min_residency_refusals_total), so "
        "requests cycling over more models than the budgets hold cannot make the server load "
        "a model for each of them (the load API is not held back). 0: no minimum. With "
        "--max-loaded-models or --model-memory-budget" + TRITONX_ONLY,
    ),
    value(
        "--unknown-model-rescan-secs",
        NON_NEGATIVE,
        1.0,
        "With --model-load-on-demand: a request for a model name that no repository listed "
        "when they were last read gets Triton's unknown-model error without reading them "
        "again, unless that read is older than this many seconds. A repository poll and the "
        "repository index, load and unload APIs read them again. 0: read them for every such "
        "request" + TRITONX_ONLY,
    ),
    value(
        "--event-loop-watchdog-secs",
        NON_NEGATIVE,
        5.0,
        "Log the event loop's stack and count tritonx_event_loop_blocked_total when the loop "
        "is blocked this long (a blocking call in a coroutine or backend); 0: off" + TRITONX_ONLY,
    ),
    click.option(
        "--id",
        "server_id",
        default="triton",
        show_default=True,
        help="Server identifier (/v2 name).",
    ),
    many(
        "--backend-config",
        "<backend>,<key>=<value> (one setting per flag, repeat the flag), or <key>=<value> "
        "for every backend (e.g. "
        "default-max-batch-size); a key the named backend does not read, or a global one no "
        "installed backend reads, stops the start with an error naming the keys that are read.",
    ),
    many(
        "--cache-config",
        "<cache>,<key>=<value> (repeatable): the response cache plugin to use and its "
        "settings; models with response_cache { enable: true } use it.",
    ),
    value(
        "--response-cache-byte-size",
        int,
        None,
        "Deprecated (as in tritonserver): the same as --cache-config=local,size=<bytes>.",
        show=False,
    ),
    *listener("http", "HTTP", 8000),
    value(
        "--http-thread-count",
        int,
        8,
        "Accepted for compatibility (the HTTP server is asynchronous).",
    ),
    value(
        "--http-max-input-size",
        int,
        64 * 1024 * 1024,
        "Largest HTTP request body, in bytes; for compressed bodies, the decompressed size.",
    ),
    value(
        "--http-header-timeout-secs",
        NON_NEGATIVE,
        60.0,
        "Seconds a connection may take to send a request's headers (also bounds a TLS "
        "handshake); then it is closed. 0: no limit" + TRITONX_ONLY,
    ),
    value(
        "--http-body-timeout-secs",
        NON_NEGATIVE,
        60.0,
        "Seconds without a byte while a request body is read; then 408 and the connection is "
        "closed. 0: no limit" + TRITONX_ONLY,
    ),
    value(
        "--http-keepalive-timeout-secs",
        NON_NEGATIVE,
        620.0,
        "Seconds an idle connection is kept open between requests. 0: no limit" + TRITONX_ONLY,
    ),
    value(
        "--http-max-connections",
        click.IntRange(min=0),
        0,
        "Most open connections of each HTTP listener; beyond it new clients wait and the "
        "oldest idle or incomplete connection (no request in progress) is closed to make "
        "room. 0: the open-file limit less a quarter, shared equally by the HTTP, metrics "
        "and frontend listeners" + TRITONX_ONLY,
    ),
    many(
        "--http-restricted-api",
        "Requests to these APIs must carry the HTTP header <key>: <value>, else 403 "
        "(repeatable; an API may be in one group only). APIs: "
        + ", ".join(RESTRICTED_CATEGORIES)
        + ".",
        "<api>[,<api>...]:<key>=<value>",
    ),
    text(
        "--http-header-forward-pattern",
        "Headers of /infer requests whose name this regular expression matches "
        "(case-insensitive) become string parameters of the request, as in Triton; a matching "
        "reserved name fails the request with 400.",
        "REGEX",
    ),
    *tls(
        "http",
        "HTTPS",
        "Serve HTTPS (--http-server-cert, --http-server-key); tritonx only, named after "
        "--grpc-use-ssl.",
        "Serve HTTPS and require client certificates signed by --http-root-cert (tritonx "
        "only); implies --http-use-ssl.",
    ),
    switch(
        "--http-fast-infer",
        True,
        "Serve plain inference requests (whole, uncompressed, up to 256 KiB, untraced) without "
        "aiohttp's web layer: the same answers for less CPU per request" + TRITONX_ONLY,
    ),
    switch(
        "--http-status-page",
        True,
        "Serve the live status page on GET / of the HTTP port" + TRITONX_ONLY,
    ),
    *listener("grpc", "gRPC", 8001),
    value("--grpc-infer-allocation-pool-size", int, 8, "Accepted for compatibility."),
    value(
        "--grpc-max-message-size",
        click.IntRange(min=1, max=2**31 - 1),
        2**31 - 1,
        "Largest gRPC message received (after decompression) or sent, in bytes; larger ones "
        "get RESOURCE_EXHAUSTED" + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-decompressed-message-size",
        click.IntRange(min=1, max=2**31 - 1),
        64 << 20,
        "Largest size a compressed gRPC request message may inflate to, in bytes; a larger one "
        "gets RESOURCE_EXHAUSTED once that much is inflated" + TRITONX_ONLY,
    ),
    value("--grpc-keepalive-time", int, 7_200_000),
    value("--grpc-keepalive-timeout", int, 20_000),
    switch("--grpc-keepalive-permit-without-calls", False, "Allow keepalive pings without calls."),
    value("--grpc-http2-max-pings-without-data", int, 2),
    value("--grpc-http2-min-recv-ping-interval-without-data", int, 300_000),
    value("--grpc-http2-max-ping-strikes", int, 2),
    many(
        "--grpc-restricted-protocol",
        "RPCs of these protocols must carry the metadata triton-grpc-protocol-<key>: <value>, "
        "else UNAVAILABLE (repeatable; a protocol may be in one group only). Protocols: as "
        "--http-restricted-api.",
        "<protocol>[,<protocol>...]:<key>=<value>",
    ),
    text(
        "--grpc-header-forward-pattern",
        "As --http-header-forward-pattern, for the metadata of ModelInfer and ModelStreamInfer "
        "calls (INVALID_ARGUMENT for a reserved name).",
        "REGEX",
    ),
    value(
        "--grpc-engine",
        click.Choice(["loop", "aio"]),
        "loop",
        "gRPC server: 'loop' frames HTTP/2 on tritonx's event loop (the default; about half "
        "grpc.aio's CPU per call), 'aio' serves the same handlers with grpcio's grpc.aio.",
    ),
    value(
        "--grpc-max-concurrent-streams",
        click.IntRange(min=1, max=2**31 - 1),
        100,
        "Streams (calls) open at once on one gRPC connection, announced to the client "
        "(SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with REFUSED_STREAM. Loop engine"
        + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-connections",
        click.IntRange(min=0),
        0,
        "Most open gRPC connections; at the cap the oldest one without a call open is sent "
        "away (GOAWAY) to make room, else the new one is closed. 0: half the open-file limit. "
        "Loop engine" + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-header-list-size",
        click.IntRange(min=1, max=2**31 - 1),
        16 << 10,
        "Bytes of metadata a gRPC call may carry, announced (SETTINGS_MAX_HEADER_LIST_SIZE); "
        "past it RESOURCE_EXHAUSTED, and a header block decoding to 4x it ends the connection "
        "(a compression bomb). Loop engine" + TRITONX_ONLY,
    ),
    value(
        "--grpc-header-timeout-secs",
        click.IntRange(min=1),
        10,
        "Seconds a gRPC client may leave a header block unfinished before its connection is "
        "ended. Loop engine" + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-send-buffer",
        click.IntRange(min=0),
        32 << 20,
        "Answer bytes that may wait for a gRPC client's flow-control window on one connection; "
        "an answer past it gets RESOURCE_EXHAUSTED (one answer of any size may wait). Loop "
        "engine" + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-send-buffer-total",
        click.IntRange(min=0),
        256 << 20,
        "Answer bytes that may wait for gRPC clients' windows, all connections together; an "
        "answer past it gets RESOURCE_EXHAUSTED (one per connection always waits). Loop engine"
        + TRITONX_ONLY,
    ),
    value(
        "--grpc-send-timeout-secs",
        click.IntRange(min=1),
        60,
        "Seconds answers may wait for a gRPC client's window without progress; then their "
        "calls are reset (CANCEL). Loop engine" + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-reset-rate",
        click.IntRange(min=0),
        100,
        "Calls per second a gRPC client may reset before their answer, or have refused, on "
        "one connection (on average, ten seconds' worth at once); past it the connection is "
        "ended with GOAWAY ENHANCE_YOUR_CALM (rapid reset). 0: no limit. Loop engine"
        + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-stream-in-flight",
        click.IntRange(min=1),
        128,
        "ModelStreamInfer requests in flight at once on one connection (all its calls), and "
        "per call counting answers not yet written; a call's next message is read when one "
        "ends (the client waits on its flow-control window)" + TRITONX_ONLY,
    ),
    value(
        "--grpc-max-buffered-request-bytes",
        click.IntRange(min=1),
        1 << 30,
        "Bytes of gRPC request messages held at once, server-wide (received, not yet parsed); "
        "a message past it gets RESOURCE_EXHAUSTED unless it is the only one, and so does one "
        "whose announced size passes a quarter of it on its connection (unless it is the "
        "connection's only one). Loop engine" + TRITONX_ONLY,
    ),
    value(
        "--grpc-infer-response-compression-level",
        click.Choice(["none", "low", "medium", "high"], case_sensitive=False),
        "none",
        "Compress ModelInfer / ModelStreamInfer responses (low: gzip; medium, high: deflate, "
        "the algorithms grpc's levels pick for a client accepting both).",
    ),
    value(
        "--grpc-max-connection-age",
        click.IntRange(min=0),
        0,
        "Milliseconds a gRPC connection may live before the server ends it (GOAWAY); 0: no limit.",
        show=False,
    ),
    value(
        "--grpc-max-connection-age-grace",
        click.IntRange(min=0),
        0,
        "Milliseconds the calls of a connection past its age get to finish before it is "
        "closed; 0: no limit.",
        show=False,
    ),
    *tls(
        "grpc",
        "gRPC TLS",
        "Serve gRPC over TLS (--grpc-server-cert, --grpc-server-key).",
        "Serve gRPC over TLS and require client certificates signed by --grpc-root-cert; "
        "implies --grpc-use-ssl.",
    ),
    switch("--allow-metrics", True, "Serve Prometheus metrics."),
    switch("--allow-gpu-metrics", True, "Report GPU metrics."),
    switch("--allow-cpu-metrics", True, "Report CPU metrics."),
    click.option("--metrics-address", default=None, help="Defaults to --http-address."),
    value("--metrics-port", int, 8002),
    value("--metrics-interval-ms", int, 2000),
    many("--metrics-config", "<key>=<value> (repeatable)."),
    many(
        "--metric-sink",
        "<sink>[,<key>=<value>] (repeatable): run this metric sink plugin with these settings"
        + TRITONX_ONLY,
    ),
    many(
        "--frontend-config",
        "<frontend>,<key>=<value> (one setting per flag, repeat the flag): start an installed "
        "frontend plugin on its own listener (e.g. --frontend-config openai,allow=true "
        "--frontend-config openai,port=9000; allow=false keeps it off), address= and port= "
        "place it (default: --http-address and its own port), the HTTP TLS flags apply to "
        "it; other keys are the frontend's own" + TRITONX_ONLY,
    ),
    switch(
        "--allow-sagemaker",
        False,
        "Serve Amazon SageMaker's hosting contract (/ping, /invocations, the multi-model "
        "endpoint's /models) on its own port; needs the tritonx-frontend-sagemaker plugin.",
    ),
    value("--sagemaker-port", int, 8080),
    click.option(
        "--sagemaker-safe-port-range",
        default="",
        metavar="<integer>-<integer>",
        help="The ports the other listeners on the SageMaker address may use.",
    ),
    value(
        "--sagemaker-thread-count",
        POSITIVE,
        8,
        "Accepted for compatibility: SageMaker requests are served on the event loop.",
    ),
    switch(
        "--allow-vertex-ai",
        None,
        "Serve Google Vertex AI's prediction contract (AIP_PREDICT_ROUTE, AIP_HEALTH_ROUTE) "
        "on its own port; needs the tritonx-frontend-vertexai plugin [default: true when "
        "AIP_MODE=PREDICTION, else false].",
        show=False,
    ),
    click.option(
        "--vertex-ai-port",
        type=int,
        default=None,
        help="The Vertex AI port [default: AIP_HTTP_PORT, else 8080].",
    ),
    value(
        "--vertex-ai-thread-count",
        POSITIVE,
        8,
        "Accepted for compatibility: Vertex AI requests are served on the event loop.",
    ),
    text(
        "--vertex-ai-default-model",
        "The model the Vertex AI predict route serves [default: the only model].",
    ),
    value("--rate-limit", click.Choice(["off", "execution_count"]), "off"),
    many("--rate-limit-resource", "<name>:<count>[:<device>] (repeatable)."),
    value(
        "--inline-execution-us",
        NON_NEGATIVE,
        100.0,
        "Run a model's batches on the event loop instead of handing them to an idle instance's "
        "thread while its executions average under this many microseconds (instances that "
        "allow it: onnxruntime on the CPU; not with --rate-limit, queue delays, priorities or "
        "queue policies). 0: never" + TRITONX_ONLY,
    ),
    switch(
        "--allow-client-shm",
        False,
        "Let clients register and unregister system and CUDA shared-memory regions (inputs and "
        "outputs in shared memory).",
    ),
    value(
        "--log-verbose",
        IntBool(),
        0,
        "Verbose logging level: 0 off, 1 or more adds verbose lines (true = 1, false = 0).",
    ),
    switch("--log-info", True, "Log informational messages."),
    switch("--log-warning", True, "Log warnings."),
    switch("--log-error", True, "Log errors."),
    value("--log-format", click.Choice(["default", "ISO8601"], case_sensitive=False), "default"),
    click.option("--log-file", default=None, help="Append the log to this file instead of stderr."),
    many(
        "--trace-config",
        "Tracing (repeatable). Global settings: level=OFF|TIMESTAMPS|TENSORS, rate=<n> (trace 1 "
        "request in n; 1000), count=<n> (traces to take; -1: no limit), "
        "mode=triton|opentelemetry. triton,file=<path>: the JSON trace file; "
        "triton,log-frequency=<n>: write every n traces to <file>.<k> (0: at shutdown). "
        "opentelemetry,url=<url>, opentelemetry,resource=<key>=<value> and "
        "opentelemetry,bsp_<setting>=<n> export OTLP/HTTP spans (needs tritonx[otel]).",
        "[<mode>,]<setting>=<value>",
    ),
    click.option("--trace-file", default=None, help="Deprecated: --trace-config triton,file=."),
    many("--trace-level", "Deprecated: --trace-config level= (repeatable)."),
    *(
        click.option(f"--trace-{name}", default=None, help=f"Deprecated: --trace-config {new}=.")
        for name, new in (
            ("rate", "rate"),
            ("count", "count"),
            ("log-frequency", "triton,log-frequency"),
        )
    ),
]


def _refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value:
        flag = param.opts[0]
        raise click.UsageError(
            f"tritonserver's {flag} is not implemented by tritonx yet: "
            f"{NOT_IMPLEMENTED_FLAGS[flag]}; remove it (see 'tritonx serve --help' for the "
            "flags tritonx implements)",
            ctx,
        )


def serve_options(func: Any) -> Any:
    """Add :data:`SERVE_OPTIONS` (in ``--help`` order) and, hidden, every flag of
    :data:`NOT_IMPLEMENTED_FLAGS` as an option that refuses."""
    for flag in reversed(NOT_IMPLEMENTED_FLAGS):
        func = click.option(
            flag,
            multiple=True,
            is_flag=False,
            flag_value="true",
            hidden=True,
            expose_value=False,
            callback=_refuse,
        )(func)
    for option in reversed(SERVE_OPTIONS):
        func = option(func)
    return func
