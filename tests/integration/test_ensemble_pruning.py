"""Ensembles compute only what is asked (Triton's pruning in ``EnsembleContext``), pass the
sequence parameters (correlation id, start/end flags) through their steps as Triton does, and
log Triton's line for a mapped tensor a composing model did not produce."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx._runtime.plugins import make_plugin_manager
from tritonx.testing import ModelRepositoryBuilder, loopback_settings
from tritonx.types import SEQUENCE_END, SEQUENCE_START

NO_LISTENERS = {"allow_http": False, "allow_grpc": False, "allow_metrics": False}


class RecordBackend(tritonx.Backend):
    """``OUT = sum of the inputs given + value``; every request is recorded as ``(model,
    correlation id, flags, input names)``. Parameters: ``value``, ``response_parameters``
    (JSON: the parameters of every response), ``skip`` (an output it never produces)."""

    name = "record"
    seen: ClassVar[list[tuple[str, int | str, int, tuple[str, ...]]]] = []
    lock = threading.Lock()

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        return RecordInstance(ctx)

    @classmethod
    def of(cls, model: str) -> list[tuple[int | str, int, tuple[str, ...]]]:
        with cls.lock:
            return [(c, f, i) for m, c, f, i in cls.seen if m == model]


class RecordInstance(tritonx.ModelInstance):
    def __init__(self, ctx: tritonx.LoadContext) -> None:
        p = ctx.parameters
        self.model = ctx.model_name
        self.value = float(p.get("value", "0"))
        self.parameters = json.loads(p.get("response_parameters", "{}"))
        self.skip = p.get("skip", "")
        self.outputs = [t.name for t in ctx.config.outputs]

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        out: list[InferenceResponse] = []
        for r in requests:
            with RecordBackend.lock:
                RecordBackend.seen.append(
                    (self.model, r.correlation_id, r.flags, tuple(sorted(r.inputs)))
                )
            arrays = list(r.inputs.values())
            y = sum(arrays[1:], arrays[0]) + self.value
            outputs = {name: y for name in self.outputs if name != self.skip}
            out.append(InferenceResponse(outputs=outputs, parameters=dict(self.parameters)))
        return out


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(RecordBackend)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RecordBackend.seen.clear()


def make_server(root: Path, **overrides: Any) -> Server:
    pm = make_plugin_manager(autoload=False, extra=[Plugin()])
    return Server(loopback_settings(root, **overrides), plugin_manager=pm)


def model(
    repo: ModelRepositoryBuilder,
    name: str,
    *,
    inputs: Sequence[str] = ("IN",),
    outputs: Sequence[str] = ("OUT",),
    value: float = 0,
    params: Mapping[str, str] | None = None,
    optional: Sequence[str] = (),
) -> None:
    parameters = {"value": str(value), **(params or {})}
    ins = ", ".join(
        f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ]'
        + (" optional: true" if n in optional else "")
        + " }"
        for n in inputs
    )
    outs = ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ] }}' for n in outputs)
    params_text = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: {json.dumps(v)} }} }}\n'
        for k, v in parameters.items()
    )
    repo.add(
        name,
        config=(
            f'name: "{name}"\nbackend: "record"\nmax_batch_size: 8\n'
            f"input [ {ins} ]\noutput [ {outs} ]\n{params_text}"
        ),
    )


def step(name: str, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> str:
    ins = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    outs = " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{name}" model_version: -1 {ins} {outs} }}'


def ensemble(
    repo: ModelRepositoryBuilder,
    name: str,
    steps: Sequence[str],
    inputs: Sequence[str],
    outputs: Sequence[str],
    optional: Sequence[str] = (),
) -> None:
    ins = ", ".join(
        f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ]'
        + (" optional: true" if n in optional else "")
        + " }"
        for n in inputs
    )
    outs = ", ".join(f'{{ name: "{n}" data_type: TYPE_FP32 dims: [ 4 ] }}' for n in outputs)
    repo.add(
        name,
        config=(
            f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 8\n'
            f"input [ {ins} ]\noutput [ {outs} ]\n"
            f"ensemble_scheduling {{ step [ {', '.join(steps)} ] }}\n"
        ),
    )


X = np.arange(8, dtype=np.float32).reshape(2, 4)


def branches(repo: ModelRepositoryBuilder) -> None:
    """Two branches: ``A = IN + 1`` then ``A2 = A + 10``, and ``B = IN + EXTRA`` where the
    ensemble input ``EXTRA`` is optional but ``plus`` requires it."""
    model(repo, "one", value=1)
    model(repo, "ten", value=10)
    model(repo, "plus", inputs=("X", "Y"))
    ensemble(
        repo,
        "branches",
        [
            step("one", {"IN": "IN"}, {"OUT": "A"}),
            step("ten", {"IN": "A"}, {"OUT": "A2"}),
            step("plus", {"X": "IN", "Y": "EXTRA"}, {"OUT": "B"}),
        ],
        inputs=("IN", "EXTRA"),
        outputs=("A", "A2", "B"),
        optional=("EXTRA",),
    )


def _count(stats: dict[str, Any], name: str) -> int:
    (entry,) = [s for s in stats["model_stats"] if s["name"] == name]
    inference = entry["inference_stats"]
    return int(inference["success"].get("count", 0)) + int(inference["fail"].get("count", 0))


async def test_steps_whose_outputs_are_not_requested_do_not_run(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    branches(repo)
    async with make_server(repo.root) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            tensor = grpcclient.InferInput("IN", list(X.shape), "FP32")
            tensor.set_data_from_numpy(X)
            # EXTRA left out: the step that needs it is pruned when B is not asked for
            result = await client.infer(
                "branches", [tensor], outputs=[grpcclient.InferRequestedOutput("A")]
            )
            np.testing.assert_array_equal(result.as_numpy("A"), X + 1)
            assert [o.name for o in result.get_response().outputs] == ["A"]
            result = await client.infer(
                "branches", [tensor], outputs=[grpcclient.InferRequestedOutput("A2")]
            )
            np.testing.assert_array_equal(result.as_numpy("A2"), X + 11)
            stats = await client.get_inference_statistics(as_json=True)
        finally:
            await client.close()
    assert [i for _, _, i in RecordBackend.of("one")] == [("IN",), ("IN",)]
    assert len(RecordBackend.of("ten")) == 1, "A alone does not need 'ten'"
    assert RecordBackend.of("plus") == [], "B was never asked for"
    assert _count(stats, "plus") == 0 and _count(stats, "ten") == 1 and _count(stats, "one") == 2
    assert _count(stats, "branches") == 2


async def test_every_output_runs_every_step_over_http(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    branches(repo)
    async with make_server(repo.root) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            inputs = []
            for name, value in (("IN", X), ("EXTRA", X * 2)):
                tensor = httpclient.InferInput(name, list(X.shape), "FP32")
                tensor.set_data_from_numpy(value)
                inputs.append(tensor)
            result = await client.infer("branches", inputs)
        finally:
            await client.close()
    np.testing.assert_array_equal(result.as_numpy("A"), X + 1)
    np.testing.assert_array_equal(result.as_numpy("A2"), X + 11)
    np.testing.assert_array_equal(result.as_numpy("B"), X * 3)
    assert len(RecordBackend.of("plus")) == 1
    # Triton: an output a step wrote brings the step's sequence parameters to the response
    assert result.get_response()["parameters"] == {
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
    }


def sequence_chain(repo: ModelRepositoryBuilder, first_parameters: dict[str, Any]) -> None:
    """``first`` (answering with ``first_parameters``) → ``second`` → OUT; ``third`` reads
    IN and the first step's output."""
    model(repo, "first", value=1, params={"response_parameters": json.dumps(first_parameters)})
    model(repo, "second", value=2)
    model(repo, "third", inputs=("X", "Y"))
    ensemble(
        repo,
        "seq",
        [
            step("first", {"IN": "IN"}, {"OUT": "a"}),
            step("second", {"IN": "a"}, {"OUT": "OUT"}),
            step("third", {"X": "b", "Y": "a"}, {"OUT": "JOIN"}),
            step("second", {"IN": "IN"}, {"OUT": "b"}),
        ],
        inputs=("IN",),
        outputs=("OUT", "JOIN"),
    )


async def test_sequence_flags_reach_the_steps_and_the_response_over_grpc(tmp_path: Path) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    sequence_chain(repo, {})
    async with make_server(repo.root) as server:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            tensor = grpcclient.InferInput("IN", list(X.shape), "FP32")
            tensor.set_data_from_numpy(X)
            result = await client.infer(
                "seq",
                [tensor],
                sequence_id=42,
                sequence_start=True,
                outputs=[grpcclient.InferRequestedOutput("OUT")],
            )
        finally:
            await client.close()
    np.testing.assert_array_equal(result.as_numpy("OUT"), X + 3)
    assert RecordBackend.of("first") == [(42, SEQUENCE_START, ("IN",))]
    assert RecordBackend.of("second") == [(42, SEQUENCE_START, ("IN",))]
    assert RecordBackend.of("third") == [], "JOIN was not asked for"
    params = result.get_response().parameters
    assert params["sequence_id"].int64_param == 42
    assert params["sequence_start"].bool_param is True
    assert params["sequence_end"].bool_param is False


async def test_a_steps_response_parameters_override_the_sequence_downstream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    sequence_chain(repo, {"sequence_id": 7, "sequence_end": True})
    caplog.set_level(logging.ERROR, logger="tritonx.ensemble")
    async with make_server(repo.root, **NO_LISTENERS) as server:
        response = await server.infer(
            InferenceRequest("seq", {"IN": X}, id="r9", correlation_id=42, flags=SEQUENCE_START)
        )
    np.testing.assert_array_equal(response.outputs["OUT"], X + 3)
    np.testing.assert_array_equal(response.outputs["JOIN"], (X + 2) + (X + 1))
    assert RecordBackend.of("first") == [(42, SEQUENCE_START, ("IN",))]
    # 'second' runs twice: after 'first' with its parameters (flags: only what it set), and
    # on IN with the request's
    assert sorted(RecordBackend.of("second"), key=str) == sorted(
        [(7, SEQUENCE_END, ("IN",)), (42, SEQUENCE_START, ("IN",))], key=str
    )
    # 'third' reads two tensors whose parameters differ: those of one of its inputs are
    # used (Triton walks an unordered map), with Triton's error line naming them
    ((cid, flags, names),) = RecordBackend.of("third")
    assert (cid, flags) in ((42, SEQUENCE_START), (7, SEQUENCE_END)) and names == ("X", "Y")
    lines = [r.getMessage() for r in caplog.records if r.name == "tritonx.ensemble"]
    assert lines == [
        "[request id: r9] Different set of response parameters are set for 'third'. "
        f"Parameter correlation ID {cid}, flags {flags} is used."
    ]
    # the response's parameters come from the outputs' (OUT: 7/end; JOIN: third's)
    assert response.parameters["sequence_id"] in (7, 42)


async def test_a_wrongly_typed_sequence_parameter_fails_with_tritons_message(
    tmp_path: Path,
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    sequence_chain(repo, {"sequence_start": "yes"})
    async with make_server(repo.root, **NO_LISTENERS) as server:
        with pytest.raises(tritonx.TritonXError) as err:
            await server.infer(InferenceRequest("seq", {"IN": X}, requested_outputs=("OUT",)))
    assert err.value.message == (
        "in ensemble 'seq', expect parameter 'sequence_start' to be TRITONSERVER_PARAMETER_BOOL"
    )
    assert RecordBackend.of("second") == []


async def test_a_mapped_output_not_produced_is_absent_with_tritons_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    model(repo, "partial", outputs=("P", "Q"), value=1, params={"skip": "Q"})
    ensemble(
        repo,
        "gaps",
        [step("partial", {"IN": "IN"}, {"P": "P", "Q": "Q"})],
        inputs=("IN",),
        outputs=("P", "Q"),
    )
    caplog.set_level(logging.DEBUG, logger="tritonx.ensemble")
    async with make_server(repo.root) as server:
        client = httpclient.InferenceServerClient(server.http_url)
        try:
            tensor = httpclient.InferInput("IN", list(X.shape), "FP32")
            tensor.set_data_from_numpy(X)
            result = await client.infer("gaps", [tensor])
        finally:
            await client.close()
    assert [o["name"] for o in result.get_response()["outputs"]] == ["P"]
    np.testing.assert_array_equal(result.as_numpy("P"), X + 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "tritonx.ensemble"]
    assert "Composing models did not output tensor Q" in lines
