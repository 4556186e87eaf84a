"""Load with ``file:<path>`` overrides over HTTP and gRPC (tritonclient), as Triton's
LocalizeRepoAgent: files land in a private temporary model folder; every way out of it
(``..``, a symlink on the way, a parent that is a file, a name longer than NAME_MAX) fails the
load with 500 / INTERNAL "failed to poll from model repository" and writes nothing outside; an
absolute path is re-rooted in the folder (Triton's JoinPath); the folder is removed when the
model is replaced (another override, a plain load) or unloaded, and when the load fails."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import tritonx
from tritonx import InferenceRequest, InferenceResponse, Server
from tritonx.testing import ModelRepositoryBuilder, ServerThread, loopback_settings

CONFIG = json.dumps(
    {
        "backend": "recordfile",
        "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_INT32", "dims": [1]}],
    }
)


class RecordFileBackend(tritonx.Backend):
    """Answers the first byte of ``<version>/model.bin``; records every folder it loads from."""

    name = "recordfile"
    default_model_filename = "model.bin"
    folders: ClassVar[list[Path]] = []

    def load(self, ctx: tritonx.LoadContext) -> tritonx.ModelInstance:
        RecordFileBackend.folders.append(ctx.model_dir)
        assert ctx.model_path is not None
        return FirstByte(ctx.model_path.read_bytes()[0])


class FirstByte(tritonx.ModelInstance):
    def __init__(self, value: int) -> None:
        self.value = value

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        out = np.array([self.value], np.int32)
        return [InferenceResponse(outputs={"OUT": out}) for _ in requests]


class Plugin:
    @tritonx.hookimpl
    def tritonx_register_backends(self, registry: tritonx.BackendRegistry) -> None:
        registry.add(RecordFileBackend)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the server uses for this test (``tempfile.tempdir``)."""
    path = tmp_path / "scratch"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


@pytest.fixture
def running(
    tmp_path: Path, scratch: Path, plugin_manager: Any, register_plugin: Any
) -> Iterator[Server]:
    register_plugin(Plugin())
    RecordFileBackend.folders.clear()
    repo = ModelRepositoryBuilder(tmp_path / "models")
    repo.add(
        "m",
        backend="recordfile",
        inputs=[("IN", "INT32", [1])],
        outputs=[("OUT", "INT32", [1])],
        versions={1: {"model.bin": b"\x07"}},
    )
    settings = loopback_settings(repo.root, model_control_mode="explicit", allow_metrics=False)
    with ServerThread(Server(settings, plugin_manager=plugin_manager)) as server:
        yield server


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, running: Server) -> Iterator[tuple[str, Any]]:
    if request.param == "http":
        c: Any = httpclient.InferenceServerClient(running.http_url)
    else:
        c = grpcclient.InferenceServerClient(running.grpc_url)
    yield request.param, c
    c.close()


def answer(protocol: str, client: Any, model: str = "m") -> int:
    mod = httpclient if protocol == "http" else grpcclient
    inp = mod.InferInput("IN", [1], "INT32")
    inp.set_data_from_numpy(np.zeros(1, np.int32))
    return int(client.infer(model, [inp]).as_numpy("OUT")[0])


def override_folders(scratch: Path) -> list[Path]:
    return sorted(scratch.glob("tritonx-override-*"))


def refused(protocol: str, client: Any, files: dict[str, bytes], model: str = "m") -> str:
    with pytest.raises(InferenceServerException) as info:
        client.load_model(model, config=CONFIG, files=files)
    assert info.value.status() == ("500" if protocol == "http" else "StatusCode.INTERNAL")
    message = info.value.message()
    assert f"failed to load '{model}', failed to poll from model repository" in message
    assert client.is_server_live()
    return message


def test_paths_leaving_the_folder_are_refused(
    client: tuple[str, Any], scratch: Path, tmp_path: Path
) -> None:
    protocol, c = client
    # ../.. from <scratch>/tritonx-override-*/<model> is <scratch>
    name = f"escape-{uuid.uuid4().hex}"
    message = refused(protocol, c, {f"file:../../{name}/new_dir/test.txt": b"x"})
    assert (
        f"Invalid file parameter 'file:../../{name}/new_dir/test.txt' with normalized path"
        in message
    )
    assert "must stay within model directory." in message
    assert not (scratch / name).exists()
    # deeper than the temporary root, and an existing file that must stay as it is
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / ".bashrc").write_text("original")
    refused(protocol, c, {"file:../../../victim/.bashrc": b"overwritten"})
    assert (victim / ".bashrc").read_text() == "original"
    # a symlink on the way out (Triton's test_file_override_security)
    link = scratch / f"escape_symlink_{uuid.uuid4().hex}"
    link.symlink_to(victim)
    for rel in (f"../../{link.name}/new_dir/test.txt", f"../../{link.name}/.bashrc"):
        message = refused(protocol, c, {f"file:{rel}": b"overwritten"})
        assert f"with normalized path '{victim}/" in message
    assert sorted(p.name for p in victim.iterdir()) == [".bashrc"]
    assert (victim / ".bashrc").read_text() == "original"
    # the model was never loaded, and no override folder is left behind
    assert not c.is_model_ready("m")
    assert override_folders(scratch) == []


def test_name_max_and_parent_file_are_refused(client: tuple[str, Any], scratch: Path) -> None:
    protocol, c = client
    # tritonclient's simple_grpc_model_control.py: a component longer than NAME_MAX
    message = refused(protocol, c, {"file:" + "A" * 256: b"a"})
    assert "File name too long" in message
    if protocol == "http":  # JSON keeps the parameters' order ("1" is written first)
        message = refused(protocol, c, {"file:1": b"x", "file:1/model.bin": b"y"})
        assert (
            "Invalid file parameter 'file:1/model.bin', directory has been created as a file"
            in message
        )
    c.load_model("m")  # the repository's model still loads
    assert answer(protocol, c) == 7
    assert override_folders(scratch) == []


def test_absolute_paths_are_rerooted_in_the_folder(client: tuple[str, Any], scratch: Path) -> None:
    """Triton joins ``file:/1/model.bin`` below the temporary folder (python_backend's
    model_control test loads ``file:/1/model.py`` this way)."""
    protocol, c = client
    outside = scratch / f"abs-{uuid.uuid4().hex}"
    c.load_model("m", config=CONFIG, files={"file:/1/model.bin": b"\x05", f"file:{outside}": b"z"})
    assert answer(protocol, c) == 5
    assert not outside.exists()
    (folder,) = override_folders(scratch)
    assert (folder / "m" / outside.relative_to("/")).read_bytes() == b"z"
    c.unload_model("m")
    assert override_folders(scratch) == []


def test_folder_removed_on_replace_and_unload(client: tuple[str, Any], scratch: Path) -> None:
    protocol, c = client
    c.load_model("m", config=CONFIG, files={"file:1/model.bin": b"\x01"})
    assert answer(protocol, c) == 1
    first = RecordFileBackend.folders[-1]
    assert first.is_dir() and first.parent.parent == scratch
    assert (first / "1" / "model.bin").read_bytes() == b"\x01"
    # a second override replaces the first: its folder (with its temporary parent) goes
    c.load_model("m", config=CONFIG, files={"file:1/model.bin": b"\x02"})
    assert answer(protocol, c) == 2
    second = RecordFileBackend.folders[-1]
    assert second != first and not first.parent.exists() and second.is_dir()
    assert override_folders(scratch) == [second.parent]
    # a plain load goes back to the repository and removes the override folder
    c.load_model("m")
    assert answer(protocol, c) == 7
    assert not second.parent.exists() and override_folders(scratch) == []
    # unload removes it too
    c.load_model("m", config=CONFIG, files={"file:1/model.bin": b"\x03"})
    assert answer(protocol, c) == 3
    third = RecordFileBackend.folders[-1]
    c.unload_model("m")
    assert not third.parent.exists() and override_folders(scratch) == []
    # a load that fails after the folder was written (no model.bin) removes it as well
    with pytest.raises(InferenceServerException):
        c.load_model("m", config=CONFIG, files={"file:1/other.bin": b"\x04"})
    assert override_folders(scratch) == []


def test_config_is_required_and_checked(client: tuple[str, Any], scratch: Path) -> None:
    """Triton checks both while it polls the model (observed on Triton 2.51: 500)."""
    protocol, c = client
    with pytest.raises(InferenceServerException) as info:
        c.load_model("m", files={"file:1/model.bin": b"\x01"})
    assert info.value.status() == ("500" if protocol == "http" else "StatusCode.INTERNAL")
    assert info.value.message() == (
        "failed to load 'm', failed to poll from model repository: "
        "Load parameter 'config' must be specified for model file override"
    )
    with pytest.raises(InferenceServerException) as info:
        c.load_model("m", config="{not json", files={"file:1/model.bin": b"\x01"})
    assert "failed to load 'm', failed to poll from model repository: Invalid config override" in (
        info.value.message()
    )
    assert not c.is_model_ready("m") and override_folders(scratch) == []
