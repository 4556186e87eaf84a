"""Config validation messages, word for word as Triton's ``model_config_utils.cc`` (the
cases of server ``qa/L0_model_config/noautofill_platform`` and ``special_cases``, with
configs written here), seen through tritonclient as the UNAVAILABLE reason in the repository
index; the order of Triton's checks (config before versions, strict IO checks before the
backend); the ``runtime`` field; ``batch_input`` / ``batch_output`` (validated, then refused:
tritonx does not run them); a bad load config override answered as Triton's poll failure;
tritonserver's ``--strict-model-config`` warnings.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonx._runtime.plugins import make_plugin_manager
from tritonx.server import Server
from tritonx.testing import ServerThread, identity, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder

IO = """
input [ { name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]
"""

SEQ_IO = IO + "max_batch_size: 4\n"


def io(in_extra: str = "", out_extra: str = "", dims: str = "4", out_dims: str = "4") -> str:
    return (
        f'input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ {dims} ] {in_extra} }} ]\n'
        f'output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ {out_dims} ] {out_extra} }} ]\n'
    )


def batch_input(kind: str, sources: str, datatype: str = "TYPE_FP32") -> str:
    return (
        f'max_batch_size: 4\nbatch_input [ {{ kind: {kind} target_name: "B" data_type: {datatype} '
        f"source_input: [ {sources} ] }} ]\n"
    )


#: (model name, config body without name/backend, the reason Triton gives)
CASES: list[tuple[str, str, str]] = [
    # ValidateBatchIO (through ValidateModelIOConfig: " for <model>")
    (
        "bi_less_source",
        IO + batch_input("BATCH_ELEMENT_COUNT", ""),
        "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for bi_less_source",
    ),
    (
        "bi_many_source",
        IO + batch_input("BATCH_ACCUMULATED_ELEMENT_COUNT", '"INPUT0", "INPUT0"'),
        "batch input kind 'BATCH_ACCUMULATED_ELEMENT_COUNT' expects 1 source input, got 2",
    ),
    (
        "bi_max_shape_less",
        IO + batch_input("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", ""),
        "batch input kind 'BATCH_MAX_ELEMENT_COUNT_AS_SHAPE' expects 1 source input, got 0",
    ),
    (
        "bi_datatype",
        IO + batch_input("BATCH_ELEMENT_COUNT", '"INPUT0"', "TYPE_INT64"),
        "batch input data type must be TYPE_INT32 or TYPE_FP32 for bi_datatype",
    ),
    (
        "bi_unknown_source",
        IO + batch_input("BATCH_ITEM_SHAPE", '"UNKNOWN_INPUT"'),
        "unknown source input name 'UNKNOWN_INPUT' for bi_unknown_source",
    ),
    (
        "bo_less_source",
        IO + "max_batch_size: 4\nbatch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE "
        'target_name: "OUTPUT0" } ]\n',
        "batch output kind 'BATCH_SCATTER_WITH_INPUT_SHAPE' expects 1 source input, got 0",
    ),
    (
        "bo_unknown_source",
        IO + "max_batch_size: 4\nbatch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE "
        'target_name: "OUTPUT0" source_input: "UNKNOWN_INPUT" } ]\n',
        "unknown source input name 'UNKNOWN_INPUT' for bo_unknown_source",
    ),
    (
        "bo_unknown_target",
        IO + "max_batch_size: 4\nbatch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE "
        'target_name: "UNKNOWN_OUTPUT" source_input: "INPUT0" } ]\n',
        "unknown target output name 'UNKNOWN_OUTPUT' for bo_unknown_target",
    ),
    (
        "bo_duplicated_target",
        IO + "max_batch_size: 4\nbatch_output [ { kind: BATCH_SCATTER_WITH_INPUT_SHAPE "
        'target_name: [ "OUTPUT0", "OUTPUT0" ] source_input: "INPUT0" } ]\n',
        "target output name 'OUTPUT0' can only be specified once for bo_duplicated_target",
    ),
    # ValidateModelConfig
    (
        "negative_max_batch_size",
        IO + "max_batch_size: -1\n",
        "'max_batch_size' must be non-negative value for negative_max_batch_size",
    ),
    (
        "ensemble_scheduling_set",
        IO + 'ensemble_scheduling { step [ { model_name: "m" model_version: -1 '
        'input_map { key: "a" value: "INPUT0" } output_map { key: "b" value: "OUTPUT0" } } ] }\n',
        "ensemble scheduling cannot be set for model 'ensemble_scheduling_set' whose platform "
        "is not ensemble",
    ),
    (
        "default_priority_level0",
        SEQ_IO + "dynamic_batching { priority_levels: 3 }\n",
        "default priority level must be in range [1, 3] for default_priority_level0",
    ),
    (
        "priority_level0",
        SEQ_IO + "dynamic_batching { priority_levels: 3 default_priority_level: 1 "
        "priority_queue_policy { key: 4 value: { } } }\n",
        "priority queue policy must have priority level in range [1, 3] for priority_level0",
    ),
    (
        "preserve_ordering0",
        SEQ_IO + "dynamic_batching { preserve_ordering: true priority_levels: 2 "
        "default_priority_level: 1 }\n",
        "Only one priority level is allowed when 'preserve_ordering' is true for "
        "preserve_ordering0",
    ),
    (
        "preserve_ordering1",
        SEQ_IO + "dynamic_batching { preserve_ordering: true default_queue_policy { "
        "timeout_action: DELAY default_timeout_microseconds: 100 } }\n",
        "Queue policy can not have DELAY as timeout action when 'preserve_ordering' is true "
        "for preserve_ordering1",
    ),
    (
        "control_kind_start_multiple",
        SEQ_IO + "sequence_batching { control_input [ "
        '{ name: "S1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },'
        '{ name: "S2" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] } ] }\n',
        "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for "
        "control_kind_start_multiple",
    ),
    (
        "control_tensor_multiple",
        SEQ_IO + "sequence_batching { control_input [ "
        '{ name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } ] },'
        '{ name: "START" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] } ] } ] }\n',
        "sequence batching control tensor 'START' is specified for multiple control kinds for "
        "control_tensor_multiple",
    ),
    (
        "control_tensor_no_value",
        SEQ_IO + "sequence_batching { control_input [ "
        '{ name: "READY" control [ { kind: CONTROL_SEQUENCE_READY } ] } ] }\n',
        "sequence batching must specify either 'int32_false_true', 'fp32_false_true' or "
        "'bool_false_true' for CONTROL_SEQUENCE_READY for control_tensor_no_value",
    ),
    # ValidateModelIOConfig / ValidateIOShape
    (
        "missing_datatype",
        'input [ { name: "input", dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n',
        "model input 'input' must specify 'data_type' for missing_datatype",
    ),
    (
        "zerodims_input0",
        io(dims="0"),
        "model input 'INPUT0' dimension must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for zerodims_input0",
    ),
    (
        "zerodims_output0",
        io(out_dims="4, 0"),
        "model output 'OUTPUT0' dimension must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for zerodims_output0",
    ),
    (
        "reshape_elementcount0",
        io(in_extra="reshape: { shape: [ 2, 3 ] }"),
        "model input 'INPUT0' has different size for dims and reshape for reshape_elementcount0",
    ),
    (
        "reshape_elementcount2",
        io(out_extra="reshape: { shape: [ 5 ] }"),
        "model output 'OUTPUT0' has different size for dims and reshape for reshape_elementcount2",
    ),
    (
        "reshape_nobatch_empty0",
        io(dims="1", in_extra="reshape: { shape: [ ] }"),
        "model input 'INPUT0' cannot have empty reshape for non-batching model as scalar "
        "tensors are not supported for reshape_nobatch_empty0",
    ),
    (
        "reshape_variable0",
        io(dims="-1", in_extra="reshape: { shape: [ 2, 2 ] }"),
        "model input 'INPUT0' has different size for dims and reshape for reshape_variable0",
    ),
    (
        "reshape_variable_empty",
        "max_batch_size: 4\n" + io(dims="-1", in_extra="reshape: { shape: [ ] }"),
        "model input 'INPUT0' has different size for dims and reshape for reshape_variable_empty",
    ),
    (
        "reshape_variable2",
        io(dims="2, -1, 3", in_extra="reshape: { shape: [ 3, -1, 2 ] }"),
        "model input 'INPUT0' has different size for dims and reshape for reshape_variable2",
    ),
    (
        "reshape_variable4",
        io(dims="2, -1", in_extra="reshape: { shape: [ -1, 2, -1 ] }"),
        "model input 'INPUT0' has different number of variable-size dimensions for dims and "
        "reshape for reshape_variable4",
    ),
    (
        "reshape_zerodims1",
        io(out_extra="reshape: { shape: [ 0, 4 ] }"),
        "model output 'OUTPUT0' reshape dimensions must be integer >= 1, or -1 to indicate a "
        "variable-size dimension for reshape_zerodims1",
    ),
    (
        "nchw_dims",
        io(in_extra="format: FORMAT_NCHW"),
        "model input NHWC/NCHW require 3 dims for nchw_dims",
    ),
    (
        "shape_tensor",
        io(in_extra="is_shape_tensor: true"),
        "shape tensors are only supported for TensorRT platform for shape_tensor",
    ),
    # ValidateInstanceGroup
    (
        "invalid_cpu",
        IO + "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]\n",
        "instance group invalid_cpu_0 of model invalid_cpu has kind KIND_CPU but specifies one "
        "or more GPUs",
    ),
    (
        "invalid_gpu",
        IO + "instance_group [ { kind: KIND_GPU gpus: [ 42 ] } ]\n",
        "instance group invalid_gpu_0 of model invalid_gpu specifies invalid or unsupported gpu "
        "id 42. GPUs with at least the minimum required CUDA compute compatibility of 6.000000 "
        "are: ",
    ),
    # special cases: the runtime field (the backend library lookup)
    (
        "python_runtime",
        'backend: "python"\n' + IO + 'runtime: "model.py"\n',
        "unable to find Python backend based backend library 'model.py' for model 'python_runtime'",
    ),
    (
        "invalid_runtime",
        IO + 'runtime: "__invalid_runtime__"\n',
        "unable to find backend library '__invalid_runtime__' for model 'invalid_runtime'",
    ),
    (
        "runtime_escape",
        IO + 'runtime: "../dummy_runtime/libtriton_identity.so"\n',
        "backend library name '../dummy_runtime/libtriton_identity.so' escapes backend directory",
    ),
]


def build(repo: ModelRepositoryBuilder) -> None:
    for name, body, _ in CASES:
        backend = "" if body.startswith("backend:") else 'backend: "identity"\n'
        repo.add(name, config=f'name: "{name}"\n{backend}{body}')
    # the runtime that names the backend's own library is honoured
    repo.add(
        "own_runtime", config=f'name: "own_runtime"\nbackend: "identity"\n{IO}'
        'runtime: "libtriton_identity.so"\n'
    )  # fmt: skip
    # a Python-based backend's runtime: the backend plugin is its implementation
    repo.add(
        "pybased_runtime",
        config=f'name: "pybased_runtime"\nbackend: "identity"\n{IO}runtime: "model.py"\n',
    )
    # Triton's pair check: a typed backend with a platform that is not its own
    repo.add(
        "invalid_platform",
        config=f'name: "invalid_platform"\nplatform: "onnxruntim"\nbackend: "onnxruntime"\n{IO}',
    )
    # config errors come before the version policy (no version folder here)...
    repo.add(
        "bad_no_versions",
        config=f'name: "bad_no_versions"\nbackend: "identity"\nmax_batch_size: -2\n{IO}',
        versions=(),
    )
    # ... and the version policy before the backend
    repo.add(
        "good_no_versions", config=f'name: "good_no_versions"\nbackend: "zzz"\n{IO}', versions=()
    )
    repo.add("dirname", config=f'name: "other"\nbackend: "identity"\n{IO}')
    # strict IO checks run at poll time, before the backend is looked up; without
    # --disable-auto-complete-config the missing backend is found first
    repo.add(
        "strict_io",
        config='name: "strict_io"\nbackend: "zzz"\n'
        'input [ { name: "INPUT0", dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] } ]\n',
    )


def start(root: Path, **overrides: object) -> ServerThread:
    settings = loopback_settings(root, **{"allow_grpc": False, "allow_metrics": False, **overrides})
    pm = make_plugin_manager(autoload=False, extra=[identity])
    thread = ServerThread(Server(settings, plugin_manager=pm))
    thread.start()
    return thread


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> ModelRepositoryBuilder:
    repo = ModelRepositoryBuilder(tmp_path_factory.mktemp("validation") / "models")
    build(repo)
    return repo


def reasons(thread: ServerThread) -> dict[str, tuple[str, str]]:
    client = httpclient.InferenceServerClient(thread.server.http_url)
    try:
        return {
            m["name"]: (m.get("state", ""), m.get("reason", ""))
            for m in client.get_model_repository_index()
        }
    finally:
        client.close()


@pytest.fixture(scope="module")
def index(repository: ModelRepositoryBuilder) -> Iterator[dict[str, tuple[str, str]]]:
    thread = start(repository.root)
    try:
        yield reasons(thread)
    finally:
        thread.stop()


@pytest.fixture(scope="module")
def strict_index(repository: ModelRepositoryBuilder) -> Iterator[dict[str, tuple[str, str]]]:
    thread = start(repository.root, disable_auto_complete_config=True)
    try:
        yield reasons(thread)
    finally:
        thread.stop()


@pytest.mark.parametrize(
    ("name", "expected"), [(n, e) for n, _, e in CASES], ids=[c[0] for c in CASES]
)
def test_message(index: dict[str, tuple[str, str]], name: str, expected: str) -> None:
    state, reason = index[name]
    assert state == "UNAVAILABLE"
    assert expected in reason, reason


@pytest.mark.parametrize(
    ("name", "expected"), [(n, e) for n, _, e in CASES], ids=[c[0] for c in CASES]
)
def test_message_without_auto_complete(
    strict_index: dict[str, tuple[str, str]], name: str, expected: str
) -> None:
    state, reason = strict_index[name]
    assert state == "UNAVAILABLE" and expected in reason, reason


def test_runtime_naming_the_backends_own_library_is_honoured(
    index: dict[str, tuple[str, str]],
) -> None:
    assert index["own_runtime"][0] == "READY"
    assert index["pybased_runtime"][0] == "READY"


def test_order_of_checks(
    index: dict[str, tuple[str, str]], strict_index: dict[str, tuple[str, str]]
) -> None:
    assert index["invalid_platform"][1] == (
        "unexpected 'platform' and 'backend' pair, got:onnxruntim, onnxruntime"
    )
    assert index["bad_no_versions"][1] == (
        "'max_batch_size' must be non-negative value for bad_no_versions"
    )
    assert index["good_no_versions"][1] == (
        "at least one version must be available under the version policy of model "
        "'good_no_versions'"
    )
    assert index["dirname"][1] == (
        "unexpected directory name 'dirname' for model 'other', directory name must equal "
        "model name"
    )
    # Triton looks the backend up as it creates each version: the version's reason
    assert index["strict_io"][1].startswith(
        "Invalid argument: unable to find backend library for backend 'zzz'"
    )
    assert strict_index["strict_io"][1] == (
        "model input 'INPUT0' must specify 'data_type' for strict_io"
    )


def test_bad_config_override_is_a_poll_failure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add_identity("simple", dims=[4], max_batch_size=8)
    thread = start(
        repo.root, model_control_mode="explicit", load_model=("simple",), allow_grpc=True
    )
    try:
        http = httpclient.InferenceServerClient(thread.server.http_url)
        grpc = grpcclient.InferenceServerClient(thread.server.grpc_url)
        try:
            caplog.set_level(logging.ERROR, logger="tritonx")
            for client in (http, grpc):
                with pytest.raises(InferenceServerException) as err:
                    client.load_model(
                        "simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}'
                    )
                assert err.value.message().startswith(
                    "failed to load 'simple', failed to poll from model repository: "
                    "Invalid config override"
                )
                assert client.is_model_ready("simple")  # the loaded version keeps serving
            assert "Poll failed for model directory 'simple': Invalid config override" in (
                caplog.text
            )
            http.load_model(
                "simple",
                config='{"backend":"identity","max_batch_size":"16",'
                '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[4]}],'
                '"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[4]}]}',
            )
            assert http.get_model_config("simple")["max_batch_size"] == 16
        finally:
            http.close()
            grpc.close()
    finally:
        thread.stop()


@pytest.mark.parametrize(
    ("flags", "warnings"),
    [
        (
            ["--strict-model-config=true"],
            ["Warning: '--strict-model-config' has been deprecated! Please use "
             "'--disable-auto-complete-config' instead."],
        ),
        (
            ["--disable-auto-complete-config", "--strict-model-config=false"],
            ["Warning: '--strict-model-config' has been deprecated! Please use "
             "'--disable-auto-complete-config' instead.",
             "Warning: Overriding deprecated '--strict-model-config' from False to True in "
             "favor of '--disable-auto-complete-config'!"],
        ),
        (["--disable-auto-complete-config"], []),
    ],
)  # fmt: skip
def test_strict_model_config_warnings(
    tmp_path: Path, flags: list[str], warnings: list[str]
) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "tritonx", "serve", "--model-repository", str(tmp_path / "none"),
            *flags,
        ],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip
    assert result.returncode == 1  # the repository does not exist
    lines = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert lines == warnings


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_control_example_sequence(protocol: str) -> None:
    """The calls of tritonclient's ``simple_{http,grpc}_model_control.py`` examples, replayed
    against the bundled example repository in explicit mode."""
    pytest.importorskip("onnxruntime")
    from tritonx.config import EXAMPLE_REPOSITORY

    settings = loopback_settings(
        EXAMPLE_REPOSITORY, model_control_mode="explicit", allow_metrics=False
    )
    pm = make_plugin_manager(only=("backend_onnx", "backend_python"))
    thread = ServerThread(Server(settings, plugin_manager=pm))
    thread.start()
    module = httpclient if protocol == "http" else grpcclient
    url = thread.server.http_url if protocol == "http" else thread.server.grpc_url
    client = module.InferenceServerClient(url)
    try:
        index = client.get_model_repository_index()
        names = [m["name"] for m in index] if protocol == "http" else [m.name for m in index.models]
        on_disk = sorted(p.name for p in EXAMPLE_REPOSITORY.iterdir() if p.is_dir())
        assert sorted(names) == on_disk
        client.load_model("simple")
        assert client.is_model_ready("simple")
        with pytest.raises(InferenceServerException) as err:
            client.load_model(
                "simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}'
            )
        assert "failed to load" in err.value.message()
        client.load_model("simple", config='{"max_batch_size":"16"}')
        config = client.get_model_config("simple")
        assert (
            config["max_batch_size"] if protocol == "http" else config.config.max_batch_size
        ) == 16
        client.unload_model("simple")
        assert not client.is_model_ready("simple")
        if protocol == "grpc":
            with pytest.raises(InferenceServerException) as err:
                client.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
            assert err.value.status() == "StatusCode.INTERNAL"
            assert "failed to poll from model repository" in err.value.message()
            assert client.is_server_live()
        with pytest.raises(InferenceServerException) as err:
            client.load_model("wrong_model_name")
        assert "failed to load" in err.value.message()
    finally:
        client.close()
        thread.stop()
