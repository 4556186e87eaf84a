"""Model warmup (``model_warmup``) on ONNX and Python models against real servers, checked
through tritonclient: zero / random / file data, ``count`` and ``batch_size``, every instance
warmed before READY, failing samples (UNAVAILABLE with Triton's reason), warmup requests
kept out of statistics and metrics.

The Python model records every execution (instance, and each request's input shape and
values) in a JSON-lines file named by its ``LOG`` parameter, so the test sees exactly what
the warmup ran.
"""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
from tritonclient.utils import InferenceServerException

from tritonx import Server
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from tritonx_backend_onnx.models import identity, make_model  # noqa: E402

RECORDER = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config["parameters"]
        self.log = params["LOG"]["string_value"]
        self.fail_on_zero = "FAIL_ON_ZERO" in params
        self.instance = args["model_instance_name"]
        self.inputs = [i["name"] for i in config["input"]]

    def execute(self, requests):
        rows, responses = [], []
        for request in requests:
            row = {}
            for name in self.inputs:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is None:
                    continue
                array = tensor.as_numpy()
                values = [
                    v.decode() if isinstance(v, bytes) else float(v) for v in array.reshape(-1)
                ]
                row[name] = {"shape": list(array.shape), "values": values}
            for name in ("START",):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    row[name] = {"shape": list(tensor.as_numpy().shape)}
            rows.append(row)
            first = pb_utils.get_input_tensor_by_name(request, self.inputs[0]).as_numpy()
            if self.fail_on_zero and first.dtype != np.object_ and not first.any():
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("zero input refused"))
                )
                continue
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", first)])
            )
        with open(self.log, "a") as f:
            f.write(json.dumps({"instance": self.instance, "requests": rows}) + "\\n")
        return responses
"""


def warmup_block(*samples: str) -> str:
    return "model_warmup [\n" + ",\n".join(samples) + "\n]\n"


def sample(name: str, inputs: dict[str, str], batch_size: int = 1, count: int | None = None) -> str:
    """One ``model_warmup`` entry; ``inputs`` maps a name to its ``value { ... }`` body."""
    parts = [f'name: "{name}"', f"batch_size: {batch_size}"]
    if count is not None:
        parts.append(f"count: {count}")
    for key, body in inputs.items():
        parts.append(f'inputs {{ key: "{key}" value: {{ {body} }} }}')
    return "{ " + " ".join(parts) + " }"


def add_recorder(
    repo: ModelRepositoryBuilder,
    name: str,
    log: Path,
    warmup: str,
    *,
    datatype: str = "FP32",
    dims: tuple[int, ...] = (4,),
    max_batch_size: int = 4,
    instances: int = 1,
    fail_on_zero: bool = False,
    extra: str = "",
) -> Path:
    params = {"LOG": str(log)}
    if fail_on_zero:
        params["FAIL_ON_ZERO"] = "1"
    return repo.add(
        name,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=[("INPUT0", datatype, list(dims))],
        outputs=[("OUTPUT0", datatype, list(dims))],
        parameters=params,
        versions={1: {"model.py": RECORDER}},
        extra=f"instance_group [ {{ count: {instances}, kind: KIND_CPU }} ]\n" + extra + warmup,
    )


def executions(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


@pytest.fixture
def tritonx_plugins() -> tuple[str, ...]:
    return ("backend_python", "backend_onnx")


@contextlib.asynccontextmanager
async def serve(
    repo: ModelRepositoryBuilder, plugin_manager: Any, **overrides: Any
) -> AsyncIterator[Server]:
    async with Server(
        loopback_settings(repo.root, **overrides), plugin_manager=plugin_manager
    ) as server:
        yield server


async def index_row(server: Server, name: str) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        rows = await client.get_model_repository_index()
    finally:
        await client.close()
    return next(r for r in rows if r["name"] == name)


async def counts(server: Server, name: str) -> tuple[int, int]:
    """(inference_count, execution_count) of ``name`` over gRPC statistics."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        stats = await client.get_inference_statistics(name, as_json=True)
    finally:
        await client.close()
    entry = stats["model_stats"][0]
    return int(entry.get("inference_count", 0)), int(entry.get("execution_count", 0))


async def metric(server: Server, family: str, model: str) -> float:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{server.metrics_url}/metrics") as response:
            text = await response.text()
    for line in text.splitlines():
        if line.startswith(family + "{") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{family} for {model} not in /metrics")


async def test_python_zero_data_every_instance_count_batch_and_no_stats(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    log = tmp_path / "exec.jsonl"
    add_recorder(
        model_repository,
        "rec",
        log,
        warmup_block(
            sample("zeros", {"INPUT0": "data_type: TYPE_FP32 dims: [4] zero_data: true"}, 2, 3)
        ),
        instances=2,
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("rec")
        runs = executions(log)
        # 2 instances x count 3, each execution holding batch_size 2 requests of one item
        assert len(runs) == 6
        assert sorted({r["instance"] for r in runs}) == ["rec_0_0", "rec_0_1"]
        for run in runs:
            assert [req["INPUT0"] for req in run["requests"]] == [
                {"shape": [1, 4], "values": [0.0] * 4}
            ] * 2
        assert await counts(server, "rec") == (0, 0)
        assert await metric(server, "nv_inference_count", "rec") == 0
        assert await metric(server, "nv_inference_exec_count", "rec") == 0
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            inp.set_data_from_numpy(np.ones((1, 4), np.float32))
            result = await client.infer("rec", [inp])
        finally:
            await client.close()
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones((1, 4), np.float32))
        assert len(executions(log)) == 7
        assert await counts(server, "rec") == (1, 1)
        assert await metric(server, "nv_inference_count", "rec") == 1


async def test_random_data_bytes_zero_data_and_non_batching(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    rand_log, str_log = tmp_path / "rand.jsonl", tmp_path / "str.jsonl"
    add_recorder(
        model_repository,
        "rand",
        rand_log,
        warmup_block(
            sample("random", {"INPUT0": "data_type: TYPE_FP32 dims: [16] random_data: true"})
        ),
        dims=(16,),
        max_batch_size=0,
    )
    # BYTES: zero data and random data are both empty strings (as Triton)
    add_recorder(
        model_repository,
        "strings",
        str_log,
        warmup_block(
            sample("zero string", {"INPUT0": "data_type: TYPE_STRING dims: [3] zero_data: true"}),
            sample(
                "random string", {"INPUT0": "data_type: TYPE_STRING dims: [3] random_data: true"}
            ),
        ),
        datatype="BYTES",
        dims=(3,),
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("rand") and server.model_ready("strings")
        (run,) = executions(rand_log)
        (request,) = run["requests"]
        assert request["INPUT0"]["shape"] == [16]  # no batch dimension: max_batch_size 0
        assert any(v != 0.0 for v in request["INPUT0"]["values"])
        runs = executions(str_log)
        assert [r["requests"] for r in runs] == [
            [{"INPUT0": {"shape": [1, 3], "values": ["", "", ""]}}]
        ] * 2


async def test_input_data_file(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    log, str_log = tmp_path / "file.jsonl", tmp_path / "strfile.jsonl"
    model_dir = add_recorder(
        model_repository,
        "fromfile",
        log,
        warmup_block(
            sample("file", {"INPUT0": 'data_type: TYPE_FP32 dims: [4] input_data_file: "raw"'})
        ),
    )
    (model_dir / "warmup").mkdir()
    # a longer file: the first 16 bytes are used
    (model_dir / "warmup" / "raw").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    str_dir = add_recorder(
        model_repository,
        "strfile",
        str_log,
        warmup_block(
            sample("strings", {"INPUT0": 'data_type: TYPE_STRING dims: [2] input_data_file: "s"'})
        ),
        datatype="BYTES",
        dims=(2,),
    )
    (str_dir / "warmup").mkdir()
    (str_dir / "warmup" / "s").write_bytes(
        b"".join(struct.pack("<I", len(s)) + s for s in (b"hi", b"there"))
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("fromfile") and server.model_ready("strfile")
        (run,) = executions(log)
        assert run["requests"][0]["INPUT0"] == {"shape": [1, 4], "values": [0.0, 1.0, 2.0, 3.0]}
        (run,) = executions(str_log)
        assert run["requests"][0]["INPUT0"] == {"shape": [1, 2], "values": ["hi", "there"]}


@pytest.mark.parametrize(
    ("body", "files", "reason"),
    [
        (
            'data_type: TYPE_FP32 dims: [4] input_data_file: "short"',
            {"short": b"\0" * 8},
            "warmup setting expects 16 bytes, but the data provided from shortonly has 8 bytes",
        ),
        (
            'data_type: TYPE_FP32 dims: [4] input_data_file: "missing"',
            {},
            "failed to open text file for read ",
        ),
        (
            'data_type: TYPE_FP32 dims: [4] input_data_file: "../config.pbtxt"',
            {},
            "warmup input_data_file '../config.pbtxt' must name a file inside the model's "
            "'warmup' folder",
        ),
        (
            "data_type: TYPE_FP32 dims: [-1] zero_data: true",
            {},
            "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'",
        ),
        (
            "data_type: TYPE_FP32 dims: [4]",
            {},
            "warmup setting expects input 'INPUT0' to have input_data_type set",
        ),
        (
            "data_type: TYPE_FP32 dims: [3] zero_data: true",
            {},
            "unexpected shape for input 'INPUT0' for model 'bad'. Expected [-1,4], got [1,3].",
        ),
    ],
)
async def test_bad_warmup_settings_fail_the_load(
    model_repository: ModelRepositoryBuilder,
    plugin_manager: Any,
    tmp_path: Path,
    body: str,
    files: dict[str, bytes],
    reason: str,
) -> None:
    log = tmp_path / "bad.jsonl"
    model_dir = add_recorder(
        model_repository, "bad", log, warmup_block(sample("s", {"INPUT0": body}))
    )
    (model_dir / "warmup").mkdir()
    for name, data in files.items():
        (model_dir / "warmup" / name).write_bytes(data)
    async with serve(model_repository, plugin_manager) as server:
        assert not server.model_ready("bad")
        row = await index_row(server, "bad")
        assert row["state"] == "UNAVAILABLE"
        assert reason in row["reason"], row["reason"]
        assert executions(log) == []  # nothing ran


async def test_failing_sample_makes_the_model_unavailable(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    log = tmp_path / "fail.jsonl"
    add_recorder(
        model_repository,
        "failing",
        log,
        warmup_block(
            sample("ones", {"INPUT0": 'data_type: TYPE_FP32 dims: [4] input_data_file: "ones"'}),
            sample("zeros", {"INPUT0": "data_type: TYPE_FP32 dims: [4] zero_data: true"}, 2, 5),
            sample("never", {"INPUT0": "data_type: TYPE_FP32 dims: [4] zero_data: true"}),
        ),
        fail_on_zero=True,
    )
    (model_repository.root / "failing" / "warmup").mkdir()
    (model_repository.root / "failing" / "warmup" / "ones").write_bytes(
        np.ones(4, np.float32).tobytes()
    )
    async with serve(
        model_repository, plugin_manager, model_control_mode="explicit", load_model=("failing",)
    ) as server:
        assert not server.model_ready("failing")
        expected = "failed to run warmup sample 'zeros': zero input refused; zero input refused; "
        row = await index_row(server, "failing")
        assert row["state"] == "UNAVAILABLE" and expected in row["reason"]
        # the first sample ran, then the failing one once; the warmup stopped there
        assert len(executions(log)) == 2
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            with pytest.raises(InferenceServerException) as caught:
                await client.load_model("failing")
        finally:
            await client.close()
        assert "load failed for model 'failing'" in caught.value.message()
        assert expected in caught.value.message()


async def test_onnx_warmup_and_failing_sample(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    model_repository.add(
        "onnx_id",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [4])],
        versions={1: {"model.onnx": identity(TensorProto.FLOAT, [None, 4])}},
        extra=warmup_block(
            sample("z", {"INPUT0": "data_type: TYPE_FP32 dims: [4] zero_data: true"}, 4, 2),
            sample("r", {"INPUT0": "data_type: TYPE_FP32 dims: [4] random_data: true"}),
        ),
    )
    # OUT = Gather(DATA, IDX): an index out of range fails in ONNX Runtime at run time
    gather = make_model(
        [helper.make_node("Gather", ["DATA", "IDX"], ["OUT"], axis=0)],
        [("DATA", TensorProto.FLOAT, [4]), ("IDX", TensorProto.INT64, [1])],
        [("OUT", TensorProto.FLOAT, [1])],
    ).SerializeToString()
    model_dir = model_repository.add(
        "onnx_gather",
        backend="onnxruntime",
        inputs=[("DATA", "FP32", [4]), ("IDX", "INT64", [1])],
        outputs=[("OUT", "FP32", [1])],
        versions={1: {"model.onnx": gather}},
        extra=warmup_block(
            sample(
                "in range",
                {
                    "DATA": "data_type: TYPE_FP32 dims: [4] random_data: true",
                    "IDX": "data_type: TYPE_INT64 dims: [1] zero_data: true",
                },
            ),
            sample(
                "out of range",
                {
                    "DATA": "data_type: TYPE_FP32 dims: [4] zero_data: true",
                    "IDX": 'data_type: TYPE_INT64 dims: [1] input_data_file: "idx"',
                },
            ),
        ),
    )
    (model_dir / "warmup").mkdir()
    (model_dir / "warmup" / "idx").write_bytes(np.array([7], np.int64).tobytes())
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("onnx_id")
        assert await counts(server, "onnx_id") == (0, 0)
        assert not server.model_ready("onnx_gather")
        row = await index_row(server, "onnx_gather")
        assert row["state"] == "UNAVAILABLE"
        assert "failed to run warmup sample 'out of range': " in row["reason"], row["reason"]
        assert "'in range'" not in row["reason"]


async def test_sequence_model_warmup_with_control_inputs(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    log = tmp_path / "seq.jsonl"
    add_recorder(
        model_repository,
        "seq",
        log,
        warmup_block(
            sample(
                "sequence sample",
                {
                    "INPUT0": "data_type: TYPE_FP32 dims: [4] zero_data: true",
                    "START": "data_type: TYPE_INT32 dims: [1] zero_data: true",
                },
                batch_size=2,
            )
        ),
        extra='sequence_batching { control_input [ { name: "START" control [ { kind: '
        "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }\n",
    )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("seq")
        (run,) = executions(log)
        assert (
            run["requests"]
            == [{"INPUT0": {"shape": [1, 4], "values": [0.0] * 4}, "START": {"shape": [1, 1]}}] * 2
        )
        assert await counts(server, "seq") == (0, 0)


async def test_ensemble_warmup_refused(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any
) -> None:
    model_repository.add_identity("inner", dims=[4])
    model_repository.add(
        "ens",
        config="""
name: "ens"
platform: "ensemble"
input [ { name: "IN", data_type: TYPE_FP32, dims: [4] } ]
output [ { name: "OUT", data_type: TYPE_FP32, dims: [4] } ]
ensemble_scheduling { step [ { model_name: "inner" model_version: -1
  input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ] }
model_warmup [ { name: "w" batch_size: 1 inputs { key: "IN" value: {
  data_type: TYPE_FP32 dims: [4] zero_data: true } } } ]
""",
    )
    async with serve(model_repository, plugin_manager) as server:
        row = await index_row(server, "ens")
        assert row["state"] == "UNAVAILABLE"
        assert "model_warmup can not be specified for ensemble 'ens'" in row["reason"]


DECOUPLED = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.log = params["LOG"]["string_value"]

    def execute(self, requests):
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            with open(self.log, "a") as f:
                f.write(json.dumps({"values": data.reshape(-1).tolist()}) + "\\n")
            if data.any():
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError("zeros refused")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None
"""


async def test_decoupled_model_warmup(
    model_repository: ModelRepositoryBuilder, plugin_manager: Any, tmp_path: Path
) -> None:
    for name, source in (("dec_ok", "random_data: true"), ("dec_bad", "zero_data: true")):
        model_repository.add(
            name,
            backend="python",
            inputs=[("INPUT0", "FP32", [4])],
            outputs=[("OUTPUT0", "FP32", [4])],
            parameters={"LOG": str(tmp_path / f"{name}.jsonl")},
            versions={1: {"model.py": DECOUPLED}},
            extra="model_transaction_policy { decoupled: true }\n"
            + warmup_block(sample("s", {"INPUT0": f"data_type: TYPE_FP32 dims: [4] {source}"})),
        )
    async with serve(model_repository, plugin_manager) as server:
        assert server.model_ready("dec_ok")
        assert len(executions(tmp_path / "dec_ok.jsonl")) == 1
        assert not server.model_ready("dec_bad")
        row = await index_row(server, "dec_bad")
        assert row["reason"].endswith("failed to run warmup sample 's': zeros refused; ")
