"""The ``zip://`` example repository: a server loads a model out of an archive, reloads it
when the archive's members change, and removes its extracted copies once they are unused."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import numpy as np
import pluggy
import pytest

import tritonx
from tritonx.testing import ModelRepositoryBuilder, loopback_settings


def archive(tmp_path: Path, versions: tuple[int, ...]) -> Path:
    """A zip of a repository holding the identity model ``echo`` with these versions."""
    source = ModelRepositoryBuilder(tmp_path / f"src{len(versions)}")
    source.add_identity("echo", datatype="INT32", dims=[1], versions=versions)
    return Path(shutil.make_archive(str(tmp_path / "models"), "zip", source.root))


async def test_serves_and_reloads_models_from_an_archive(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(extracted))
    path = archive(tmp_path, versions=(1,))
    register_plugin(example)
    settings = loopback_settings(
        f"zip://{path}",
        model_control_mode="explicit",
        load_model=("echo",),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    async with tritonx.Server(settings, plugin_manager=plugin_manager) as server:
        request = tritonx.InferenceRequest("echo", {"INPUT0": np.array([7], np.int32)})
        response = await server.infer(request)
        assert (response.model_version, response.outputs["OUTPUT0"].tolist()) == (1, [7])
        assert [(r.name, r.version) for r in server.repository_index()] == [("echo", 1)]

        archive(tmp_path, versions=(1, 2))  # the same archive, now with version 2
        await server.load_model("echo")
        assert (await server.infer(request)).model_version == 2
        assert len(list(extracted.iterdir())) == 1  # the first copy was released
    assert list(extracted.iterdir()) == []


async def test_a_failed_load_removes_its_extracted_copy(
    example: ModuleType,
    register_plugin: Callable[[object], None],
    plugin_manager: pluggy.PluginManager,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model whose config does not parse fails to load, and the copy extracted for it is
    released (the core releases a localized folder that nothing will serve from)."""
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(extracted))
    source = ModelRepositoryBuilder(tmp_path / "src")
    source.add_identity("echo", datatype="INT32", dims=[1])
    (source.root / "bad" / "1").mkdir(parents=True)
    (source.root / "bad" / "config.pbtxt").write_text("this is { not a config")
    path = Path(shutil.make_archive(str(tmp_path / "models"), "zip", source.root))
    register_plugin(example)
    settings = loopback_settings(
        f"zip://{path}",
        model_control_mode="explicit",
        load_model=("echo",),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    async with tritonx.Server(settings, plugin_manager=plugin_manager) as server:
        with pytest.raises(tritonx.TritonXError):
            await server.load_model("bad")
        assert len(list(extracted.iterdir())) == 1  # echo's copy only


def test_a_corrupt_member_is_refused_and_leaves_nothing(
    example: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extracted = tmp_path / "extracted"
    extracted.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(extracted))
    path = archive(tmp_path, versions=(1,))
    data = bytearray(path.read_bytes())
    start = data.index(b"echo/config.pbtxt") + len(b"echo/config.pbtxt")  # the local header's
    data[start + 2] ^= 0xFF  # flip a byte of that member's (stored or deflated) data
    path.write_bytes(bytes(data))
    repo = example.ZipRepository(f"zip://{path}", {})
    with pytest.raises(tritonx.TritonXError, match="cannot extract model 'echo'"):
        repo.localize("echo")
    assert list(extracted.iterdir()) == []


def test_unreadable_archive_is_refused(example: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "models.zip").write_text("not a zip")
    repo = example.ZipRepository(f"zip://{tmp_path / 'models.zip'}", {})
    with pytest.raises(tritonx.TritonXError, match="cannot read model repository"):
        repo.list_models()
