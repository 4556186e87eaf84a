"""Unit tests of the config rules (no session needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

from tritonx.config import EditableModelConfig, ModelConfig
from tritonx.errors import TritonXError
from tritonx.proto import model_config_pb2
from tritonx_backend_onnx import modelconfig
from tritonx_backend_onnx.tensors import TensorInfo, fit_shape


def infos(*specs: tuple[str, str, tuple[int, ...]]) -> list[TensorInfo]:
    return [TensorInfo(n, t, d) for n, t, d in specs]


def test_auto_complete_scalar_io_with_batching() -> None:
    """Scalars per batch item get dims [1] and an empty reshape."""
    config = model_config_pb2.ModelConfig(name="m")
    modelconfig.auto_complete(
        EditableModelConfig(config),
        infos(("x", "tensor(float)", (-1,))),
        infos(("y", "tensor(int64)", (-1,))),
    )
    assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [1] and config.input[0].HasField("reshape")
    assert not config.input[0].reshape.shape
    assert config.output[0].data_type == model_config_pb2.DataType.TYPE_INT64


def test_auto_complete_keeps_complete_config_and_max_batch_1() -> None:
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=1)
    modelconfig.auto_complete(
        EditableModelConfig(config),
        infos(("x", "tensor(string)", (-1, 3))),
        infos(("y", "tensor(bool)", (-1, 3))),
    )
    assert not config.HasField("dynamic_batching")  # only for max_batch_size > 1
    assert config.input[0].data_type == model_config_pb2.DataType.TYPE_STRING
    before = config.SerializeToString()
    modelconfig.auto_complete(
        EditableModelConfig(config), infos(("other", "tensor(float)", (-1,))), []
    )
    assert config.SerializeToString() == before


def test_auto_complete_adds_no_dynamic_batcher_beside_another_scheduler() -> None:
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=2)
    config.sequence_batching.SetInParent()
    modelconfig.auto_complete(
        EditableModelConfig(config),
        infos(("x", "tensor(float)", (-1, 4))),
        infos(("y", "tensor(float)", (-1, 4))),
    )
    assert not config.HasField("dynamic_batching") and config.HasField("sequence_batching")
    assert [t.name for t in config.input] == ["x"]


def test_auto_complete_unsupported_type() -> None:
    config = model_config_pb2.ModelConfig(name="m")
    with pytest.raises(TritonXError, match="unsupported datatype tensor\\(complex64\\)"):
        modelconfig.auto_complete(
            EditableModelConfig(config), infos(("x", "tensor(complex64)", (2,))), []
        )


def test_validate_scalar_and_reshape() -> None:
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=0)
    config.input.add(name="x", data_type=model_config_pb2.DataType.TYPE_FP32, dims=[1])
    config.output.add(name="y", data_type=model_config_pb2.DataType.TYPE_FP32, dims=[2])
    scalars = infos(("x", "tensor(float)", ())), infos(("y", "tensor(float)", ()))
    with pytest.raises(TritonXError, match="scalar tensor 'y', should only provide 1"):
        modelconfig.validate(ModelConfig(config), *scalars)
    config.output[0].reshape.shape.extend([1])  # a reshape is what gets compared
    modelconfig.validate(ModelConfig(config), *scalars)


def test_validate_input_may_be_an_overridable_initializer() -> None:
    config = model_config_pb2.ModelConfig(name="m")
    config.input.add(name="x", data_type=model_config_pb2.DataType.TYPE_FP32, dims=[2])
    config.input.add(name="w", data_type=model_config_pb2.DataType.TYPE_FP32, dims=[2])
    config.output.add(name="y", data_type=model_config_pb2.DataType.TYPE_FP32, dims=[2])
    io = infos(("x", "tensor(float)", (2,))), infos(("y", "tensor(float)", (2,)))
    modelconfig.validate(ModelConfig(config), *io, initializers=infos(("w", "tensor(float)", (2,))))
    config.input[0].optional = True
    modelconfig.validate(ModelConfig(config), *io, initializers=infos(("w", "tensor(float)", (2,))))
    config.max_batch_size = 2
    with pytest.raises(
        TritonXError, match="optional input 'x' is not supported for models that support batching"
    ):
        modelconfig.validate(
            ModelConfig(config), *io, initializers=infos(("w", "tensor(float)", (2,)))
        )


def test_session_settings_merge() -> None:
    config = model_config_pb2.ModelConfig(name="m")
    config.optimization.graph.level = -1
    s = modelconfig.session_settings(
        config,
        {"inter_op_thread_count": "3", "enable_mem_arena": "OFF"},
        {"intra_op_thread_count": "2", "inter_op_thread_count": "9"},
    )
    assert (s.intra_op_thread_count, s.inter_op_thread_count, s.enable_mem_arena) == (2, 3, False)
    assert s.graph_level == "ORT_ENABLE_BASIC"
    config.optimization.graph.level = 2
    assert modelconfig.session_settings(config, {}, {}).graph_level == "ORT_DISABLE_ALL"
    config.optimization.graph.level = 1
    assert modelconfig.session_settings(config, {}, {}).graph_level == "ORT_ENABLE_EXTENDED"
    assert (
        modelconfig.session_settings(model_config_pb2.ModelConfig(), {}, {}).graph_level
        == "ORT_ENABLE_ALL"
    )
    with pytest.raises(TritonXError, match="to boolean"):
        modelconfig.session_settings(config, {"enable_mem_pattern": "maybe"}, {})
    with pytest.raises(TritonXError, match=">= 0"):
        modelconfig.session_settings(config, {"intra_op_thread_count": "-2"}, {})


def test_make_session_options() -> None:
    import onnxruntime as ort

    s = modelconfig.SessionSettings(
        graph_level="ORT_DISABLE_ALL",
        execution_mode=1,
        intra_op_thread_count=2,
        enable_mem_arena=False,
    )
    so, _ = modelconfig.make_session_options(ort, s)
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert so.intra_op_num_threads == 2 and so.enable_cpu_mem_arena is False


def test_fit_shape() -> None:
    import numpy as np

    assert fit_shape(np.float32(3.0) * np.ones(()), (1,)).shape == (1,)
    assert fit_shape(np.zeros((2, 6)), (2, 2, 3)).shape == (2, 2, 3)
    assert fit_shape(np.zeros((2, 6)), (2, -1)).shape == (2, 6)
    assert fit_shape(np.zeros((5,)), (2, 3)).shape == (5,)  # sizes disagree: left alone
