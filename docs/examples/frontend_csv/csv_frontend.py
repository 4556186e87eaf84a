"""``csv``: inference over CSV, on a port of its own (a :class:`tritonx.AiohttpFrontend`
example that runs requests through the server's pipeline)::

    tritonx serve --model-repository models --frontend-config csv,allow=true
    printf '1,1,1\\n2,0,1\\n' | curl --data-binary @- localhost:8004/lin

``POST /<model>`` takes one CSV row per batch item for the model's only input, and answers one
CSV row per item of its first output (``?output=<name>`` picks another). A model with more
than one input is refused. Errors are answered as text: 400, 404 or 503 for Triton's
invalid-argument, not-found and unavailable errors, 500 for the others.

A body is read whole and parsed on the event loop, so its size is bounded: aiohttp answers 413
to a body over :data:`MAX_BODY_BYTES` before reading it.
"""

from __future__ import annotations

import io
from typing import cast

import numpy as np
from aiohttp import web

import tritonx
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.pipeline import Headers, PlainDecoded

STATUS = {Code.INVALID_ARG: 400, Code.NOT_FOUND: 404, Code.UNAVAILABLE: 503}
#: the largest body read (a client's bytes: parsing them blocks the loop for ~ms per MiB)
MAX_BODY_BYTES = 1 << 20


@tritonx.hookimpl
def tritonx_register_frontends(registry: tritonx.FrontendRegistry) -> None:
    """Register the ``csv`` frontend."""
    registry.add(CsvFrontend)


class CsvFrontend(tritonx.AiohttpFrontend):
    name = "csv"
    title = "CSV frontend"
    default_port = 8004

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/{model}", self.infer)
        return app

    async def infer(self, request: web.Request) -> web.Response:
        pipeline = self.server.pipeline()  # the steps every HTTP inference request takes
        model = request.match_info["model"]
        try:
            served, _ = await pipeline.resolve_loaded(model, "")  # "": the latest version
            if len(served.config.inputs) != 1:
                raise invalid_arg(
                    f"csv: model '{model}' has {len(served.config.inputs)} inputs, not 1"
                )
            spec = served.config.inputs[0]
            output = request.query.get("output", served.config.outputs[0].name)
            rows = parse_rows(await request.text(), spec.numpy_dtype)
            inference = tritonx.InferenceRequest(
                model, {spec.name: rows}, requested_outputs=(output,)
            )
            headers = cast(Headers, request.headers)  # aiohttp's: what admit reads
            call = pipeline.admit(served, PlainDecoded(inference), headers)
            text = await call.run(lambda response: to_csv(response.outputs[output]), no_thread)
        except TritonXError as exc:
            return web.Response(text=f"{exc.message}\n", status=STATUS.get(exc.code, 500))
        return web.Response(text=text, content_type="text/csv", headers=dict(call.reply_headers))


def parse_rows(text: str, dtype: np.dtype) -> np.ndarray:
    """The CSV body as a ``[rows, columns]`` array of the input's datatype."""
    try:
        return np.loadtxt(io.StringIO(text), delimiter=",", dtype=dtype, ndmin=2)
    except ValueError as exc:
        raise invalid_arg(
            f"csv: cannot read the body as {np.dtype(dtype).name} rows: {exc}"
        ) from exc


def to_csv(array: np.ndarray) -> str:
    """One CSV line per batch item."""
    return "".join(",".join(map(str, row)) + "\n" for row in array.reshape(len(array), -1))


def no_thread(response: tritonx.InferenceResponse) -> bool:
    """Encoding a response is cheap here: never worth a worker thread."""
    return False
