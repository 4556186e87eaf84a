"""Triton's system and CUDA shared-memory extensions, through the real tritonclient clients
(HTTP, gRPC and their aio variants) and real POSIX shared memory
(``tritonclient.utils.shared_memory``).

The ``simple`` / ``simple_string`` tests replay the call sequences of tritonclient's
``simple_{http,grpc}_shm_client.py`` and ``simple_{http,grpc}_shm_string_client.py``
(``simple`` is the bundled example's ONNX model, ``simple_string`` a Python model with the
same semantics). Every refusal is checked with Triton's status and message over HTTP and
gRPC. Region keys carry a random part: /dev/shm is shared by everything on the machine.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
import tritonclient.utils.shared_memory as shm
from tritonclient import utils
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._dataplane.shared_memory import SharedMemoryManager
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.config import EXAMPLE_REPOSITORY
from tritonx.testing import ModelRepositoryBuilder, ServerThread, identity, loopback_settings
from tritonx.testing.identity import IdentityBackend

SIMPLE_STRING_PY = """import numpy as np
import triton_python_backend_utils as pb_utils


def _ints(tensor):
    values = tensor.as_numpy()
    return np.array([int(v) for v in values.reshape(-1)], dtype=np.int32).reshape(values.shape)


def _strings(values):
    return np.array([str(v).encode() for v in values.reshape(-1)], dtype=object).reshape(
        values.shape
    )


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = _ints(pb_utils.get_input_tensor_by_name(request, "INPUT0"))
            b = _ints(pb_utils.get_input_tensor_by_name(request, "INPUT1"))
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", _strings(a + b)),
                pb_utils.Tensor("OUTPUT1", _strings(a - b))]))
        return responses
"""

SLOW_MS = 1500
#: Triton's prefix of core validation messages for a request without an id.
PREFIX = "[request id: <id_unknown>] "

#: Triton's code of an error → (HTTP status, gRPC status) as tritonclient reports them.
STATUS = {
    "INVALID_ARG": ("400", "StatusCode.INVALID_ARGUMENT"),
    "ALREADY_EXISTS": ("400", "StatusCode.ALREADY_EXISTS"),
    "NOT_FOUND": ("404", "StatusCode.NOT_FOUND"),
    "INTERNAL": ("500", "StatusCode.INTERNAL"),
    "UNSUPPORTED": ("501", "StatusCode.UNIMPLEMENTED"),
}


class ViewProbe(tritonx.Backend):
    """Reads INPUT0[0], waits for the test to change the client's region, reads it again:
    OUTPUT0 = [first, second]; response parameter ``writeable`` = the input's flag."""

    name = "view_probe"
    started = threading.Event()
    proceed = threading.Event()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return ViewProbeInstance()


class ViewProbeInstance(tritonx.ModelInstance):
    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        responses = []
        for request in requests:
            x = request.inputs["INPUT0"]
            first = float(x[0])
            ViewProbe.started.set()
            ViewProbe.proceed.wait(30)
            second = float(x[0])
            responses.append(
                InferenceResponse(
                    outputs={"OUTPUT0": np.array([first, second], np.float32)},
                    parameters={"writeable": bool(x.flags.writeable)},
                )
            )
        return responses


class _ViewProbePlugin:
    @staticmethod
    @tritonx.hookimpl
    def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
        registry.add(ViewProbe)


def build_repository(root: Path) -> ModelRepositoryBuilder:
    repo = ModelRepositoryBuilder(root)
    shutil.copytree(EXAMPLE_REPOSITORY / "simple", root / "simple")
    string_io = [("INPUT0", "BYTES", [16]), ("INPUT1", "BYTES", [16])]
    repo.add(
        "simple_string",
        backend="python",
        max_batch_size=8,
        inputs=string_io,
        outputs=[("OUTPUT0", "BYTES", [16]), ("OUTPUT1", "BYTES", [16])],
        versions={1: {"model.py": SIMPLE_STRING_PY}},
    )
    repo.add_identity("id_fp32", "FP32", dims=[-1])
    repo.add_identity("id_bytes", "BYTES", dims=[-1])
    repo.add(
        "id_two",
        backend="identity",
        inputs=[("INPUT0", "INT32", [16]), ("INPUT1", "INT32", [16])],
        outputs=[("OUTPUT0", "INT32", [16]), ("OUTPUT1", "INT32", [16])],
    )
    repo.add_identity("slow", "INT32", dims=[16], parameters={"execute_delay_ms": str(SLOW_MS)})
    repo.add(
        "probe",
        backend="view_probe",
        inputs=[("INPUT0", "FP32", [4])],
        outputs=[("OUTPUT0", "FP32", [2])],
    )
    repo.add(
        "classify",
        config=(
            'name: "classify"\nbackend: "identity"\nmax_batch_size: 0\n'
            'input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
            'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n'
        ),
    )
    return repo


def plugin_manager() -> Any:
    return make_plugin_manager(
        autoload=True,
        only=("backend_onnx", "backend_python"),
        extra=[identity, _ViewProbePlugin()],
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> ModelRepositoryBuilder:
    return build_repository(tmp_path_factory.mktemp("shm") / "models")


@pytest.fixture(scope="module")
def triton(repository: ModelRepositoryBuilder) -> Iterator[Server]:
    """One server for the module: HTTP and gRPC, client shared memory allowed."""
    settings = loopback_settings(repository.root, allow_metrics=False, allow_client_shm=True)
    thread = ServerThread(Server(settings, plugin_manager=plugin_manager()))
    thread.start()
    try:
        yield thread.server
    finally:
        thread.stop()


class Regions:
    """Creates POSIX shared-memory regions with unique keys; destroys them at teardown."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:10]
        self.handles: list[Any] = []

    def key(self, name: str) -> str:
        return f"/tritonx-test-{self.tag}-{name}"

    def create(self, name: str, byte_size: int) -> Any:
        handle = shm.create_shared_memory_region(name, self.key(name), byte_size)
        self.handles.append(handle)
        return handle

    def destroy(self) -> None:
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)
        self.handles.clear()


@pytest.fixture
def regions() -> Iterator[Regions]:
    r = Regions()
    try:
        yield r
    finally:
        r.destroy()


@pytest.fixture(params=["http", "grpc"])
def proto(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def client(triton: Server, proto: str) -> Iterator[Any]:
    """A synchronous client of ``proto``; unregisters every region after the test."""
    c: Any
    if proto == "http":
        c = httpclient.InferenceServerClient(triton.http_url)
    else:
        c = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        yield c
    finally:
        c.unregister_system_shared_memory()
        c.close()


def module_of(proto: str) -> Any:
    return httpclient if proto == "http" else grpcclient


def expect_error(proto: str, code: str, message: str, call: Callable[[], Any]) -> None:
    """``call()`` fails with Triton's ``code`` (as ``proto``'s status) and ``message``."""
    with pytest.raises(InferenceServerException) as info:
        call()
    status = STATUS[code][0 if proto == "http" else 1]
    assert (info.value.status(), info.value.message()) == (status, message)


def status_rows(c: Any, proto: str, name: str = "") -> list[dict[str, Any]]:
    """The system-region status as HTTP's JSON rows, whatever the protocol."""
    if proto == "http":
        return list(c.get_system_shared_memory_status(name))
    regions = c.get_system_shared_memory_status(name).regions
    return [
        {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
        for _, r in sorted(regions.items())
    ]


def http_call(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(url, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None
    finally:
        conn.close()


# ---------------------------------------------------------------------------------- replays


def test_simple_shm_client_sequence(triton: Server, client: Any, proto: str, regions: Regions):
    """``simple_{http,grpc}_shm_client.py``: INT32 inputs and outputs in two regions."""
    pytest.importorskip("tritonx_backend_onnx")
    mod = module_of(proto)
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    input0 = np.arange(16, dtype=np.int32)
    input1 = np.ones(16, dtype=np.int32)
    size = input0.nbytes
    out_handle = regions.create("output_data", size * 2)
    client.register_system_shared_memory("output_data", regions.key("output_data"), size * 2)
    in_handle = regions.create("input_data", size * 2)
    shm.set_shared_memory_region(in_handle, [input0])
    shm.set_shared_memory_region(in_handle, [input1], offset=size)
    client.register_system_shared_memory("input_data", regions.key("input_data"), size * 2)

    inputs = [
        mod.InferInput("INPUT0", [1, 16], "INT32"),
        mod.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_shared_memory("input_data", size)
    inputs[1].set_shared_memory("input_data", size, offset=size)
    if proto == "http":
        outputs = [mod.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")]
    else:
        outputs = [mod.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("output_data", size)
    outputs[1].set_shared_memory("output_data", size, offset=size)
    results = client.infer("simple", inputs, outputs=outputs)

    got = []
    for i, name in enumerate(("OUTPUT0", "OUTPUT1")):
        out = results.get_output(name)
        datatype, shape = (
            (out["datatype"], out["shape"]) if proto == "http" else (out.datatype, out.shape)
        )
        assert (datatype, list(shape)) == ("INT32", [1, 16])
        if proto == "http":  # as Triton: no data and no parameters for a shm output
            assert set(out) == {"name", "datatype", "shape"}
        got.append(
            shm.get_contents_as_numpy(
                out_handle, utils.triton_to_np_dtype(datatype), shape, offset=i * size
            )
        )
    assert got[0][0].tolist() == (input0 + input1).tolist()
    assert got[1][0].tolist() == (input0 - input1).tolist()
    assert status_rows(client, proto) == [
        {"name": "input_data", "key": regions.key("input_data"), "offset": 0, "byte_size": 128},
        {"name": "output_data", "key": regions.key("output_data"), "offset": 0, "byte_size": 128},
    ]
    client.unregister_system_shared_memory()
    assert status_rows(client, proto) == []


def test_simple_shm_string_client_sequence(
    triton: Server, client: Any, proto: str, regions: Regions
) -> None:
    """``simple_{http,grpc}_shm_string_client.py``: BYTES tensors (4-byte length prefixes)
    in shared memory, in and out."""
    pytest.importorskip("tritonx_backend_python")
    mod = module_of(proto)
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    in0 = np.arange(16, dtype=np.int32)
    in1 = np.ones(16, dtype=np.int32)
    input0 = np.array([str(x).encode() for x in in0], dtype=object)
    input1 = np.array([str(x).encode() for x in in1], dtype=object)
    expected_sum = np.array([str(x).encode() for x in in0 + in1], dtype=object)
    expected_diff = np.array([str(x).encode() for x in in0 - in1], dtype=object)
    ser0, ser1 = utils.serialize_byte_tensor(input0), utils.serialize_byte_tensor(input1)
    size0, size1 = utils.serialized_byte_size(ser0), utils.serialized_byte_size(ser1)
    out0_size = utils.serialized_byte_size(utils.serialize_byte_tensor(expected_sum))
    out1_size = utils.serialized_byte_size(utils.serialize_byte_tensor(expected_diff))
    if proto == "grpc":  # the gRPC example registers larger output regions
        out0_size = out1_size = max(size0, size1) + 1
    out0 = regions.create("output0_data", out0_size)
    out1 = regions.create("output1_data", out1_size)
    client.register_system_shared_memory("output0_data", regions.key("output0_data"), out0_size)
    client.register_system_shared_memory("output1_data", regions.key("output1_data"), out1_size)
    ip0 = regions.create("input0_data", size0)
    ip1 = regions.create("input1_data", size1)
    shm.set_shared_memory_region(ip0, [ser0])
    shm.set_shared_memory_region(ip1, [ser1])
    client.register_system_shared_memory("input0_data", regions.key("input0_data"), size0)
    client.register_system_shared_memory("input1_data", regions.key("input1_data"), size1)

    inputs = [
        mod.InferInput("INPUT0", [1, 16], "BYTES"),
        mod.InferInput("INPUT1", [1, 16], "BYTES"),
    ]
    inputs[0].set_shared_memory("input0_data", size0)
    inputs[1].set_shared_memory("input1_data", size1)
    outputs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("output0_data", out0_size)
    outputs[1].set_shared_memory("output1_data", out1_size)
    results = client.infer("simple_string", inputs, outputs=outputs)

    got = []
    for name, handle in (("OUTPUT0", out0), ("OUTPUT1", out1)):
        out = results.get_output(name)
        datatype, shape = (
            (out["datatype"], out["shape"]) if proto == "http" else (out.datatype, out.shape)
        )
        assert datatype == "BYTES"
        got.append(shm.get_contents_as_numpy(handle, utils.triton_to_np_dtype(datatype), shape))
    assert got[0][0].tolist() == expected_sum.tolist()
    assert got[1][0].tolist() == expected_diff.tolist()
    assert [row["name"] for row in status_rows(client, proto)] == [
        "input0_data",
        "input1_data",
        "output0_data",
        "output1_data",
    ]
    client.unregister_system_shared_memory()
    assert status_rows(client, proto) == []


@pytest.mark.parametrize("aio", [aiohttpclient, aiogrpcclient], ids=["http-aio", "grpc-aio"])
async def test_aio_clients_replay_the_shm_sequence(
    triton: Server, regions: Regions, aio: Any
) -> None:
    """The same sequence with the asyncio clients (identity model, FP32)."""
    is_http = aio is aiohttpclient
    c = aio.InferenceServerClient(triton.http_url if is_http else triton.grpc_url)
    try:
        await c.unregister_system_shared_memory()
        await c.unregister_cuda_shared_memory()
        data = np.linspace(-1, 1, 256, dtype=np.float32)
        src = regions.create("in", data.nbytes)
        dst = regions.create("out", data.nbytes)
        shm.set_shared_memory_region(src, [data])
        await c.register_system_shared_memory("in", regions.key("in"), data.nbytes)
        await c.register_system_shared_memory("out", regions.key("out"), data.nbytes)
        mod = httpclient if is_http else grpcclient
        inp = mod.InferInput("INPUT0", [256], "FP32")
        inp.set_shared_memory("in", data.nbytes)
        out = mod.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("out", data.nbytes)
        result = await c.infer("id_fp32", [inp], outputs=[out])
        meta = result.get_output("OUTPUT0")
        shape = meta["shape"] if is_http else list(meta.shape)
        assert shape == [256]
        got = shm.get_contents_as_numpy(dst, np.float32, shape)
        assert got.tolist() == data.tolist()
        status = await c.get_system_shared_memory_status()
        names = [r["name"] for r in status] if is_http else sorted(status.regions)
        assert names == ["in", "out"]
        await c.unregister_system_shared_memory("in")
        await c.unregister_system_shared_memory("out")
        status = await c.get_system_shared_memory_status()
        assert (len(status) if is_http else len(status.regions)) == 0
    finally:
        await c.unregister_system_shared_memory()
        await c.close()


# ---------------------------------------------------------------------------------- behaviour


def test_mixed_shm_and_wire_outputs(triton: Server, client: Any, proto: str, regions: Regions):
    """One output in shared memory, one on the wire: the wire one decodes (over gRPC the
    shm output keeps an empty ``raw_output_contents`` entry so the indexes line up)."""
    mod = module_of(proto)
    a = np.arange(16, dtype=np.int32)
    b = np.arange(100, 116, dtype=np.int32)
    src = regions.create("in0", a.nbytes)
    dst = regions.create("out0", a.nbytes)
    shm.set_shared_memory_region(src, [a])
    client.register_system_shared_memory("in0", regions.key("in0"), a.nbytes)
    client.register_system_shared_memory("out0", regions.key("out0"), a.nbytes)
    inputs = [mod.InferInput("INPUT0", [16], "INT32"), mod.InferInput("INPUT1", [16], "INT32")]
    inputs[0].set_shared_memory("in0", a.nbytes)
    inputs[1].set_data_from_numpy(b)
    outputs = [mod.InferRequestedOutput("OUTPUT0"), mod.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory("out0", a.nbytes)
    result = client.infer("id_two", inputs, outputs=outputs)
    assert result.as_numpy("OUTPUT1").tolist() == b.tolist()
    assert shm.get_contents_as_numpy(dst, np.int32, [16]).tolist() == a.tolist()
    if proto == "grpc":
        raw = result.get_response().raw_output_contents
        assert [len(r) for r in raw] == [0, b.nbytes]


def test_registered_offset_and_tensor_offsets(client: Any, proto: str, regions: Regions):
    """A region registered at an offset into its object (not page aligned), tensors at
    offsets into the region: each lands where the client put it."""
    mod = module_of(proto)
    data = np.arange(8, dtype=np.float32)
    handle = regions.create("big", 4096 * 2)
    shm.set_shared_memory_region(handle, [data], offset=4100 + 12)
    client.register_system_shared_memory("part", regions.key("big"), 256, offset=4100)
    assert status_rows(client, proto, "part") == [
        {"name": "part", "key": regions.key("big"), "offset": 4100, "byte_size": 256}
    ]
    inp = mod.InferInput("INPUT0", [8], "FP32")
    inp.set_shared_memory("part", data.nbytes, offset=12)
    out = mod.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("part", data.nbytes, offset=100)
    client.infer("id_fp32", [inp], outputs=[out])
    got = shm.get_contents_as_numpy(handle, np.float32, [8], offset=4100 + 100)
    assert got.tolist() == data.tolist()


def test_bytes_in_shared_memory(client: Any, proto: str, regions: Regions) -> None:
    """BYTES in and out of shared memory (Triton's serialization), including empty and
    non-UTF-8 elements; an output region too small for the serialized strings is refused."""
    mod = module_of(proto)
    values = np.array([b"", b"a", b"\xff\x00binary", "ünï".encode()], dtype=object)
    serialized = utils.serialize_byte_tensor(values)
    size = utils.serialized_byte_size(serialized)
    src = regions.create("sin", size)
    dst = regions.create("sout", size)
    shm.set_shared_memory_region(src, [serialized])
    client.register_system_shared_memory("sin", regions.key("sin"), size)
    client.register_system_shared_memory("sout", regions.key("sout"), size)
    inp = mod.InferInput("INPUT0", [4], "BYTES")
    inp.set_shared_memory("sin", size)
    out = mod.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory("sout", size)
    client.infer("id_bytes", [inp], outputs=[out])
    got = shm.get_contents_as_numpy(dst, np.object_, [4])
    assert got.tolist() == values.tolist()

    small = mod.InferRequestedOutput("OUTPUT0")
    small.set_shared_memory("sout", size - 1)
    expect_error(
        proto,
        "INTERNAL",
        f"shared memory size specified with the request for output 'OUTPUT0' ({size - 1} "
        f"bytes) should be at least {size} bytes to hold the results",
        lambda: client.infer("id_bytes", [inp], outputs=[small]),
    )
    # a shape promising more strings than the region holds
    more = mod.InferInput("INPUT0", [5], "BYTES")
    more.set_shared_memory("sin", size)
    expect_error(
        proto,
        "INVALID_ARG",
        f"{PREFIX}expected 5 string elements for inference input 'INPUT0' for model "
        "'id_bytes', got 4",
        lambda: client.infer("id_bytes", [more]),
    )


def test_client_writes_between_requests_are_seen(client: Any, proto: str, regions: Regions):
    """The region is the client's memory: each request reads what is there now."""
    mod = module_of(proto)
    handle = regions.create("live", 16)
    client.register_system_shared_memory("live", regions.key("live"), 16)
    inp = mod.InferInput("INPUT0", [4], "FP32")
    inp.set_shared_memory("live", 16)
    for value in (1.0, 2.5):
        shm.set_shared_memory_region(handle, [np.full(4, value, np.float32)])
        result = client.infer("id_fp32", [inp])
        assert result.as_numpy("OUTPUT0").tolist() == [value] * 4


def test_grpc_stream_reads_and_writes_shared_memory(triton: Server, regions: Regions) -> None:
    """ModelStreamInfer requests use shared memory as unary ones do."""
    import queue

    data = np.arange(6, dtype=np.float32)
    src = regions.create("stream_in", data.nbytes)
    dst = regions.create("stream_out", data.nbytes)
    shm.set_shared_memory_region(src, [data])
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    try:
        c.register_system_shared_memory("stream_in", regions.key("stream_in"), data.nbytes)
        c.register_system_shared_memory("stream_out", regions.key("stream_out"), data.nbytes)
        c.start_stream(lambda result, error: results.put((result, error)))
        inp = grpcclient.InferInput("INPUT0", [6], "FP32")
        inp.set_shared_memory("stream_in", data.nbytes)
        out = grpcclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("stream_out", data.nbytes)
        c.async_stream_infer("id_fp32", [inp], outputs=[out])
        result, error = results.get(timeout=30)
        assert error is None
        assert list(result.get_output("OUTPUT0").shape) == [6]
        assert shm.get_contents_as_numpy(dst, np.float32, [6]).tolist() == data.tolist()
        c.stop_stream()
    finally:
        c.unregister_system_shared_memory()
        c.close()


def test_reregister_after_unregister(client: Any, proto: str, regions: Regions) -> None:
    regions.create("again", 64)
    for _ in range(2):
        client.register_system_shared_memory("again", regions.key("again"), 64)
        assert [r["name"] for r in status_rows(client, proto)] == ["again"]
        client.unregister_system_shared_memory("again")
        assert status_rows(client, proto) == []
    client.unregister_system_shared_memory("never-registered")  # no error, as Triton


def test_metadata_lists_the_extensions(triton: Server) -> None:
    c = httpclient.InferenceServerClient(triton.http_url)
    try:
        extensions = c.get_server_metadata()["extensions"]
    finally:
        c.close()
    assert {"system_shared_memory", "cuda_shared_memory"} <= set(extensions)


# ---------------------------------------------------------------------------------- errors


def test_register_refusals(client: Any, proto: str, regions: Regions) -> None:
    regions.create("r", 64)
    key = regions.key("r")
    expect_error(
        proto,
        "INTERNAL",
        f"Unable to open shared memory region: '{regions.key('missing')}'",
        lambda: client.register_system_shared_memory("m", regions.key("missing"), 64),
    )
    for offset, size in ((0, 65), (1, 64), (64, 1), (65, 0)):
        expect_error(
            proto,
            "INVALID_ARG",
            "failed to register shared memory region 'r': invalid args",
            lambda offset=offset, size=size: client.register_system_shared_memory(
                "r", key, size, offset=offset
            ),
        )
    client.register_system_shared_memory("r", key, 64)
    expect_error(
        proto,
        "ALREADY_EXISTS",
        "shared memory region 'r' already in manager",
        lambda: client.register_system_shared_memory("r", key, 32),
    )
    prefix = "triton_python_backend_shm_region_"
    for bad in (f"{prefix}x", f"///{prefix}x"):
        expect_error(
            proto,
            "INVALID_ARG",
            f"cannot register shared memory region 'p' with key '{bad}' as the key contains "
            f"the reserved prefix '{prefix}'",
            lambda bad=bad: client.register_system_shared_memory("p", bad, 8),
        )
    expect_error(
        proto,
        "INVALID_ARG",
        "cannot register shared memory region 'p' - invalid shm key '//'",
        lambda: client.register_system_shared_memory("p", "//", 8),
    )
    assert [r["name"] for r in status_rows(client, proto)] == ["r"]


def test_status_refusals(client: Any, proto: str, regions: Regions) -> None:
    expect_error(
        proto,
        "NOT_FOUND",
        "Unable to find system shared memory region: 'nope'",
        lambda: client.get_system_shared_memory_status("nope"),
    )
    expect_error(
        proto,
        "NOT_FOUND",
        "Unable to find cuda shared memory region: 'nope'",
        lambda: client.get_cuda_shared_memory_status("nope"),
    )
    regions.create("sys", 16)
    client.register_system_shared_memory("sys", regions.key("sys"), 16)
    expect_error(
        proto,
        "NOT_FOUND",
        "The region named 'sys' is registered as system shared memory, not CUDA shared memory",
        lambda: client.get_cuda_shared_memory_status("sys"),
    )
    client.unregister_cuda_shared_memory("sys")  # another kind's region: left alone
    assert [r["name"] for r in status_rows(client, proto)] == ["sys"]


def test_infer_refusals(client: Any, proto: str, regions: Regions) -> None:
    mod = module_of(proto)
    handle = regions.create("r64", 64)
    shm.set_shared_memory_region(handle, [np.zeros(16, np.float32)])
    client.register_system_shared_memory("r64", regions.key("r64"), 64)

    def infer(region: str, size: int, offset: int = 0, shape: tuple[int, ...] = (16,)) -> Any:
        inp = mod.InferInput("INPUT0", list(shape), "FP32")
        inp.set_shared_memory(region, size, offset=offset)
        return client.infer("id_fp32", [inp])

    def infer_out(size: int, offset: int = 0) -> Any:
        inp = mod.InferInput("INPUT0", [16], "FP32")
        inp.set_shared_memory("r64", 64)
        out = mod.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("r64", size, offset=offset)
        return client.infer("id_fp32", [inp], outputs=[out])

    expect_error(
        proto,
        "NOT_FOUND",
        "Unable to find shared memory region: 'unregistered'",
        lambda: infer("unregistered", 64),
    )
    expect_error(
        proto,
        "INVALID_ARG",
        "Invalid offset for shared memory region: 'r64'",
        lambda: infer("r64", 4, offset=64),
    )
    expect_error(
        proto,
        "INVALID_ARG",
        "Invalid offset + byte size for shared memory region: 'r64'",
        lambda: infer("r64", 64, offset=4),
    )
    expect_error(
        proto,
        "INVALID_ARG",
        f"{PREFIX}input byte size mismatch for input 'INPUT0' for model 'id_fp32'. Expected "
        "32, got 64",
        lambda: infer("r64", 64, shape=(8,)),
    )
    expect_error(
        proto,
        "INVALID_ARG",
        "Invalid offset + byte size for shared memory region: 'r64'",
        lambda: infer_out(64, offset=8),
    )
    expect_error(
        proto,
        "INTERNAL",
        "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) "
        "should be at least 64 bytes to hold the results",
        lambda: infer_out(32),
    )
    if proto == "http":  # gRPC clients cannot send offsets above INT64_MAX
        expect_error(
            proto,
            "INVALID_ARG",
            f"Integer overflow detected: byte_size ({2**64 - 32}) + offset (32) exceeds maximum "
            f"value ({2**64 - 1}) for region 'r64'",
            lambda: infer_out(2**64 - 32, offset=32),
        )
    else:  # negative int64 offsets wrap to huge ones, as in tritonserver
        expect_error(
            proto,
            "INVALID_ARG",
            "Invalid offset for shared memory region: 'r64'",
            lambda: infer("r64", 4, offset=-8),
        )
    # classification results cannot go to shared memory
    out = mod.InferRequestedOutput("OUTPUT0", class_count=2)
    if proto == "http":
        out._parameters["shared_memory_region"] = "r64"  # the client refuses to set both
        out._parameters["shared_memory_byte_size"] = 64
        message = "Output can't set both 'shared_memory_region' and 'classification'"
    else:
        out._output.parameters["shared_memory_region"].string_param = "r64"
        out._output.parameters["shared_memory_byte_size"].int64_param = 64
        message = "output can't set both 'shared_memory_region' and 'classification'"
    inp = mod.InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(np.zeros(4, np.float32))
    expect_error(
        proto, "INVALID_ARG", message, lambda: client.infer("classify", [inp], outputs=[out])
    )


def test_http_malformed_requests(triton: Server, regions: Regions) -> None:
    """Triton's answers to what tritonclient never sends: shm with data, binary shm
    outputs, wrong parameter types, register bodies without fields, wrong methods."""
    url = triton.http_url
    regions.create("h", 64)
    status, _ = http_call(
        url,
        "POST",
        "/v2/systemsharedmemory/region/h/register",
        json.dumps({"key": regions.key("h"), "byte_size": 64}).encode(),
    )
    assert status == 200
    shm_params = {"shared_memory_region": "h", "shared_memory_byte_size": 16}
    cases: list[tuple[dict[str, Any], int, str]] = [
        (
            {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32", "data": [1, 2, 3, 4],
                         "parameters": shm_params}]},
            400,
            "Input must set only one of the following fields: 'data', 'binary_data_size' in "
            "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
            "'shared_memory_region'",
        ),
        (
            {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                         "parameters": {"shared_memory_region": 7}}]},
            500,
            "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string",
        ),
        (
            {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                         "parameters": {**shm_params, "shared_memory_offset": -1}}]},
            500,
            "Unable to parse 'shared_memory_offset': attempt to access JSON "
            "non-unsigned-integer as unsigned-integer",
        ),
        (
            {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                         "parameters": shm_params}],
             "outputs": [{"name": "OUTPUT0", "parameters": {**shm_params, "binary_data": True}}]},
            400,
            "Output can't set both 'shared_memory_region' and 'binary_data'",
        ),
        (  # no byte size: 0 bytes, which the shape does not match
            {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                         "parameters": {"shared_memory_region": "h"}}]},
            400,
            f"{PREFIX}input byte size mismatch for input 'INPUT0' for model 'id_fp32'. "
            "Expected 16, got 0",
        ),
    ]  # fmt: skip
    for body, code, message in cases:
        status, doc = http_call(url, "POST", "/v2/models/id_fp32/infer", json.dumps(body).encode())
        assert (status, doc) == (code, {"error": message}), body
    register = "/v2/systemsharedmemory/region/x/register"
    for body, code, message in [
        ({"byte_size": 8}, 400, "Shared memory register request has no 'key' field"),
        ({"key": regions.key("h")}, 400, "Shared memory register request has no 'byte_size' field"),
        ({"key": 5, "byte_size": 8}, 500, "attempt to access JSON non-string as string"),
        (
            {"key": regions.key("h"), "byte_size": -8},
            500,
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
    ]:
        status, doc = http_call(url, "POST", register, json.dumps(body).encode())
        assert (status, doc) == (code, {"error": message}), body
    status, doc = http_call(url, "POST", "/v2/systemsharedmemory/register", b"{}")
    assert (status, doc) == (
        400,
        {"error": "'region name' is necessary to register system shared memory region"},
    )
    status, doc = http_call(url, "POST", "/v2/cudasharedmemory/register", b"{}")
    assert (status, doc) == (
        400,
        {"error": "'region name' is necessary to register cuda shared memory region"},
    )
    for method, path in (
        ("POST", "/v2/systemsharedmemory/status"),
        ("GET", "/v2/systemsharedmemory/region/h/register"),
        ("GET", "/v2/cudasharedmemory/unregister"),
        ("PUT", "/v2/cudasharedmemory/status"),
    ):
        status, doc = http_call(url, method, path)
        assert (status, doc) == (405, {"error": "Method Not Allowed"}), path
    status, doc = http_call(url, "GET", "/v2/systemsharedmemory/region/h/status")
    assert (status, doc) == (
        200,
        [{"name": "h", "key": regions.key("h"), "offset": 0, "byte_size": 64}],
    )
    status, _ = http_call(url, "POST", "/v2/systemsharedmemory/unregister")
    assert status == 200


def test_grpc_malformed_parameters(triton: Server, regions: Regions) -> None:
    """Triton's ``ParseSharedMemoryParams`` checks, and shm inputs that also carry data."""
    regions.create("g", 64)
    c = grpcclient.InferenceServerClient(triton.grpc_url)
    try:
        c.register_system_shared_memory("g", regions.key("g"), 64)

        def tensor(with_data: bool = False, **params: Any) -> Any:
            inp = grpcclient.InferInput("INPUT0", [4], "FP32")
            if with_data:  # (setting data drops shm parameters: set them after)
                inp.set_data_from_numpy(np.zeros(4, np.float32))
            for key, value in params.items():
                param = inp._input.parameters[key]
                if isinstance(value, str):
                    param.string_param = value
                elif isinstance(value, bool):
                    param.bool_param = value
                else:
                    param.int64_param = value
            return inp

        cases = [
            (
                tensor(shared_memory_region=3, shared_memory_byte_size=16),
                "invalid value type for 'shared_memory_region' parameter for tensor 'INPUT0', "
                "expected string_param.",
            ),
            (
                tensor(with_data=True, shared_memory_offset=0),
                "'shared_memory_offset' can not be specified without 'shared_memory_region' "
                "parameter for tensor 'INPUT0'",
            ),
            (
                tensor(with_data=True, shared_memory_byte_size=16),
                "'shared_memory_byte_size' can not be specified without 'shared_memory_region' "
                "parameter for tensor 'INPUT0'",
            ),
            (
                tensor(shared_memory_region="g"),
                "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
                "parameter for tensor 'INPUT0'",
            ),
            (
                tensor(shared_memory_region="g", shared_memory_byte_size="16"),
                "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', "
                "expected int64_param.",
            ),
            (
                tensor(
                    shared_memory_region="g", shared_memory_byte_size=16, shared_memory_offset=True
                ),
                "invalid value type for 'shared_memory_offset' parameter for tensor 'INPUT0', "
                "expected int64_param.",
            ),
        ]
        for inp, message in cases:
            expect_error("grpc", "INVALID_ARG", message, lambda inp=inp: c.infer("id_fp32", [inp]))
        with_contents = tensor(shared_memory_region="g", shared_memory_byte_size=16)
        with_contents._input.contents.fp32_contents.extend([1, 2, 3, 4])
        expect_error(
            "grpc",
            "INVALID_ARG",
            "unexpected 'content' provided when using shared memory for input tensor 'INPUT0' "
            "for model 'id_fp32'",
            lambda: c.infer("id_fp32", [with_contents]),
        )
    finally:
        c.unregister_system_shared_memory()
        c.close()


def test_cuda_without_a_gpu(client: Any, proto: str) -> None:
    """No GPU (or no cuda-python) here: registering answers Triton's "GPUs not supported";
    status and unregister behave as for an empty registry (never 404 / UNIMPLEMENTED)."""
    if SharedMemoryManager().cuda_available():
        pytest.skip("this machine can open CUDA IPC handles")
    assert (
        client.get_cuda_shared_memory_status()
        if proto == "http"
        else list(client.get_cuda_shared_memory_status().regions)
    ) == []
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("c0")
    with pytest.raises(InferenceServerException) as info:
        client.register_cuda_shared_memory("c0", b"A" * 88, 0, 64)
    assert info.value.status() == STATUS["INVALID_ARG"][0 if proto == "http" else 1]
    assert info.value.message().startswith(
        "failed to register CUDA shared memory region: 'c0', GPUs not supported ("
    )


def test_client_shm_disabled_by_default(repository: ModelRepositoryBuilder) -> None:
    """Without ``--allow-client-shm`` (tritonserver's default is false): register and
    unregister answer 501 / UNIMPLEMENTED with Triton's message, status answers (empty)."""
    settings = loopback_settings(repository.root, allow_metrics=False)
    assert settings.allow_client_shm is False
    message = (
        "Client shared memory is disabled. Start the server with '--allow-client-shm=true' "
        "to enable."
    )
    pm = make_plugin_manager(autoload=False, extra=[identity])
    with ServerThread(Server(settings, plugin_manager=pm)) as srv:
        h = httpclient.InferenceServerClient(srv.http_url)
        g = grpcclient.InferenceServerClient(srv.grpc_url)
        try:
            for proto, c in (("http", h), ("grpc", g)):
                assert status_rows(c, proto) == []
                for call in (
                    lambda c=c: c.register_system_shared_memory("d", "/tritonx-test-d", 8),
                    lambda c=c: c.unregister_system_shared_memory("d"),
                    lambda c=c: c.unregister_system_shared_memory(),
                    lambda c=c: c.register_cuda_shared_memory("d", b"A" * 88, 0, 8),
                    lambda c=c: c.unregister_cuda_shared_memory(),
                ):
                    expect_error(proto, "UNSUPPORTED", message, call)
                inp = module_of(proto).InferInput("INPUT0", [4], "FP32")
                inp.set_shared_memory("d", 16)
                expect_error(
                    proto,
                    "NOT_FOUND",
                    "Unable to find shared memory region: 'd'",
                    lambda c=c, inp=inp: c.infer("id_fp32", [inp]),
                )
        finally:
            h.close()
            g.close()


def test_shared_memory_is_a_restricted_category(repository: ModelRepositoryBuilder) -> None:
    """``--http-restricted-api`` / ``--grpc-restricted-protocol`` ``shared-memory`` guard
    every register/unregister/status endpoint (inference is another category)."""
    rule = {"shared-memory": ("shm-key", "shm-value")}
    settings = loopback_settings(
        repository.root,
        allow_metrics=False,
        allow_client_shm=True,
        http_restricted_api=rule,
        grpc_restricted_protocol=rule,
    )
    regions = Regions()
    regions.create("x", 16)
    pm = make_plugin_manager(autoload=False, extra=[identity])
    http_ok = {"shm-key": "shm-value"}
    grpc_ok = {"triton-grpc-protocol-shm-key": "shm-value"}
    try:
        with ServerThread(Server(settings, plugin_manager=pm)) as srv:
            h = httpclient.InferenceServerClient(srv.http_url)
            g = grpcclient.InferenceServerClient(srv.grpc_url)
            try:
                calls: list[tuple[str, Any, Callable[..., Any]]] = []
                for proto, c in (("http", h), ("grpc", g)):
                    calls += [
                        (proto, c, lambda c, **kw: c.get_system_shared_memory_status(**kw)),
                        (proto, c, lambda c, **kw: c.get_cuda_shared_memory_status(**kw)),
                        (proto, c, lambda c, **kw: c.unregister_system_shared_memory(**kw)),
                        (proto, c, lambda c, **kw: c.unregister_cuda_shared_memory(**kw)),
                        (
                            proto,
                            c,
                            lambda c, **kw: c.register_system_shared_memory(
                                "x", regions.key("x"), 16, **kw
                            ),
                        ),
                    ]
                for proto, c, call in calls:
                    with pytest.raises(InferenceServerException) as info:
                        call(c)
                    if proto == "http":
                        assert info.value.status() == "403"
                        assert info.value.message() == (
                            "This API is restricted, expecting header 'shm-key'"
                        )
                    else:
                        assert info.value.status() == "StatusCode.UNAVAILABLE"
                        assert info.value.message() == (
                            "This protocol is restricted, expecting header "
                            "'triton-grpc-protocol-shm-key'"
                        )
                h.register_system_shared_memory("x", regions.key("x"), 16, headers=http_ok)
                assert (
                    g.get_system_shared_memory_status(headers=grpc_ok).regions["x"].byte_size == 16
                )
                inp = httpclient.InferInput("INPUT0", [4], "FP32")
                inp.set_shared_memory("x", 16)
                assert h.infer("id_fp32", [inp]).as_numpy("OUTPUT0").shape == (4,)
                g.unregister_system_shared_memory(headers=grpc_ok)
                assert h.get_system_shared_memory_status(headers=http_ok) == []
            finally:
                h.close()
                g.close()
    finally:
        regions.destroy()


# ---------------------------------------------------------------------------------- in flight


async def _wait_started(model: str, count: int) -> None:
    for _ in range(400):
        if len(IdentityBackend.batches[model]) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{model} did not start executing")


@pytest.mark.parametrize("aio", [aiohttpclient, aiogrpcclient], ids=["http", "grpc"])
async def test_unregister_while_requests_use_the_regions(
    triton: Server, regions: Regions, aio: Any
) -> None:
    """Triton's ``TestSharedMemoryUnregister``: unregistering regions a request is using
    succeeds; they stay listed (and usable: a second request starts) until the last request
    using them finishes, then they are gone without another call. Both requests complete
    and write their outputs."""
    is_http = aio is aiohttpclient
    mod = httpclient if is_http else grpcclient
    data = np.arange(16, dtype=np.int32)
    src = regions.create("fin", data.nbytes)
    dst = regions.create("fout", data.nbytes)
    shm.set_shared_memory_region(src, [data])
    first = aio.InferenceServerClient(triton.http_url if is_http else triton.grpc_url)
    second = aio.InferenceServerClient(triton.http_url if is_http else triton.grpc_url)
    admin = aiohttpclient.InferenceServerClient(triton.http_url)

    async def listed() -> list[str]:
        return [r["name"] for r in await admin.get_system_shared_memory_status()]

    try:
        await admin.register_system_shared_memory("fin", regions.key("fin"), data.nbytes)
        await admin.register_system_shared_memory("fout", regions.key("fout"), data.nbytes)
        inp = mod.InferInput("INPUT0", [16], "INT32")
        inp.set_shared_memory("fin", data.nbytes)
        out = mod.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("fout", data.nbytes)
        before = len(IdentityBackend.batches["slow"])
        one = asyncio.create_task(first.infer("slow", [inp], outputs=[out]))
        await _wait_started("slow", before + 1)

        await admin.unregister_system_shared_memory()  # no error
        assert await listed() == ["fin", "fout"]
        two = asyncio.create_task(second.infer("slow", [inp], outputs=[out]))
        await _wait_started("slow", before + 2)

        result = await one
        meta = result.get_output("OUTPUT0")
        assert list(meta["shape"] if is_http else meta.shape) == [16]
        assert await listed() == ["fin", "fout"]  # the second request still uses them
        await two
        assert await listed() == []
        for name in ("fin", "fout"):
            with pytest.raises(InferenceServerException, match="Unable to find system shared"):
                await admin.get_system_shared_memory_status(name)
        assert shm.get_contents_as_numpy(dst, np.int32, [16]).tolist() == data.tolist()
        # the names are free again
        await admin.register_system_shared_memory("fin", regions.key("fin"), data.nbytes)
    finally:
        await admin.unregister_system_shared_memory()
        await admin.close()
        await first.close()
        await second.close()


@pytest.mark.parametrize("aio", [aiohttpclient, aiogrpcclient], ids=["http", "grpc"])
async def test_inputs_are_read_only_views_on_the_region(
    triton: Server, regions: Regions, aio: Any
) -> None:
    """No copy: a model reading its input twice sees the client's write in between; and it
    cannot write into the client's memory (the array is read-only)."""
    is_http = aio is aiohttpclient
    mod = httpclient if is_http else grpcclient
    handle = regions.create("view", 16)
    shm.set_shared_memory_region(handle, [np.full(4, 1.0, np.float32)])
    c = aio.InferenceServerClient(triton.http_url if is_http else triton.grpc_url)
    ViewProbe.started.clear()
    ViewProbe.proceed.clear()
    try:
        await c.register_system_shared_memory("view", regions.key("view"), 16)
        inp = mod.InferInput("INPUT0", [4], "FP32")
        inp.set_shared_memory("view", 16)
        call = asyncio.create_task(c.infer("probe", [inp]))
        assert await asyncio.to_thread(ViewProbe.started.wait, 30)
        shm.set_shared_memory_region(handle, [np.full(4, 7.0, np.float32)])
        ViewProbe.proceed.set()
        result = await call
        assert result.as_numpy("OUTPUT0").tolist() == [1.0, 7.0]
        params = result.get_response()["parameters"] if is_http else None
        writeable = (
            params["writeable"]
            if params is not None
            else result.get_response().parameters["writeable"].bool_param
        )
        assert writeable is False
    finally:
        ViewProbe.proceed.set()
        await c.unregister_system_shared_memory()
        await c.close()


async def test_failed_requests_release_their_regions(triton: Server, regions: Regions) -> None:
    """A request refused after leasing regions (a later input is bad) holds nothing: the
    regions unregister at once."""
    regions.create("lease", 16)
    c = aiohttpclient.InferenceServerClient(triton.http_url)
    try:
        await c.register_system_shared_memory("lease", regions.key("lease"), 16)
        good = httpclient.InferInput("INPUT0", [4], "FP32")
        good.set_shared_memory("lease", 16)
        out = httpclient.InferRequestedOutput("OUTPUT0")
        out.set_shared_memory("missing", 16)
        with pytest.raises(InferenceServerException, match="Unable to find shared memory"):
            await c.infer("id_fp32", [good], outputs=[out])
        small = httpclient.InferRequestedOutput("OUTPUT0")
        small.set_shared_memory("lease", 8)
        with pytest.raises(InferenceServerException, match="should be at least 16 bytes"):
            await c.infer("id_fp32", [good], outputs=[small])
        await c.unregister_system_shared_memory("lease")
        assert await c.get_system_shared_memory_status() == []
    finally:
        await c.close()


# ---------------------------------------------------------------------------------- GPU


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.gpu
def test_cuda_shared_memory_round_trip(repository: ModelRepositoryBuilder, proto: str) -> None:
    """On a GPU: CUDA IPC regions registered by the client feed ``simple``'s inputs and
    receive its outputs (device -> host -> model -> host -> device), the sequence of
    tritonclient's ``simple_{http,grpc}_cudashm_client.py``. The server runs in its own
    process: CUDA refuses to open an IPC handle in the process that created it."""
    cudashm = pytest.importorskip("tritonclient.utils.cuda_shared_memory")
    pytest.importorskip("tritonx_backend_onnx")
    mod = module_of(proto)
    http_port, grpc_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tritonx",
            "serve",
            "--model-repository",
            str(repository.root),
            "--allow-client-shm=true",
            "--exit-on-error=false",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            f"--http-port={http_port}",
            f"--grpc-port={grpc_port}",
            "--allow-metrics=false",
        ]
    )
    regions: list[Any] = []
    c: Any = None
    try:
        ready = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        for _ in range(600):
            try:
                if ready.is_model_ready("simple"):
                    break
            except Exception:
                pass
            assert proc.poll() is None, "tritonx serve exited"
            time.sleep(0.1)
        ready.close()
        c = mod.InferenceServerClient(
            f"127.0.0.1:{http_port}" if proto == "http" else f"127.0.0.1:{grpc_port}"
        )
        input0 = np.arange(16, dtype=np.int32)
        input1 = np.ones(16, dtype=np.int32)
        size = input0.nbytes
        names = ("input0_data", "input1_data", "output0_data", "output1_data")
        for name in names:
            regions.append(cudashm.create_shared_memory_region(name, size, 0))
        cudashm.set_shared_memory_region(regions[0], [input0])
        cudashm.set_shared_memory_region(regions[1], [input1])
        for name, handle in zip(names, regions, strict=True):
            c.register_cuda_shared_memory(name, cudashm.get_raw_handle(handle), 0, size)
        status = c.get_cuda_shared_memory_status()
        rows = (
            status
            if proto == "http"
            else [
                {"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size}
                for _, r in sorted(status.regions.items())
            ]
        )
        assert rows == [{"name": n, "device_id": 0, "byte_size": size} for n in sorted(names)]
        inputs = [mod.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_shared_memory("input0_data", size)
        inputs[1].set_shared_memory("input1_data", size)
        outputs = [mod.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
        outputs[0].set_shared_memory("output0_data", size)
        outputs[1].set_shared_memory("output1_data", size)
        c.infer("simple", inputs, outputs=outputs)
        out0 = cudashm.get_contents_as_numpy(regions[2], np.int32, [1, 16])
        out1 = cudashm.get_contents_as_numpy(regions[3], np.int32, [1, 16])
        assert out0[0].tolist() == (input0 + input1).tolist()
        assert out1[0].tolist() == (input0 - input1).tolist()
        raw = cudashm.get_raw_handle(regions[0])
        expect_error(
            proto,
            "ALREADY_EXISTS",
            "shared memory region 'input0_data' already in manager",
            lambda: c.register_cuda_shared_memory("input0_data", raw, 0, size),
        )
        expect_error(
            proto,
            "INVALID_ARG",
            "failed to register shared memory region 'big': invalid args",
            lambda: c.register_cuda_shared_memory("big", raw, 0, 1 << 40),
        )
        expect_error(
            proto,
            "NOT_FOUND",
            "The region named 'input0_data' is registered as CUDA shared memory, not system "
            "shared memory",
            lambda: c.get_system_shared_memory_status("input0_data"),
        )
        c.unregister_cuda_shared_memory()
        assert (
            c.get_cuda_shared_memory_status()
            if proto == "http"
            else list(c.get_cuda_shared_memory_status().regions)
        ) == []
    finally:
        if c is not None:
            c.close()
        for handle in regions:
            cudashm.destroy_shared_memory_region(handle)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
