"""``csv``: inference over CSV, on a port of its own (a :class:`tritonx.AiohttpFrontend`
example that runs requests through the server's pipeline)::

    tritonx serve --model-repository models --frontend-config csv,allow=true
    printf '1,1,1\\n2,0,1\\n' | curl --data-binary @- localhost:8004/lin

``POST /<model>`` takes one CSV row per batch item for the model's only input, and answers one
CSV row per item of its first output (``?output=<name>`` picks another). A model with more
than one input is refused. Errors are answered as text: 400, 404 or 503 for Triton's
invalid-argument, not-found and unavailable errors, 500 for the others.

A body is read whole and parsed on the event loop, so its size is bounded: aiohttp answers 413
to a body over :data:`MAX_BODY_BYTES` before reading it (a compressed body is bounded once
inflated), and closes the connection rather than read on (and inflate) what is left of it.
Parsing a body of that size holds the loop for up to ~200 ms (half a million one-value rows);
writing the answer's text costs about 2 µs a value, so an answer of more than
:data:`INLINE_VALUES` values is written in a worker thread, a chunk of values at a time (the
loop runs between them).
"""

from __future__ import annotations

import io
import math
import warnings
from typing import cast

import numpy as np
from aiohttp import web

import tritonx
from tritonx.errors import Code, TritonXError, invalid_arg
from tritonx.pipeline import Headers, PlainDecoded

STATUS = {Code.INVALID_ARG: 400, Code.NOT_FOUND: 404, Code.UNAVAILABLE: 503}
#: the largest body read (a client's bytes: parsing them blocks the loop, ~50-200 ms a MiB)
MAX_BODY_BYTES = 1 << 20
#: answers with more values than this are written in a worker thread (~2 µs a value)
INLINE_VALUES = 4096
#: values formatted in one call (one hold of the interpreter: ~15 ms)
CHUNK_VALUES = 16384


@tritonx.hookimpl
def tritonx_register_frontends(registry: tritonx.FrontendRegistry) -> None:
    """Register the ``csv`` frontend."""
    registry.add(CsvFrontend)


class CsvFrontend(tritonx.AiohttpFrontend):
    name = "csv"
    title = "CSV frontend"
    default_port = 8004

    def make_app(self) -> web.Application:
        # lingering_time=0: a body left unread (past the bound, or after an error) is not
        # read on, and inflated, to keep the connection: the connection closes instead
        app = web.Application(client_max_size=MAX_BODY_BYTES, handler_args={"lingering_time": 0})
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
            rows = parse_rows(await request.read(), request.charset, spec.numpy_dtype)
            inference = tritonx.InferenceRequest(
                model, {spec.name: rows}, requested_outputs=(output,)
            )
            headers = cast(Headers, request.headers)  # aiohttp's: what admit reads
            call = pipeline.admit(served, PlainDecoded(inference), headers)
            text = await call.run(
                lambda response: to_csv(response.outputs[output]),
                lambda response: response.outputs[output].size > INLINE_VALUES,
            )
        except TritonXError as exc:
            return web.Response(text=f"{exc.message}\n", status=STATUS.get(exc.code, 500))
        return web.Response(text=text, content_type="text/csv", headers=dict(call.reply_headers))


def parse_rows(body: bytes, charset: str | None, dtype: np.dtype) -> np.ndarray:
    """The CSV body (text in ``charset``, default UTF-8) as a ``[rows, columns]`` array of
    the input's datatype."""
    try:
        text = body.decode(charset or "utf-8")
    except (LookupError, UnicodeDecodeError) as exc:  # an unknown charset, or not text in it
        raise invalid_arg(f"csv: cannot read the body as {charset or 'utf-8'} text: {exc}") from exc
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            rows = np.loadtxt(io.StringIO(text), delimiter=",", dtype=dtype, ndmin=2)
    except ValueError as exc:
        raise invalid_arg(
            f"csv: cannot read the body as {np.dtype(dtype).name} rows: {exc}"
        ) from exc
    if not len(rows):
        raise invalid_arg("csv: the body has no rows")
    return rows


def to_csv(array: np.ndarray) -> str:
    """One CSV line per batch item (each value as ``str`` writes it), formatted
    :data:`CHUNK_VALUES` values at a time."""
    array = np.atleast_1d(array)
    width = math.prod(array.shape[1:])
    flat = array.reshape(-1)
    values: list[str] = []
    for start in range(0, flat.size, CHUNK_VALUES):
        chunk = flat[start : start + CHUNK_VALUES]
        values += map(str, chunk) if chunk.dtype == object else chunk.astype(str).tolist()
    if not width:  # items of no values: empty lines
        return "\n" * len(array)
    return "".join(",".join(values[i : i + width]) + "\n" for i in range(0, len(values), width))
