import os
from pathlib import Path

import pytest
from google.protobuf import text_format

from tritonx._core import model_config as cfg
from tritonx._core.config_file import MAX_CONFIG_BYTES, read_config_file
from tritonx.backend import Backend, LoadContext, ModelInstance
from tritonx.config import config_to_json_dict
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2
from tritonx.registry import BackendRegistry


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


@pytest.mark.parametrize(
    ("filename", "backend", "platform"),
    [
        ("model.onnx", "onnxruntime", "onnxruntime_onnx"),
        ("model.plan", "tensorrt", "tensorrt_plan"),
        ("model.pt", "pytorch", "pytorch_libtorch"),
        ("model.py", "python", ""),
        ("model.xml", "openvino", ""),
    ],
)
def test_backend_from_model_file(
    tmp_path: Path, filename: str, backend: str, platform: str
) -> None:
    (tmp_path / filename).write_bytes(b"x")
    config = model_config_pb2.ModelConfig()
    cfg.auto_complete_backend_fields(config, "m", tmp_path)
    assert (config.name, config.backend, config.platform) == ("m", backend, platform)
    assert config.default_model_filename == filename


def test_platform_implies_backend(tmp_path: Path) -> None:
    config = parse('platform: "onnxruntime_onnx"')
    cfg.auto_complete_backend_fields(config, "m", tmp_path)
    assert config.backend == "onnxruntime" and config.default_model_filename == "model.onnx"


def test_custom_backend_by_file_and_by_name(tmp_path: Path) -> None:
    (tmp_path / "model.npz").write_bytes(b"x")
    config = model_config_pb2.ModelConfig()
    registry = BackendRegistry()
    registry.add(_Linear)
    cfg.auto_complete_backend_fields(config, "m", tmp_path, registry)
    assert config.backend == "linear"
    config = parse('platform: "acme_linear"')
    cfg.auto_complete_backend_fields(config, "m", None, registry)
    assert config.backend == "linear"
    config = model_config_pb2.ModelConfig()
    cfg.auto_complete_backend_fields(config, "m.custom", None)
    assert (config.backend, config.default_model_filename) == ("custom", "model.custom")


class _Linear(Backend):
    name = "linear"
    platforms = ("acme_linear",)
    default_model_filename = "model.npz"

    def load(self, ctx: LoadContext) -> ModelInstance:
        raise NotImplementedError


def test_undeterminable_backend(tmp_path: Path) -> None:
    with pytest.raises(TritonXError, match="Could not determine backend for model 'm'"):
        cfg.auto_complete_backend_fields(model_config_pb2.ModelConfig(), "m", tmp_path)


def test_normalize_defaults() -> None:
    config = parse('name: "m" backend: "onnxruntime" max_batch_size: 8 dynamic_batching { }')
    cfg.normalize(config)
    cfg.normalize_instance_groups(config, default_cpu_count=2)
    assert config.version_policy.latest.num_versions == 1
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.optimization.input_pinned_memory.enable
    group = config.instance_group[0]
    # Triton: the implicit group is named after the model; onnxruntime CPU groups get 2
    assert (group.name, group.count) == ("m", 2)
    assert group.kind == model_config_pb2.ModelInstanceGroup.KIND_CPU


def test_named_groups_and_counts() -> None:
    config = parse(
        'name: "m" backend: "python" instance_group [ { kind: KIND_CPU }, { count: 3, kind: KIND_MODEL } ]'
    )
    cfg.normalize_instance_groups(config)
    assert [(g.name, g.count) for g in config.instance_group] == [("m_0", 1), ("m_1", 3)]


def test_sequence_idle_default() -> None:
    config = parse('name: "m" backend: "x" sequence_batching { }')
    cfg.normalize(config)
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name: "other" backend: "x"', "unexpected directory name 'm' for model 'other'"),
        ('name: "m" backend: "x" max_batch_size: -1', "'max_batch_size' must be non-negative"),
        (
            'name: "m" backend: "x" input [ { name: "I" data_type: TYPE_FP32 dims: [ 0 ] } ]',
            "model input 'I' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m",
        ),
        (
            'name: "m" backend: "x" output [ { name: "O" dims: [ 1 ] } ]',
            "model output 'O' must specify 'data_type' for m",
        ),
        (
            'name: "m" backend: "x" max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }',
            "dynamic batching preferred size must be <= max batch size for m",
        ),
        (
            'name: "m" backend: "python" instance_group [ { kind: KIND_GPU } ]',
            "instance group m_0 of model m has kind KIND_GPU but no GPUs are available",
        ),
        (
            'name: "m" platform: "tensorrt_plan" backend: "onnxruntime"',
            "unexpected 'platform' and 'backend' pair, got:tensorrt_plan, onnxruntime",
        ),
    ],
)
def test_validation_messages(text: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITONX_GPU_COUNT", "0")
    cfg.gpu_count.cache_clear()
    config = parse(text)
    cfg.normalize(config)
    cfg.normalize_instance_groups(config)
    with pytest.raises(TritonXError) as err:
        cfg.validate(config, "m")
    assert message in err.value.message
    assert err.value.code is Code.INVALID_ARG
    cfg.gpu_count.cache_clear()


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text(
        'name: "m"\nmax_batch_size: 8\ninput [ { name: "I" data_type: TYPE_FP32 dims: [ 1 }\n'
    )
    with pytest.raises(TritonXError) as err:
        read_config_file(path)
    assert str(path) in err.value.message and "3:" in err.value.message


def test_config_json_numbers_like_triton() -> None:
    config = parse(
        'name: "m" backend: "x" max_batch_size: 8 input [ { name: "I" data_type: TYPE_FP32 dims: [ -1, 3 ] } ] '
        "dynamic_batching { max_queue_delay_microseconds: 100 priority_levels: 2 default_priority_level: 1 "
        "priority_queue_policy { key: 1 value: { default_timeout_microseconds: 5 } } } "
        "version_policy { specific { versions: [ 1, 2 ] } }"
    )
    out = config_to_json_dict(config)
    assert out["input"][0]["dims"] == [-1, 3]
    assert out["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert (
        out["dynamic_batching"]["priority_queue_policy"]["1"]["default_timeout_microseconds"] == 5
    )
    assert out["version_policy"]["specific"]["versions"] == [1, 2]
    assert out["platform"] == "" and out["input"][0]["data_type"] == "TYPE_FP32"


def test_config_override_json_errors() -> None:
    with pytest.raises(TritonXError, match="Invalid config override"):
        cfg.parse_config_json('{"max_batch_size": "nope"}')
    assert cfg.parse_config_json('{"max_batch_size": "16"}').max_batch_size == 16


@pytest.mark.parametrize("kind", ["fifo", "device", "oversized"])
def test_only_a_bounded_regular_config_file_is_read(tmp_path: Path, kind: str) -> None:
    """A FIFO would block the loading thread for ever and /dev/zero fill the memory: both
    (and a file past the size bound) fail at once with a clear reason."""
    path = tmp_path / "config.pbtxt"
    if kind == "fifo":
        os.mkfifo(path)  # nobody ever writes to it
        reason = "not a regular file"
    elif kind == "device":
        path.symlink_to("/dev/zero")
        reason = "not a regular file"
    else:
        with path.open("wb") as f:
            f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: no disk
        reason = f"larger than {MAX_CONFIG_BYTES} bytes"
    with pytest.raises(TritonXError) as err:
        read_config_file(path)
    assert err.value.message == f"failed to read model configuration '{path}': {reason}"
