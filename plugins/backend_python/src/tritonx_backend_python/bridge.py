"""What a python model reaches of the server (through :class:`tritonx.ServerHandle`): BLS
requests, model control, custom metrics and its log."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from tritonx.errors import TritonXError
from tritonx.types import InferenceRequest, InferenceResponse
from tritonx_backend_python.metrics import CustomMetrics, collector_for, labels_of

if TYPE_CHECKING:
    from tritonx.handle import ServerHandle

T = TypeVar("T")

#: ``pb_utils.LogLevel`` → logging levels.
_PY_LEVEL = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}

#: ``emit(response or error, final)``: where the responses of a BLS request go.
Emit = Callable[[InferenceResponse | TritonXError, bool], Any]


class ServerBridge:
    """The server as one model instance sees it.

    :param server: the running server (``LoadContext.server``); ``None`` outside a server,
        where BLS and model control fail.
    :param logger: the model's logger.
    """

    def __init__(self, server: ServerHandle | None, logger: logging.Logger) -> None:
        self.server = server
        self.logger = logger
        self.metrics: CustomMetrics = collector_for(
            server.metrics_registry if server is not None else None
        )

    def _server(self) -> ServerHandle:
        if self.server is None:
            raise TritonXError("BLS is unavailable: the model was not loaded by a server")
        return self.server

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the server's loop (from any other thread)."""
        try:
            server = self._server()
        except TritonXError:
            coro.close()
            raise
        return server.run_threadsafe(coro)

    async def infer(
        self,
        request: InferenceRequest,
        decoupled: bool,
        emit: Emit,
        parent: InferenceRequest | None = None,
    ) -> None:
        """Run a BLS request; ``emit(response or error, final)`` for each response.
        ``parent``: the request it is made for (traced: the call gets a child trace)."""
        server = self._server()
        try:
            if not decoupled:
                emit(await server.infer(request, parent=parent), True)
                return
            async for response in server.infer_stream(request, parent=parent):
                emit(response, response.final)
                if response.final:
                    return
            emit(InferenceResponse(), True)
        except Exception as exc:
            emit(TritonXError.wrap(exc), True)

    async def control(self, op: str, kwargs: dict[str, Any]) -> Any:
        """``load`` / ``unload`` / ``ready`` requested by a model."""
        server = self._server()
        name = kwargs.get("model_name", "")
        if op == "ready":
            version = kwargs.get("model_version") or None
            return server.model_ready(name, int(version) if version else None)
        if op == "load":
            params: dict[str, object] = {}
            if kwargs.get("config"):
                params["config"] = kwargs["config"]
            for key, value in (kwargs.get("files") or {}).items():
                params[key] = value
            await server.load_model(name, params or None)
            return None
        if op == "unload":
            await server.unload_model(name, bool(kwargs.get("unload_dependents")))
            return None
        raise TritonXError(f"Unknown model loader request kind '{op}'")

    def metric_value(self, family: str, labels: Any) -> float | None:
        """The value of one custom metric."""
        return self.metrics.op(family, labels_of(labels), "value", None)

    def log(self, level: int, message: str) -> None:
        """A model's log line, into the server's log."""
        self.logger.log(_PY_LEVEL.get(level, logging.INFO), "%s", message)
