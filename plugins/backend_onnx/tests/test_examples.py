"""The bundled example repository (``tritonx/examples/model_repository``): its files are what
``scripts/make_example_models.py`` generates, and the models behave as Triton's examples."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from tritonx import InferenceRequest, Server
from tritonx.config import EXAMPLE_REPOSITORY
from tritonx.testing import loopback_settings

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_example_models.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_example_models", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_onnx",)


def test_committed_files_are_generated(script: ModuleType, tmp_path: Path) -> None:
    """Regenerating gives byte-identical files (rerun the script after changing it)."""
    assert (
        EXAMPLE_REPOSITORY == Path(script.__file__).resolve().parents[3] / script.EXAMPLE_REPOSITORY
    )
    written = script.write(tmp_path)
    assert len(written) == 2 * len(script.MODELS)
    for path in written:
        committed = EXAMPLE_REPOSITORY / path.relative_to(tmp_path)
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed} is stale: run {SCRIPT.name}"
        )
    for name in script.MODELS:
        assert (EXAMPLE_REPOSITORY / name / "README.md").is_file(), name


def test_opset(script: ModuleType) -> None:
    import onnx

    for name in script.MODELS:
        model = onnx.load(str(EXAMPLE_REPOSITORY / name / "1" / "model.onnx"))
        assert [(o.domain, o.version) for o in model.opset_import] == [("", script.OPSET)]
        assert model.ir_version == script.IR_VERSION


async def test_example_models_serve(plugin_manager: Any) -> None:
    settings = loopback_settings(
        EXAMPLE_REPOSITORY, allow_http=False, allow_grpc=False, allow_metrics=False
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        for name in ("simple", "simple_int8", "simple_string"):
            assert server.model_ready(name), server.status_table()
            cfg = server.model_config(name)
            assert cfg.max_batch_size == 8 and cfg.platform == "onnxruntime_onnx"
            assert [t.dims for t in cfg.inputs + cfg.outputs] == [(16,)] * 4

        a = np.arange(32, dtype=np.int32).reshape(2, 16)
        b = np.full((2, 16), 5, np.int32)
        out = (
            (await server.infer(InferenceRequest("simple", {"INPUT0": a, "INPUT1": b})))
            .raise_for_error()
            .outputs
        )
        np.testing.assert_array_equal(out["OUTPUT0"], a + b)
        np.testing.assert_array_equal(out["OUTPUT1"], a - b)

        a8 = np.array([list(range(100, 116))], np.int8)
        b8 = np.full((1, 16), 30, np.int8)
        out = (
            (await server.infer(InferenceRequest("simple_int8", {"INPUT0": a8, "INPUT1": b8})))
            .raise_for_error()
            .outputs
        )
        assert out["OUTPUT0"].dtype == np.int8
        np.testing.assert_array_equal(
            out["OUTPUT0"], (a8.astype(np.int32) + 30).astype(np.int8)
        )  # wraps
        np.testing.assert_array_equal(out["OUTPUT1"], a8 - b8)

        sa = np.array([[str(i).encode() for i in range(16)]], dtype=object)
        sb = np.array([[b"1"] * 16], dtype=object)
        out = (
            (await server.infer(InferenceRequest("simple_string", {"INPUT0": sa, "INPUT1": sb})))
            .raise_for_error()
            .outputs
        )
        assert out["OUTPUT0"].tolist() == [[str(i + 1).encode() for i in range(16)]]
        assert out["OUTPUT1"].tolist() == [[str(i - 1).encode() for i in range(16)]]


@pytest.fixture
def server_settings() -> Any:
    return loopback_settings(EXAMPLE_REPOSITORY, allow_metrics=False)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_clients(server_thread: Any, protocol: str) -> None:
    """Triton's own client library talks to the bundled examples, as in Triton's client examples."""
    client_mod: Any = pytest.importorskip(f"tritonclient.{protocol}")
    url = server_thread.server.http_url if protocol == "http" else server_thread.server.grpc_url
    client = client_mod.InferenceServerClient(url.split("://", 1)[-1])
    try:
        a = np.array([[str(i) for i in range(16)]], dtype=object)
        b = np.array([["1"] * 16], dtype=object)
        inputs = [client_mod.InferInput(n, [1, 16], "BYTES") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("simple_string", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [[str(i + 1).encode() for i in range(16)]]
        assert result.as_numpy("OUTPUT1").tolist() == [[str(i - 1).encode() for i in range(16)]]
        x = np.arange(16, dtype=np.int32).reshape(1, 16)
        inputs = [client_mod.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        for i in inputs:
            i.set_data_from_numpy(x)
        result = client.infer("simple", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * x)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 0 * x)
    finally:
        client.close()


#: what tritonclient's sequence examples send (``simple_*_sequence_*_infer_client.py``)
SEQUENCE_VALUES = [11, 7, 5, 3, 2, 0, 1]


def _sequence_expected(dyna: bool, cids: tuple[int, int, str]) -> list[list[int]]:
    """The outputs the examples check, per sequence (two numeric IDs, one string ID): START
    adds 1; with ``-d`` END adds the ID and the string-ID model accumulates."""
    negated = [-v for v in SEQUENCE_VALUES]
    seq0 = [1, *SEQUENCE_VALUES]
    seq1 = [101, *negated]
    if not dyna:
        return [seq0, seq1, [21, *negated]]
    running = [int(v) for v in np.cumsum([20, *negated])]
    return [
        [*seq0[:-1], seq0[-1] + cids[0]],
        [*seq1[:-1], seq1[-1] + cids[1]],
        [*running[:-1], running[-1] + int(cids[2])],
    ]


@pytest.mark.parametrize("dyna", [False, True], ids=["direct", "dyna"])
@pytest.mark.parametrize("kind", ["http", "grpc", "grpc_stream"])
def test_sequence_examples(server_thread: Any, kind: str, dyna: bool) -> None:
    """What tritonclient's sequence examples do (with and without ``-d``), with the values
    they check: two numeric sequences and one string sequence, sync calls or one stream."""
    protocol = "http" if kind == "http" else "grpc"
    client_mod: Any = pytest.importorskip(f"tritonclient.{protocol}")
    server = server_thread.server
    url = server.http_url if protocol == "http" else server.grpc_url
    int_model = "simple_dyna_sequence" if dyna else "simple_sequence"
    string_model = "simple_string_dyna_sequence" if dyna else "simple_sequence"
    cids: tuple[int, int, str] = (1000, 1001, "1002" if dyna else "d1f0a2b4-uuid")
    sequences: list[tuple[str, int | str, list[int]]] = [
        (int_model, cids[0], [0, *SEQUENCE_VALUES]),
        (int_model, cids[1], [100, *(-v for v in SEQUENCE_VALUES)]),
        (string_model, cids[2], [20, *(-v for v in SEQUENCE_VALUES)]),
    ]
    client = client_mod.InferenceServerClient(url)

    def request(model: str, cid: int | str, values: list[int], i: int) -> dict[str, Any]:
        tensor = client_mod.InferInput("INPUT", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.full((1, 1), values[i], np.int32))
        return {
            "model_name": model,
            "inputs": [tensor],
            "outputs": [client_mod.InferRequestedOutput("OUTPUT")],
            "request_id": f"{cid}_{i + 1}",
            "sequence_id": cid,
            "sequence_start": i == 0,
            "sequence_end": i == len(values) - 1,
        }

    results: dict[str, list[int]] = {str(cid): [] for _, cid, _ in sequences}
    try:
        if kind == "grpc_stream":
            import queue

            done: queue.Queue[Any] = queue.Queue()
            client.start_stream(callback=lambda result, error: done.put(error or result))
            for model, cid, values in sequences:
                for i in range(len(values)):
                    client.async_stream_infer(**request(model, cid, values, i))
            for _ in range(sum(len(v) for _, _, v in sequences)):
                item = done.get(timeout=30)
                assert not isinstance(item, Exception), item
                cid = item.get_response().id.split("_")[0]
                results[cid].append(int(item.as_numpy("OUTPUT")[0][0]))
            client.stop_stream()
        else:
            for model, cid, values in sequences:
                for i in range(len(values)):
                    result = client.infer(**request(model, cid, values, i))
                    results[str(cid)].append(int(result.as_numpy("OUTPUT")[0][0]))
    finally:
        client.close()
    assert [results[str(c)] for c in cids] == _sequence_expected(dyna, cids)
