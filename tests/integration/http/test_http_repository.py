"""Repository extension over HTTP: load (config and file overrides), unload, index."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonx.config import ServerSettings
from tritonx.testing import ServerThread, loopback_settings
from tritonx.testing.repository import ModelRepositoryBuilder


@pytest.fixture
def server_settings(model_repository: ModelRepositoryBuilder) -> ServerSettings:
    """Explicit model control; only ``a`` is loaded at start-up."""
    model_repository.add_identity("a", "INT32", dims=[-1])
    model_repository.add_identity("b", "FP32", dims=[-1])
    return loopback_settings(
        model_repository.root,
        model_control_mode="explicit",
        load_model=("a",),
        allow_grpc=False,
        allow_metrics=False,
    )


@pytest.fixture
def client(server_thread: ServerThread) -> Iterator[Any]:
    c = httpclient.InferenceServerClient(server_thread.server.http_url)
    yield c
    c.close()


def echo(client: Any, model: str, datatype: str = "INT32") -> list[Any]:
    data = np.array([1, 2], dtype=np.int32 if datatype == "INT32" else np.float32)
    inp = httpclient.InferInput("INPUT0", [2], datatype)
    inp.set_data_from_numpy(data)
    return client.infer(model, [inp]).as_numpy("OUTPUT0").tolist()


def test_load_unload_index(client: Any) -> None:
    index = {r["name"]: r for r in client.get_model_repository_index()}
    assert index["a"]["state"] == "READY"
    assert index["b"] == {"name": "b"}
    assert not client.is_model_ready("b")
    client.load_model("b")
    assert client.is_model_ready("b")
    assert echo(client, "b", "FP32") == [1.0, 2.0]
    client.unload_model("b", unload_dependents=True)
    assert not client.is_model_ready("b")
    client.unload_model("b")  # unloading a model that is not loaded succeeds
    with pytest.raises(InferenceServerException) as err:
        client.load_model("missing")
    assert "failed to load" in err.value.message()
    assert client.is_server_live()


def test_load_with_config_override(client: Any) -> None:
    config = {
        "name": "a",
        "backend": "identity",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
    }
    client.load_model("a", config=json.dumps(config))
    assert client.get_model_config("a")["max_batch_size"] == 4
    with pytest.raises(InferenceServerException) as err:
        client.load_model("a", config="{not json")
    assert err.value.status() in ("400", "500")


def test_load_with_file_override(client: Any) -> None:
    config = {
        "name": "c",
        "backend": "identity",
        "input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [-1]}],
    }
    files = {"file:1/model.txt": b"weights"}
    client.load_model("c", config=json.dumps(config), files=files)
    assert client.is_model_ready("c")
    assert echo(client, "c") == [1, 2]
    # the file override needs a config: as Triton (qa/L0_lifecycle), a poll failure whose
    # reason is logged
    with pytest.raises(InferenceServerException) as err:
        client.load_model("c", files={"file:1/x": b"x"})
    assert err.value.status() == "500"  # as Triton: checked while polling the model
    assert "failed to load 'c', failed to poll from model repository" in err.value.message()
    assert "Load parameter 'config' must be specified" in err.value.message()


def test_load_not_allowed_in_none_mode(tmp_path: Any) -> None:
    from tritonx._runtime.plugins import make_plugin_manager
    from tritonx.server import Server
    from tritonx.testing import identity

    repo = ModelRepositoryBuilder(tmp_path / "m")
    repo.add_identity("a", "INT32", dims=[-1])
    settings = loopback_settings(repo.root, allow_grpc=False, allow_metrics=False)
    with ServerThread(
        Server(settings, plugin_manager=make_plugin_manager(autoload=False, extra=[identity]))
    ) as srv:
        c = httpclient.InferenceServerClient(srv.http_url)
        with pytest.raises(InferenceServerException) as err:
            c.load_model("a")
        assert err.value.status() == "503"
        assert "explicit model load / unload is not allowed" in err.value.message()
        c.close()
