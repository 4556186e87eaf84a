"""``--grpc-infer-response-compression-level``: ModelInfer and ModelStreamInfer responses
compressed as Triton compresses them, seen on the wire: the real tritonclient talks to the
server through a TCP relay that counts the bytes coming back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.errors import Code, TritonXError
from tritonx.testing import ModelRepositoryBuilder, identity, loopback_settings

#: 4 MiB of zeros: a few KiB once compressed
ZEROS = np.zeros(1 << 20, np.float32)


class Relay:
    """A TCP relay to ``port`` counting the bytes the server sends back."""

    def __init__(self) -> None:
        self.received = 0

    @contextlib.asynccontextmanager
    async def to(self, port: int) -> AsyncIterator[int]:
        async def pipe(reader: Any, writer: Any, counted: bool) -> None:
            try:
                while data := await reader.read(1 << 16):
                    if counted:
                        self.received += len(data)
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.close()

        async def handle(reader: Any, writer: Any) -> None:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.gather(
                pipe(reader, up_writer, False),
                pipe(up_reader, writer, True),
                return_exceptions=True,
            )

        relay = await asyncio.start_server(handle, "127.0.0.1", 0)
        try:
            yield int(relay.sockets[0].getsockname()[1])
        finally:
            relay.close()


def zeros() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [ZEROS.size], "FP32")
    tensor.set_data_from_numpy(ZEROS)
    return [tensor]


@pytest.mark.parametrize("level", ["none", "low", "medium", "HIGH"])
async def test_infer_responses_are_compressed_at_the_level(
    model_repository: ModelRepositoryBuilder, grpc_engine: str, level: str
) -> None:
    model_repository.add_identity("big", dims=[-1])
    settings = loopback_settings(
        model_repository.root,
        allow_http=False,
        allow_metrics=False,
        grpc_infer_response_compression_level=level,
        grpc_engine=grpc_engine,
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    relay = Relay()
    async with Server(settings, plugin_manager=pm) as srv, relay.to(srv.grpc_port) as port:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            assert await client.is_server_live()
            before = relay.received
            result = await client.infer("big", zeros())
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ZEROS)
            unary = relay.received - before

            async def requests() -> AsyncIterator[dict[str, Any]]:
                yield {"model_name": "big", "inputs": zeros()}

            before = relay.received
            async for streamed, error in client.stream_infer(requests()):
                assert error is None
                np.testing.assert_array_equal(streamed.as_numpy("OUTPUT0"), ZEROS)
            stream = relay.received - before
        finally:
            await client.close()
    if level == "none":
        assert unary > ZEROS.nbytes and stream > ZEROS.nbytes
    else:
        assert unary < ZEROS.nbytes // 100 and stream < ZEROS.nbytes // 100, (unary, stream)


async def test_an_unknown_level_stops_the_start(model_repository: ModelRepositoryBuilder) -> None:
    settings = loopback_settings(
        model_repository.root, allow_http=False, grpc_infer_response_compression_level="max"
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    with pytest.raises(TritonXError) as err:
        async with Server(settings, plugin_manager=pm):
            pass
    assert err.value.code is Code.INVALID_ARG
    assert err.value.message == (
        "invalid argument for --grpc-infer-response-compression-level: 'max' "
        "(none, low, medium or high)"
    )
