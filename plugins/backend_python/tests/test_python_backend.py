"""The python backend through the in-process API: Triton model.py files, decoupled models,
BLS, auto-complete, errors, crashes and worker isolation, in both execution modes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import generate_latest

from tritonx import InferenceRequest, Server, TritonXError
from tritonx.errors import Code
from tritonx.testing import BackendContract, shared_memory_objects
from tritonx_backend_python import _ipc, messages
from tritonx_backend_python.process import WorkerProcess

MODELS = Path(__file__).parent / "models"
BOTH_MODES = pytest.mark.parametrize("mode", ["process", "in_process"])


def add_sub_inputs() -> dict[str, np.ndarray]:
    return {
        "INPUT0": np.array([1, 2, 3, 4], dtype=np.float32),
        "INPUT1": np.array([10, 20, 30, 40], dtype=np.float32),
    }


def text(value: str) -> np.ndarray:
    return np.array([[value.encode()]], dtype=object)


# ---------------------------------------------------------------------- the contract


class TestContractWorker(BackendContract):
    """The inherited backend contract, instances in worker processes."""

    backend_module = "tritonx_backend_python"
    framework_modules = ()
    plugins = ("backend_python",)
    mode = "process"

    @pytest.fixture
    def model(self, model_repository):
        return model_repository.add(
            "add_sub",
            backend="python",
            max_batch_size=8,
            inputs=[("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])],
            outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
            parameters={"TRITONX_EXECUTION_MODE": self.mode},
            versions={1: {"model.py": (MODELS / "add_sub.py").read_text()}},
        )


class TestContractInProcess(TestContractWorker):
    """The inherited backend contract, instances in the server process."""

    mode = "in_process"


# ---------------------------------------------------------------------- basics


@BOTH_MODES
async def test_add_sub(server: Server) -> None:
    response = await server.infer(InferenceRequest("add_sub", add_sub_inputs(), id="r1"))
    assert response.id == "r1"
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], [11, 22, 33, 44])
    np.testing.assert_array_equal(response.outputs["OUTPUT1"], [-9, -18, -27, -36])
    assert response.outputs["OUTPUT0"].dtype == np.float32


@BOTH_MODES
async def test_requested_outputs_reach_the_model(server: Server) -> None:
    request = InferenceRequest(
        "init_args",
        {"DATA": np.ones(3, np.float32)},
        id="abc",
        correlation_id=7,
        parameters={"x": 1, "y": "z"},
        requested_outputs=("INFO",),
    )
    response = await server.infer(request)
    assert list(response.outputs) == ["INFO"]
    info = json.loads(response.outputs["INFO"][0])
    assert info["id"] == "abc"
    assert info["correlation_id"] == 7
    assert json.loads(info["parameters"]) == {"x": 1, "y": "z"}
    assert isinstance(info["parameters"], str)  # a JSON string, as in Triton
    assert info["requested"] == ["INFO"]
    assert info["inputs"] == {"DATA": [11, [3]]}  # TRITONSERVER_TYPE_FP32


@BOTH_MODES
async def test_initialize_args(server: Server, model_repository, mode: str) -> None:
    response = await server.infer(InferenceRequest("init_args", {"DATA": np.ones(2, np.float32)}))
    info = json.loads(response.outputs["INFO"][0])
    args = info["args"]
    assert set(args) == {
        "model_config",
        "model_instance_kind",
        "model_instance_name",
        "model_instance_device_id",
        "model_repository",
        "model_version",
        "model_name",
    }
    assert all(isinstance(v, str) for v in args.values())
    config = json.loads(args["model_config"])
    assert config["name"] == "init_args"
    assert config["input"][0]["name"] == "DATA"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_name"] == "init_args"
    assert args["model_version"] == "1"
    model_dir = model_repository.root / "init_args"
    assert Path(args["model_repository"]) == model_dir
    assert Path(info["model_dir"]) == model_dir / "1"
    if mode == "process":
        assert info["pid"] != os.getpid()
    else:
        assert info["pid"] == os.getpid()


@BOTH_MODES
async def test_large_tensors_cross_by_shared_memory(server: Server, monkeypatch) -> None:
    segments: list[str] = []
    original = _ipc.ShmWriter.write

    def spy(self, buffers, total):
        name = original(self, buffers, total)
        segments.append(name)
        return name

    monkeypatch.setattr(_ipc.ShmWriter, "write", spy)
    data = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    response = await server.infer(InferenceRequest("init_args", {"DATA": data}))
    np.testing.assert_array_equal(response.outputs["DATA_OUT"], data[::-1])
    if server.model_config("init_args").parameters.get("TRITONX_EXECUTION_MODE") != "in_process":
        assert segments, "a 4 MB input should travel through a shared-memory segment"
    # segments are nameless: nothing of them is in /dev/shm (test_transport.py: reuse, removal)
    assert not {p for p in shared_memory_objects(os.getpid()) if p.startswith("/dev/shm/")}


@BOTH_MODES
async def test_bytes_tensors(server: Server) -> None:
    data = np.array([[b"hello"], [b"\x00\xffbin"], ["text"]], dtype=object)
    response = await server.infer(InferenceRequest("faulty", {"INPUT0": data}))
    out = response.outputs["OUTPUT0"]
    assert out.dtype == object
    assert out.tolist() == [[b"hello"], [b"\x00\xffbin"], [b"text"]]


@BOTH_MODES
async def test_bf16(server: Server, add_model) -> None:
    pytest.importorskip("torch")  # the model reads and makes BF16 through DLPack
    pytest.importorskip("ml_dtypes")
    import ml_dtypes

    add_model("bf16", "bf16", inputs=[("INPUT0", "BF16", [3])], outputs=[("OUTPUT0", "BF16", [3])])
    await server.load_model("bf16")
    values = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    response = await server.infer(InferenceRequest("bf16", {"INPUT0": values.view(np.uint16)}))
    out = response.outputs["OUTPUT0"]
    assert out.dtype == np.uint16  # the core holds BF16 as its bits
    np.testing.assert_array_equal(out.view(ml_dtypes.bfloat16).astype(np.float32), [3, -4, 6.5])


async def test_inputs_checked_against_config(server: Server) -> None:
    bad_type = add_sub_inputs()
    bad_type["INPUT0"] = bad_type["INPUT0"].astype(np.int32)
    with pytest.raises(TritonXError) as err:
        await server.infer(InferenceRequest("add_sub", bad_type))
    assert err.value.code is Code.INVALID_ARG
    assert "inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'" in (
        err.value.message
    )
    unknown = {**add_sub_inputs(), "INPUT9": np.zeros(4, np.float32)}
    with pytest.raises(TritonXError) as err:
        await server.infer(InferenceRequest("add_sub", unknown))
    assert "expected 2 inputs but got 3 inputs for model 'add_sub'" in err.value.message
    with pytest.raises(TritonXError) as err:
        await server.infer(
            InferenceRequest("add_sub", add_sub_inputs(), requested_outputs=("NOPE",))
        )
    assert "unexpected inference output 'NOPE' for model 'add_sub'" in err.value.message


async def test_instances_run_in_separate_processes(server: Server, add_model) -> None:
    add_model(
        "two",
        "init_args",
        inputs=[("DATA", "FP32", [-1])],
        outputs=[("INFO", "BYTES", [1]), ("DATA_OUT", "FP32", [-1])],
        extra="instance_group [ { count: 2, kind: KIND_CPU } ]\n",
    )
    await server.load_model("two")
    groups = server.model_config("two").to_json_dict()["instance_group"]
    assert [(g["count"], g["kind"]) for g in groups] == [(2, "KIND_CPU")]
    # two requests at once, each keeping its instance busy: one runs on each instance
    responses = await asyncio.gather(
        *(
            server.infer(
                InferenceRequest(
                    "two", {"DATA": np.ones(1, np.float32)}, parameters={"sleep_s": 0.5}
                )
            )
            for _ in range(2)
        )
    )
    infos = [json.loads(r.outputs["INFO"][0]) for r in responses]
    pids = {info["pid"] for info in infos}
    assert len(pids) == 2 and os.getpid() not in pids
    names = {info["args"]["model_instance_name"] for info in infos}
    assert len(names) == 2


async def test_finalize_and_logger(server: Server, caplog) -> None:
    caplog.set_level(logging.INFO)
    await server.unload_model("add_sub")
    assert any("add_sub finalized" in r.getMessage() for r in caplog.records)
    await server.load_model("add_sub")
    assert server.model_ready("add_sub")


@BOTH_MODES
async def test_logs_and_metrics_of_execute_are_handled_before_its_response(
    server: Server, add_model, caplog, mode: str
) -> None:
    """A worker's logs and metric updates travel on its control socket, its answer on the
    data socket: each response (read on the event loop) waits until everything the worker
    sent before it is handled, so a client never sees a response before its side effects."""
    caplog.set_level(logging.INFO)
    add_model(
        "chatty",
        "chatty",
        max_batch_size=4,
        inputs=[("VALUE", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
    )
    await server.load_model("chatty")
    for tag in range(5):
        response = await server.infer(
            InferenceRequest("chatty", {"VALUE": np.array([[tag]], np.int32)})
        )
        assert int(response.outputs["OUT"][0, 0]) == tag
        lines = [r for r in caplog.records if f"chatty request {tag} line" in r.getMessage()]
        assert len(lines) == 200, f"request {tag}: {len(lines)} of its 200 lines handled"
        metrics = generate_latest(server.dataplane.metrics_registry).decode()
        assert f'chatty_lines_custom{{model="chatty"}} {200 * (tag + 1)}.0' in metrics


# ---------------------------------------------------------------------- decoupled


@BOTH_MODES
async def test_decoupled_repeat_streams_n_responses(server: Server) -> None:
    values = np.array([4, 8, 15, 16, 23, 42], dtype=np.int32)
    responses = [
        r async for r in server.infer_stream(InferenceRequest("repeat", {"IN": values}, id="s"))
    ]
    data = [r for r in responses if not r.empty]
    assert [int(r.outputs["OUT"][0]) for r in data] == values.tolist()
    assert [int(r.outputs["IDX"][0]) for r in data] == list(range(len(values)))
    assert all(r.id == "s" and r.error is None for r in responses)
    assert responses[-1].final and responses[-1].empty
    assert not any(r.final for r in responses[:-1])


@BOTH_MODES
async def test_decoupled_zero_responses(server: Server) -> None:
    empty = np.zeros(0, dtype=np.int32)
    responses = [r async for r in server.infer_stream(InferenceRequest("repeat", {"IN": empty}))]
    assert len(responses) == 1 and responses[0].final and responses[0].empty


async def test_decoupled_model_needs_streaming(server: Server) -> None:
    with pytest.raises(TritonXError) as err:
        await server.infer(InferenceRequest("repeat", {"IN": np.ones(2, np.int32)}))
    assert err.value.code is Code.UNSUPPORTED


@BOTH_MODES
async def test_decoupled_concurrent_streams(server: Server) -> None:
    async def run(n: int) -> list[int]:
        request = InferenceRequest("repeat", {"IN": np.arange(n, dtype=np.int32)})
        return [int(r.outputs["OUT"][0]) async for r in server.infer_stream(request) if not r.empty]

    results = await asyncio.gather(*(run(n) for n in range(1, 9)))
    assert results == [list(range(n)) for n in range(1, 9)]


# ---------------------------------------------------------------------- BLS


@BOTH_MODES
@pytest.mark.parametrize(
    ("bls_mode", "expected"),
    [
        ("sync", [11, 22, 33, 44]),
        ("async", [-18, -36, -54, -72]),
        ("decoupled", [1, 2, 3, 4]),
        ("bytes_names", [11, 22, 33, 44]),
    ],
)
async def test_bls(server: Server, bls_mode: str, expected: list[int]) -> None:
    request = InferenceRequest("bls", add_sub_inputs(), parameters={"mode": bls_mode})
    response = await server.infer(request)
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], expected)
    assert response.outputs["MESSAGE"][0].decode().startswith(bls_mode)
    if bls_mode == "bytes_names":  # b"add_sub" and [b"OUTPUT0"] read as names
        assert response.outputs["MESSAGE"][0].decode() == "bytes_names:OUTPUT0"


@BOTH_MODES
async def test_bls_error_is_the_response_error(server: Server) -> None:
    request = InferenceRequest("bls", add_sub_inputs(), parameters={"mode": "missing"})
    response = await server.infer(request)
    message = response.outputs["MESSAGE"][0].decode()
    assert "Request for unknown model: 'no_such_model'" in message


async def test_bls_concurrent_calls(server: Server) -> None:
    requests = [
        InferenceRequest("bls", add_sub_inputs(), parameters={"mode": m})
        for m in ("sync", "async", "decoupled") * 4
    ]
    responses = await asyncio.gather(*(server.infer(r) for r in requests))
    assert all(r.error is None for r in responses)


# ---------------------------------------------------------------------- errors and crashes


@BOTH_MODES
async def test_exception_fails_only_its_request(server: Server, mode: str) -> None:
    async def call(value: str):
        try:
            return await server.infer(InferenceRequest("faulty", {"INPUT0": text(value)}))
        except TritonXError as exc:
            return exc

    results = await asyncio.gather(*(call(v) for v in ("ok", "raise", "ok2", "error", "ok3")))
    ok, raised, ok2, error, ok3 = results
    for good, value in ((ok, b"ok"), (ok2, b"ok2"), (ok3, b"ok3")):
        assert good.outputs["OUTPUT0"][0][0] == value
    assert isinstance(raised, TritonXError)
    assert raised.code is Code.INTERNAL
    assert "Failed to process the request(s) for model 'faulty_0'" in raised.message
    assert "ValueError: asked to raise" in raised.message
    assert isinstance(error, TritonXError)
    assert error.code is Code.INVALID_ARG and error.message == "asked for an error"
    assert server.model_ready("faulty")


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("segv", "signal 11 (SIGSEGV)"),
        ("abort", "signal 6 (SIGABRT)"),
        ("exit", "exited with code 3"),
    ],
)
async def test_crash_fails_the_instance_until_it_is_loaded_again(
    server: Server, caplog, how: str, reason: str
) -> None:
    with pytest.raises(TritonXError) as err:
        await server.infer(InferenceRequest("faulty", {"INPUT0": text(how)}))
    # Triton's message and status for the requests of a stub process that died
    assert err.value.message == "Stub process 'faulty_0' is not healthy."
    assert err.value.code is Code.INTERNAL
    assert any(reason in r.getMessage() and "faulty_0" in r.getMessage() for r in caplog.records)
    # the server keeps serving the other models
    response = await server.infer(InferenceRequest("add_sub", add_sub_inputs()))
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], [11, 22, 33, 44])
    # the instance does not come back by itself (as in Triton; test_recovery.py restarts
    # with restart-dead-stubs=true): loading the model again starts a fresh worker
    assert not server.model_ready("faulty")
    await server.load_model("faulty")
    assert server.model_ready("faulty")
    response = await server.infer(InferenceRequest("faulty", {"INPUT0": text("back")}))
    assert response.outputs["OUTPUT0"][0][0] == b"back"
    rows = [r for r in server.repository_index() if r.name == "faulty"]
    assert rows[0].state.value == "READY", rows


async def test_initialize_failure_fails_the_load(server: Server, model_repository) -> None:
    model_repository.add(
        "broken",
        backend="python",
        inputs=[("X", "FP32", [1])],
        outputs=[("Y", "FP32", [1])],
        versions={
            1: {
                "model.py": "class TritonPythonModel:\n"
                "    def initialize(self, args):\n"
                "        raise RuntimeError('no weights here')\n"
            }
        },
    )
    with pytest.raises(TritonXError) as err:
        await server.load_model("broken")
    assert "Failed to initialize Python stub: RuntimeError: no weights here" in err.value.message
    assert not server.model_ready("broken")


@BOTH_MODES
async def test_initialize_failure_fails_the_load_promptly(server: Server, add_model) -> None:
    """A worker whose ``initialize`` raised exits at once: the load fails without waiting."""
    add_model(
        "init_fails",
        "faulty",
        inputs=[("INPUT0", "BYTES", [1])],
        outputs=[("OUTPUT0", "BYTES", [1])],
        parameters={"FAIL_INITIALIZE": "yes"},
    )
    start = time.monotonic()
    with pytest.raises(TritonXError) as err:
        await server.load_model("init_fails")
    elapsed = time.monotonic() - start
    assert "Failed to initialize Python stub: RuntimeError: asked to fail initialize" in (
        err.value.message
    )
    assert elapsed < 3.0, f"the failed load took {elapsed:.1f} s"
    assert not server.model_ready("init_fails")
    rows = [r for r in server.repository_index() if r.name == "init_fails"]
    assert rows[0].state.value == "UNAVAILABLE", rows


def test_worker_exits_when_initialize_fails(tmp_path: Path) -> None:
    """The worker itself ends right after reporting the failure (the server does not have to
    kill it)."""
    model = tmp_path / "m" / "1" / "model.py"
    model.parent.mkdir(parents=True)
    model.write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise RuntimeError('no weights here')\n"
    )
    proc = WorkerProcess("init-fails")
    try:
        args = {"model_instance_name": "m_0", "model_config": "{}"}
        proc.data.send_bytes(messages.dumps(messages.Init(str(model), args, False, "x_")))
        assert proc.conn.poll(30)
        reply = messages.loads(proc.conn.recv_bytes())
        assert isinstance(reply, messages.InitFailed)
        assert reply.error == "RuntimeError: no weights here"
        assert "no weights here" in reply.traceback
        assert proc.exitcode(wait=2.0) == 0
    finally:
        proc.kill()
        proc.close()


async def test_execute_return_checked(server: Server, model_repository) -> None:
    model_repository.add(
        "wrong_return",
        backend="python",
        inputs=[("X", "FP32", [1])],
        outputs=[("Y", "FP32", [1])],
        versions={
            1: {
                "model.py": "class TritonPythonModel:\n    def execute(self, requests):\n        return 3\n"
            }
        },
    )
    await server.load_model("wrong_return")
    with pytest.raises(TritonXError) as err:
        await server.infer(InferenceRequest("wrong_return", {"X": np.ones(1, np.float32)}))
    assert "Expected a list in the execute return, found type '<class 'int'>'." in err.value.message


# ---------------------------------------------------------------------- auto-complete


@BOTH_MODES
async def test_auto_complete_without_config(server: Server, model_repository, mode: str) -> None:
    folder = model_repository.add(
        "auto",
        write_config=False,
        versions={1: {"model.py": (MODELS / "auto_complete.py").read_text()}},
    )
    if mode == "in_process":  # a model without config.pbtxt has no parameters: use a minimal one
        (folder / "config.pbtxt").write_text(
            'parameters { key: "TRITONX_EXECUTION_MODE" value: { string_value: "in_process" } }\n'
        )
    await server.load_model("auto")
    config = server.model_config("auto")
    assert config.backend == "python"
    assert config.max_batch_size == 4
    assert [(i.name, i.datatype.value, i.dims) for i in config.inputs] == [("INPUT0", "FP32", (4,))]
    assert [(o.name, o.datatype.value, o.dims) for o in config.outputs] == [
        ("OUTPUT0", "FP32", (4,))
    ]
    assert config.raw.HasField("dynamic_batching")
    x = np.ones((2, 4), np.float32)
    response = await server.infer(InferenceRequest("auto", {"INPUT0": x}))
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], x * 2)


STRICT_AUTO_COMPLETE = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]})
        return config
"""


async def test_auto_complete_conflict(server: Server, model_repository) -> None:
    model_repository.add(
        "auto_bad",
        backend="python",
        inputs=[("INPUT0", "INT32", [4])],
        versions={1: {"model.py": STRICT_AUTO_COMPLETE}},
    )
    with pytest.raises(TritonXError) as err:
        await server.load_model("auto_bad")
    assert (
        "configuration expects datatype TYPE_INT32 for input 'INPUT0', model provides TYPE_FP32"
        in err.value.message
    )


INVALID_AUTO_COMPLETE = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.as_dict()["no_such_field"] = 1
        return config
"""


@BOTH_MODES
async def test_auto_complete_invalid_config(server: Server, add_model, mode: str) -> None:
    folder = add_model("auto_invalid", "add_sub", inputs=[("INPUT0", "FP32", [4])])
    (folder / "1" / "model.py").write_text(INVALID_AUTO_COMPLETE)
    with pytest.raises(TritonXError) as err:
        await server.load_model("auto_invalid")
    assert "auto-complete of model 'auto_invalid' produced an invalid config" in err.value.message
    assert "no_such_field" in err.value.message, err.value.message


# ---------------------------------------------------------------------- environments


async def test_execution_env_path(server: Server, add_model, tmp_path: Path) -> None:
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").symlink_to(sys.executable)
    add_model(
        "in_env",
        "init_args",
        inputs=[("DATA", "FP32", [-1])],
        outputs=[("INFO", "BYTES", [1]), ("DATA_OUT", "FP32", [-1])],
        parameters={"EXECUTION_ENV_PATH": str(env)},
    )
    await server.load_model("in_env")
    data = np.arange(100_000, dtype=np.float32)
    response = await server.infer(InferenceRequest("in_env", {"DATA": data}))
    np.testing.assert_array_equal(response.outputs["DATA_OUT"], data[::-1])
    info = json.loads(response.outputs["INFO"][0])
    # the worker runs that interpreter, as a subprocess of the server (not a forkserver child)
    assert info["executable"] == str(env / "bin" / "python3")
    assert info["pid"] != os.getpid() and info["ppid"] == os.getpid()


async def test_no_shared_memory_left_after_shutdown(
    server_settings, plugin_manager, tmp_path: Path
) -> None:
    # a prefix of this server's own: other servers of this process may hold segments
    prefix = f"tritonx_test_{os.getpid()}_{tmp_path.name}_"
    settings = replace(
        server_settings, backend_config={"python": {"shm-region-prefix-name": prefix}}
    )
    async with Server(settings, plugin_manager=plugin_manager) as server:
        data = np.ones(500_000, np.float32)
        await server.infer(InferenceRequest("init_args", {"DATA": data}))
        assert {p for p in shared_memory_objects(os.getpid()) if prefix in p}
    assert not {p for p in shared_memory_objects(os.getpid()) if prefix in p}


def test_embedding_script_without_main_guard(tmp_path: Path) -> None:
    """A script that runs tritonx.Server at module level (no ``if __name__ == "__main__"``)
    must not be re-run inside the model's worker process."""
    import subprocess
    import sys
    import textwrap

    model = tmp_path / "models" / "echo"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "IN", data_type: TYPE_INT32, dims: [ 2 ] } ]\n'
        'output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 2 ] } ]\n'
    )
    (model / "1" / "model.py").write_text(
        textwrap.dedent("""
        import triton_python_backend_utils as pb_utils

        class TritonPythonModel:
            def execute(self, requests):
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT",
                        pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
    """)
    )
    script = tmp_path / "embed.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio
        import numpy as np
        import tritonx

        async def main():
            async with tritonx.Server(model_repository=[{str(tmp_path / "models")!r}], allow_http=False,
                                      allow_grpc=False, allow_metrics=False) as server:
                response = await server.infer(tritonx.InferenceRequest("echo", {{"IN": np.array([1, 2], np.int32)}}))
                print("OUT", response.outputs["OUT"].tolist())

        asyncio.run(main())
    """)
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("OUT [1, 2]") == 1, done.stdout
