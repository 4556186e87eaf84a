"""The tables of ``docs/reference/endpoints.md`` and ``docs/reference/config-parameters.md``,
read from the code so the pages cannot drift from it.

* :func:`http_routes`: every KServe v2 / Triton HTTP route, its restricted-API category as
  :func:`tritonx._transports.http.routes.restricted_category` computes it. The routes are
  served by one catch-all handler that dispatches on the path, so the table lists them by
  hand, and the build fails when the code routes an exact path or a model action the table
  does not list (or the table a path the code does not route).
* :func:`status_routes`: the status page's routes, from the aiohttp router they are added to.
* :func:`grpc_methods`: every RPC of Triton's ``GRPCInferenceService`` (the protobuf service
  descriptor shipped in ``tritonclient``) and the health service, with the category of each.
* :func:`error_codes`: the HTTP status and gRPC status of each error code.
* :func:`openai_routes`: the OpenAI frontend's routes, from its aiohttp router (when the
  ``tritonx-frontend-openai`` distribution is installed).
* :func:`extensions`: the ``extensions`` that ``GET /v2`` lists.
* :func:`backend_config_keys`: the ``--backend-config`` keys each installed backend reads.
* :func:`tritonx_parameters`: the config ``parameters`` keys tritonx and its plugins add.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace

from aiohttp import web

from tritonx._dataplane.dataplane import EXTENSIONS
from tritonx._transports.grpc import errors as grpc_errors
from tritonx._transports.grpc.restricted import METHOD_CATEGORY
from tritonx._transports.http import errors as http_errors
from tritonx._transports.http import routes
from tritonx._transports.http.status_page import (
    DATA_CATEGORIES,
    DATA_PATH,
    PAGE_CATEGORIES,
    add_status_routes,
)
from tritonx.errors import Code


@dataclass(frozen=True)
class Route:
    """One HTTP route: its methods, its path template, a path it serves and what it does."""

    methods: str
    template: str
    sample: str
    what: str


_M = "/v2/models/{model}[/versions/{version}]"

#: Triton's HTTP routes, in the order of Triton's protocol documents.
HTTP_ROUTES: tuple[Route, ...] = (
    Route("GET", "/v2/health/live", "/v2/health/live", "server live: 200, else 400 (no body)"),
    Route("GET", "/v2/health/ready", "/v2/health/ready", "server ready: 200, else 400"),
    Route("GET", _M + "/ready", "/v2/models/m/versions/1/ready", "model ready: 200, else 400"),
    Route("GET", "/v2", "/v2", "server metadata: name, version, extensions"),
    Route("GET", _M, "/v2/models/m/versions/1", "model metadata: inputs, outputs, versions"),
    Route("GET", _M + "/config", "/v2/models/m/config", "model configuration (JSON)"),
    Route("POST", _M + "/infer", "/v2/models/m/infer", "inference: JSON or binary tensors"),
    Route("POST", _M + "/generate", "/v2/models/m/generate", "generate: one JSON answer"),
    Route(
        "POST",
        _M + "/generate_stream",
        "/v2/models/m/generate_stream",
        "generate: server-sent events",
    ),
    Route("GET", "/v2/models/stats", "/v2/models/stats", "statistics of every model"),
    Route("GET", _M + "/stats", "/v2/models/m/stats", "statistics of one model"),
    Route("POST", "/v2/repository/index", "/v2/repository/index", "repository index"),
    Route(
        "POST",
        "/v2/repository/models/{model}/load",
        "/v2/repository/models/m/load",
        "load or reload a model",
    ),
    Route(
        "POST",
        "/v2/repository/models/{model}/unload",
        "/v2/repository/models/m/unload",
        "unload a model",
    ),
    Route(
        "GET",
        "/v2/{system,cuda}sharedmemory[/region/{region}]/status",
        "/v2/systemsharedmemory/status",
        "registered regions",
    ),
    Route(
        "POST",
        "/v2/{system,cuda}sharedmemory/region/{region}/register",
        "/v2/cudasharedmemory/region/r/register",
        "register a region",
    ),
    Route(
        "POST",
        "/v2/{system,cuda}sharedmemory[/region/{region}]/unregister",
        "/v2/systemsharedmemory/unregister",
        "unregister one region, or all",
    ),
    Route("GET, POST", "/v2/trace/setting", "/v2/trace/setting", "global trace settings"),
    Route(
        "GET, POST",
        "/v2/models/{model}/trace/setting",
        "/v2/models/m/trace/setting",
        "a model's trace settings",
    ),
    Route("GET, POST", "/v2/logging", "/v2/logging", "log settings"),
)


def _check_http_routes() -> None:
    """Fail the build when the table and the code's routing disagree."""
    samples = {route.sample for route in HTTP_ROUTES}
    for path in routes._EXACT:
        if path not in samples:
            raise ValueError(f"gen_reference: the code routes {path}, the table misses it")
    for action in routes._MODEL_ACTION_CATEGORY:
        suffix = "" if action is None else "/" + action
        if not any(
            route.template == _M + suffix
            or (action == "trace/setting" and route.template.endswith("/trace/setting"))
            for route in HTTP_ROUTES
        ):
            raise ValueError(f"gen_reference: model action {action!r} is missing")
    for route in HTTP_ROUTES:
        if routes.restricted_category(route.sample) is None:
            raise ValueError(f"gen_reference: the code does not route {route.sample}")


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def http_routes() -> str:
    """The table of Triton's HTTP routes with their restricted-API category."""
    _check_http_routes()
    return _table(
        ("method", "path", "category", "what"),
        (
            (
                route.methods,
                f"`{route.template}`",
                f"`{routes.restricted_category(route.sample)}`",
                route.what,
            )
            for route in HTTP_ROUTES
        ),
    )


def status_routes() -> str:
    """The status page's routes, read from the router they are added to."""
    app = web.Application()
    add_status_routes(app, lambda request: None, None)  # type: ignore[arg-type,return-value]
    rows = []
    for resource in app.router.resources():
        path = resource.canonical
        categories = DATA_CATEGORIES if path == DATA_PATH else PAGE_CATEGORIES
        methods = sorted({route.method for route in resource})
        rows.append((", ".join(methods), f"`{path}`", ", ".join(f"`{c}`" for c in categories)))
    return _table(("method", "path", "categories (each restricted one needs its header)"), rows)


def grpc_methods() -> str:
    """Every RPC tritonx serves: Triton's service from its descriptor, and the health check."""
    from tritonx.proto import service_pb2

    service = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    rows = []
    for method in service.methods:
        path = f"/{service.full_name}/{method.name}"
        if path not in METHOD_CATEGORY:
            raise ValueError(f"gen_reference: {path} has no restricted-API category")
        kind = "bidirectional stream" if method.client_streaming else "unary"
        rows.append(
            (
                f"`{method.name}`",
                f"`{method.input_type.name}` → `{method.output_type.name}`",
                kind,
                f"`{METHOD_CATEGORY[path]}`",
            )
        )
    extra = [path for path in METHOD_CATEGORY if not path.startswith(f"/{service.full_name}/")]
    for path in extra:
        rows.append(
            (
                f"`{path.lstrip('/')}`",
                "`HealthCheckRequest` → `HealthCheckResponse`",
                "unary",
                f"`{METHOD_CATEGORY[path]}`",
            )
        )
    return _table(("RPC", "messages", "kind", "category"), rows)


def error_codes() -> str:
    """The HTTP and gRPC status of each error code (Triton's tables)."""
    return _table(
        ("error code", "HTTP status", "gRPC status"),
        (
            (f"`{code.value}`", str(http_errors.STATUS[code]), f"`{grpc_errors.STATUS[code].name}`")
            for code in Code
        ),
    )


def extensions() -> str:
    """The extensions ``GET /v2`` lists, as a comma-separated line of code spans."""
    return ", ".join(f"`{name}`" for name in EXTENSIONS) + "\n"


def openai_routes() -> str:
    """The OpenAI frontend's routes, read from the aiohttp app it builds."""
    if importlib.util.find_spec("tritonx_frontend_openai") is None:
        return "*(the `tritonx-frontend-openai` distribution is not installed where the site was built)*\n"
    from tritonx_frontend_openai.api import API
    from tritonx_frontend_openai.frontend import OpenAIFrontend

    # make_app only registers the handlers: the class's functions stand for an instance's
    frontend = SimpleNamespace(
        base_path=OpenAIFrontend.base_path,
        api=API,
        options=SimpleNamespace(max_request_size=1),
        _errors=OpenAIFrontend._errors,
    )
    app = OpenAIFrontend.make_app(frontend)
    rows = []
    for resource in app.router.resources():
        methods = sorted({route.method for route in resource} - {"HEAD"})
        rows.append((", ".join(methods), f"`{resource.canonical}`"))
    return _table(("method", "path"), rows)


#: installed for the docs' own example, not a distribution of tritonx
_EXAMPLE_DISTRIBUTIONS = frozenset({"tritonx-backend-linear"})


def backend_config_keys() -> str:
    """The ``--backend-config=<backend>,<key>=<value>`` keys each installed backend reads."""
    from tritonx._runtime.plugins import collect, make_plugin_manager

    pm = make_plugin_manager()
    registries = collect(pm)
    distributions = pm.tritonx_distributions  # type: ignore[attr-defined]
    rows = []
    for name, backend in registries.backends.items():
        plugin = registries.backends.owners.get(name, "")
        dist = distributions.get(plugin)
        dist_name = dist.metadata["Name"] if dist is not None else "tritonx (built in)"
        if dist_name in _EXAMPLE_DISTRIBUTIONS:
            continue
        keys = backend.config_keys
        if keys is None:
            text = "(does not list its keys: none refused)"
        elif not keys:
            text = "none (any key under its name is refused)"
        else:
            text = ", ".join(f"`{key}`" for key in sorted(keys))
        rows.append((f"`{name}`", f"`{dist_name}`", text))
    return _table(("backend", "distribution", "keys it reads"), rows)


#: (module, constant naming the key, default, meaning) of the parameters tritonx adds
_PARAMETERS: tuple[tuple[str, str, str, str], ...] = (
    (
        "tritonx._core.residency",
        "PINNED_PARAMETER",
        "unset (not pinned)",
        "`true`: never unloaded by `--max-loaded-models`, `--model-memory-budget` or "
        "`--model-idle-unload-secs`",
    ),
    (
        "tritonx_backend_python.backend",
        "MODE_PARAMETER",
        "`process` (or `--backend-config=python,execution-mode=...`)",
        "`process`: each instance in a worker process; `in_process`: in the server",
    ),
    (
        "tritonx_backend_python.worker",
        "TIMEOUT_PARAMETER",
        "unset: no limit",
        "seconds > 0: an `execute()` running longer has its worker killed (`process` mode)",
    ),
    (
        "tritonx_backend_python.environment",
        "REQUIREMENTS_PARAMETER",
        "the model folder's `requirements.txt`, if any",
        "a requirements file inside the model's folder, installed for this model at load",
    ),
)


def tritonx_parameters() -> str:
    """The config ``parameters`` keys tritonx adds, each named from the constant that reads it."""
    rows = []
    for module_name, attribute, default, meaning in _PARAMETERS:
        if importlib.util.find_spec(module_name.split(".")[0]) is None:
            continue
        key = getattr(importlib.import_module(module_name), attribute)
        rows.append((f"`{key}`", default, meaning, f"`{module_name}`"))
    return _table(("parameter", "default", "meaning", "read in"), rows)
