"""BLS calls from a Python model (``backend: "python"``) traced as children of the request
that makes them: ``pb_utils.InferenceRequest(..., trace=request.trace())`` gives the call its
own trace with ``parent_id`` = the caller's trace id (Triton's python_backend semantics), in
worker-process and in-process mode, through ``exec()`` and ``async_exec()``; a BLS request
given no trace is not traced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http.aio as httpclient

from tritonx import Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, loopback_settings

pytest.importorskip("onnxruntime")
from tests.integration.test_trace import HTTP_ORDER, INNER_ORDER, assert_in_order, read_traces
from tritonx_backend_onnx.models import add_sub

MODEL_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def call(request, a, traced):
    kwargs = {"trace": request.trace()} if traced else {}
    return pb_utils.InferenceRequest(
        model_name="addsub",
        inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", a)],
        requested_output_names=["OUTPUT0"],
        **kwargs,
    )


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            mode = json.loads(request.parameters()).get("mode", "sync")
            if mode == "sync":
                response = call(request, a, True).exec()
            elif mode == "async":
                response = await call(request, a, True).async_exec()
            else:  # no trace given: the call is not traced
                response = call(request, a, False).exec()
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
"""


def add_models(repo: ModelRepositoryBuilder, mode: str) -> None:
    io4 = [("INPUT0", "FP32", [4]), ("INPUT1", "FP32", [4])]
    repo.add(
        "addsub",
        backend="onnxruntime",
        max_batch_size=8,
        inputs=io4,
        outputs=[("OUTPUT0", "FP32", [4]), ("OUTPUT1", "FP32", [4])],
        versions={1: {"model.onnx": add_sub()}},
    )
    repo.add(
        "pybls",
        backend="python",
        inputs=[("INPUT0", "FP32", [1, 4])],
        outputs=[("OUTPUT0", "FP32", [1, 4])],
        parameters={"TRITONX_EXECUTION_MODE": mode},
        versions={1: {"model.py": MODEL_PY}},
    )


@pytest.mark.parametrize("mode", ["process", "in_process"])
async def test_python_bls_calls_get_child_traces(
    model_repository: ModelRepositoryBuilder, tmp_path: Path, mode: str
) -> None:
    add_models(model_repository, mode)
    file = tmp_path / "trace.json"
    server = Server(
        loopback_settings(
            model_repository.root, trace_level=("TIMESTAMPS",), trace_rate=1, trace_file=str(file)
        ),
        plugin_manager=make_plugin_manager(autoload=True, only=["backend_onnx", "backend_python"]),
    )
    await server.start()
    try:
        http = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(4, dtype=np.float32).reshape(1, 4)
        for request_mode in ("sync", "async", "untraced"):
            inp = httpclient.InferInput("INPUT0", [1, 4], "FP32")
            inp.set_data_from_numpy(data)
            result = await http.infer(
                "pybls", [inp], request_id=request_mode, parameters={"mode": request_mode}
            )
            assert result.as_numpy("OUTPUT0").tolist() == (data * 2).tolist()
        await http.close()
    finally:
        await server.stop()
    traces = read_traces(file)
    parents = {
        t["header"]["request_id"]: t
        for t in traces.values()
        if t["header"]["model_name"] == "pybls"
    }
    assert sorted(parents) == ["async", "sync", "untraced"]
    children: dict[str, list[Any]] = {name: [] for name in parents}
    for trace in traces.values():
        parent_id = trace["header"].get("parent_id")
        if parent_id is None:
            continue
        (name,) = [n for n, p in parents.items() if p["header"]["id"] == parent_id]
        children[name].append(trace)
    assert [len(children[n]) for n in ("sync", "async", "untraced")] == [1, 1, 0]
    for name in ("sync", "async"):
        parent, (child,) = parents[name], children[name]
        assert "parent_id" not in parent["header"]
        assert_in_order(parent, HTTP_ORDER)
        assert child["header"]["model_name"] == "addsub"
        assert_in_order(child, INNER_ORDER)
        stamp = dict(zip(parent["names"], parent["ns"], strict=True))
        # the call was made during the parent's execution
        assert stamp["COMPUTE_START"] <= child["ns"][0] and child["ns"][-1] <= stamp["COMPUTE_END"]
    # the untraced call left no trace of its own: every trace is a pybls request or a child
    assert len(traces) == 3 + 2
