"""Stateful ONNX models under the sequence batcher, through tritonclient: control tensors and
implicit state (``sequence_batching.state``) fed to the graph as inputs, state outputs read
back, direct batches with filler rows, initial state from a data file."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
grpcclient = pytest.importorskip("tritonclient.grpc.aio")

from tritonclient.utils import InferenceServerException  # noqa: E402

from tritonx import Server  # noqa: E402
from tritonx.testing import ModelRepositoryBuilder, loopback_settings  # noqa: E402
from tritonx.types import ModelState  # noqa: E402
from tritonx_backend_onnx.models import sequence_accumulator  # noqa: E402

START = '{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }'
READY = '{ name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }'
CORRID = '{ name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT32 } ] }'


def add_model(
    repo: ModelRepositoryBuilder,
    name: str,
    *,
    strategy: str = "",
    reset_on_start: bool = True,
    corrid: bool = False,
    initial_state: str = "",
    state_output: str = "ACC_OUT",
    instances: int = 1,
) -> Any:
    controls = [READY] + ([START] if reset_on_start else []) + ([CORRID] if corrid else [])
    return repo.add(
        name,
        platform="onnxruntime_onnx",
        max_batch_size=4,
        inputs=[("INPUT", "INT32", [1])],
        outputs=[("OUTPUT", "INT32", [1])],
        versions={1: {"model.onnx": sequence_accumulator(reset_on_start, corrid)}},
        extra=(
            "sequence_batching {\n"
            f"  {strategy}\n"
            f"  control_input [ {', '.join(controls)} ]\n"
            f'  state [ {{ input_name: "ACC_IN" output_name: "{state_output}" '
            f"data_type: TYPE_INT32 dims: [ 1 ] {initial_state} }} ]\n"
            "}\n"
            f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
        ),
    )


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


@contextlib.asynccontextmanager
async def serve(repo: ModelRepositoryBuilder, plugin_manager: Any) -> AsyncIterator[Server]:
    settings = loopback_settings(repo.root, allow_http=False, allow_metrics=False)
    async with Server(settings, plugin_manager=plugin_manager) as server:
        yield server


async def run_sequence(url: str, model: str, cid: int, values: list[int]) -> list[int]:
    client = grpcclient.InferenceServerClient(url)
    outputs = []
    try:
        for i, value in enumerate(values):
            tensor = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], np.int32))
            result = await client.infer(
                model,
                [tensor],
                sequence_id=cid,
                sequence_start=i == 0,
                sequence_end=i == len(values) - 1,
            )
            assert result.get_output("ACC_OUT") is None  # the state stays in the server
            outputs.append(int(result.as_numpy("OUTPUT")[0, 0]))
    finally:
        await client.close()
    return outputs


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { max_candidate_sequences: 4 }"])
async def test_implicit_state_on_onnx(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, strategy: str
) -> None:
    """Ten interleaved sequences on two instances (4 slots each; some wait in the backlog):
    each sums its own inputs, whatever rows (fillers included) share its batches; CORRID
    reaches the graph as an INT32 input."""
    add_model(model_repository, "acc", strategy=strategy, corrid=True, instances=2)
    sequences = {100 + i: [i * 10 + k for k in range(1, 3 + i % 4)] for i in range(10)}
    async with serve(model_repository, plugin_manager) as server:
        results = await asyncio.gather(
            *(run_sequence(server.grpc_url, "acc", cid, v) for cid, v in sequences.items())
        )
    for (cid, values), outputs in zip(sequences.items(), results, strict=True):
        assert outputs == [int(s) + cid for s in np.cumsum(values)], cid


async def test_initial_state_from_a_data_file(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    """A graph that never resets its sum: the server restarts each sequence from the
    ``initial_state`` data file (little-endian INT32 1000)."""
    model_dir = add_model(
        model_repository,
        "from_file",
        reset_on_start=False,
        initial_state=(
            'initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "start.bin" '
            'name: "thousand" }'
        ),
    )
    (model_dir / "initial_state").mkdir()
    (model_dir / "initial_state" / "start.bin").write_bytes(np.int32(1000).tobytes())
    async with serve(model_repository, plugin_manager) as server:
        url = server.grpc_url
        assert await run_sequence(url, "from_file", 1, [1, 2, 3]) == [1001, 1003, 1006]
        assert await run_sequence(url, "from_file", 1, [5]) == [1005]  # the same ID, again


async def test_state_errors(model_repository: ModelRepositoryBuilder, plugin_manager: Any) -> None:
    add_model(model_repository, "no_output", state_output="MISSING")
    add_model(
        model_repository,
        "short_file",
        initial_state=(
            'initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "empty.bin" name: "e" }'
        ),
    )
    (model_repository.root / "short_file" / "initial_state").mkdir()
    (model_repository.root / "short_file" / "initial_state" / "empty.bin").write_bytes(b"")
    async with serve(model_repository, plugin_manager) as server:
        reasons = {
            r.name: r.reason for r in server.repository_index() if r.state is ModelState.UNAVAILABLE
        }
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            with pytest.raises(InferenceServerException, match="Request for unknown model"):
                await client.infer("no_output", [])
        finally:
            await client.close()
    assert (
        "unexpected inference output 'MISSING', allowed outputs are: OUTPUT, ACC_OUT"
        in (reasons["no_output"])
    )
    assert (
        "initial_state setting expects 4 bytes, but the data provided from empty.binonly has "
        "0 bytes." in reasons["short_file"]
    )
