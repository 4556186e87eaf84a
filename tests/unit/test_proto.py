"""``tritonx.proto`` loads ``model_config_pb2`` without ``tritonclient.grpc``'s ``__init__``
(which imports grpc); the client, imported later, shares that very module."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
import tritonx.config
assert "grpc" not in sys.modules and "tritonclient.grpc" not in sys.modules
first = sys.modules["tritonclient.grpc.model_config_pb2"]
import tritonclient.grpc
from tritonclient.grpc import model_config_pb2, service_pb2
from tritonx import proto
assert model_config_pb2 is first is proto.model_config_pb2
assert proto.service_pb2 is service_pb2
reply = service_pb2.ModelConfigResponse(config=first.ModelConfig(name="m", max_batch_size=4))
assert service_pb2.ModelConfigResponse.FromString(reply.SerializeToString()).config.name == "m"
"""


def test_model_config_loads_alone_and_is_the_clients_module() -> None:
    run = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_an_unknown_name_is_an_attribute_error() -> None:
    from tritonx import proto

    with pytest.raises(AttributeError, match="nope"):
        proto.nope  # noqa: B018
