"""The ``csv`` example frontend: rows in, rows out through the server's pipeline (statistics
counted, ``X-Request-ID`` echoed), and Triton's errors answered as text with their status."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator, Callable
from types import ModuleType

import aiohttp
import pluggy
import pytest

import tritonx
from tritonx.testing import ModelRepositoryBuilder, serve_repository


@pytest.fixture
async def url(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    model_repository: ModelRepositoryBuilder,
) -> AsyncIterator[tuple[str, tritonx.Server]]:
    """The frontend's URL on a server with ``echo`` (INT32 rows of 3, batches up to 8),
    ``wide`` (FP32, any rows and columns) and ``pair`` (two inputs)."""
    model_repository.add_identity("echo", datatype="INT32", dims=[3], max_batch_size=8)
    model_repository.add_identity("wide", datatype="FP32", dims=[-1, -1], max_batch_size=0)
    model_repository.add(
        "pair",
        backend="identity",
        inputs=[("INPUT0", "INT32", [3]), ("INPUT1", "INT32", [3])],
        outputs=[("OUTPUT0", "INT32", [3])],
    )
    register_plugin(example)
    async with serve_repository(
        model_repository,
        plugin_manager,
        frontend_config={"csv": {"port": "0"}},
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    ) as server:
        yield server.frontend_urls["csv"], server


async def post(url: str, body: str | bytes, **headers: str) -> tuple[int, str, str | None]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as r,
    ):
        return r.status, await r.text(), r.headers.get("X-Request-ID")


async def test_rows_in_rows_out(url: tuple[str, tritonx.Server]) -> None:
    base, server = url
    answer = await post(f"{base}/echo", "1,2,3\n4,5,6\n", **{"X-Request-ID": "r-1"})
    assert answer == (200, "1,2,3\n4,5,6\n", "r-1")
    stats = server.model_statistics("echo")[0][2]
    assert (stats.success.count, stats.execution_count) == (1, 1)  # one request, batch of 2


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("nope", "1,2,3\n", 404, "Request for unknown model: 'nope'"),
        ("echo", "1,2\n", 400, "unexpected shape for input 'INPUT0'"),
        ("echo", "1,x,3\n", 400, "csv: cannot read the body as int32 rows"),
        ("echo?output=OUTPUT9", "1,2,3\n", 400, "unexpected inference output 'OUTPUT9'"),
        ("pair", "1,2,3\n", 400, "csv: model 'pair' has 2 inputs, not 1"),
        ("echo", "", 400, "csv: the body has no rows"),
        ("echo", "# a comment\n\n", 400, "csv: the body has no rows"),
    ],
)
async def test_errors_are_text_with_their_status(
    url: tuple[str, tritonx.Server], path: str, body: str, status: int, message: str
) -> None:
    got_status, text, _ = await post(f"{url[0]}/{path}", body)
    assert (got_status, message in text) == (status, True), text


async def test_a_body_over_the_bound_is_refused_and_serving_goes_on(
    url: tuple[str, tritonx.Server], example: ModuleType
) -> None:
    """The worst case a client can send: a body past the bound gets 413 unread, and the next
    request is served."""
    base, _ = url
    row = "1,2,3\n"
    body = row * (example.MAX_BODY_BYTES // len(row) + 1)
    status, _, _ = await post(f"{base}/echo", body)
    assert status == 413
    assert await post(f"{base}/echo", row) == (200, row, None)


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"1,\xff,3\n", "text/csv", "csv: cannot read the body as utf-8 text"),
        (b"1,2,3\n", "text/csv; charset=no-such-charset", "csv: cannot read the body as no-such"),
    ],
)
async def test_a_body_that_is_not_text_is_a_client_error(
    url: tuple[str, tritonx.Server], body: bytes, content_type: str, message: str
) -> None:
    status, text, _ = await post(f"{url[0]}/echo", body, **{"Content-Type": content_type})
    assert (status, message in text) == (400, True), text


async def test_a_large_answer_is_written_in_full(
    url: tuple[str, tritonx.Server], example: ModuleType
) -> None:
    """An answer past INLINE_VALUES (written in a worker thread, in chunks) reads as the
    rows sent."""
    base, _ = url
    rows = "".join(f"{i},{-i},{2 * i}\n" for i in range(8))
    count = example.INLINE_VALUES + example.CHUNK_VALUES
    assert (await post(f"{base}/wide", "1\n" * count))[:2] == (200, "1.0\n" * count)
    assert await post(f"{base}/echo", rows) == (200, rows, None)


async def test_a_compressed_body_is_bounded_inflated_and_serving_goes_on(
    url: tuple[str, tritonx.Server], example: ModuleType
) -> None:
    """A small gzip body that inflates far past the bound gets 413, and the connection is
    closed rather than the rest inflated."""
    base, _ = url
    bomb = gzip.compress(b"1," * (64 * example.MAX_BODY_BYTES), 9)
    assert len(bomb) < example.MAX_BODY_BYTES
    status, _, _ = await post(f"{base}/echo", bomb, **{"Content-Encoding": "gzip"})
    assert status == 413
    assert await post(f"{base}/echo", "1,2,3\n") == (200, "1,2,3\n", None)
