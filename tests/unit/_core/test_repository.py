from pathlib import Path

import pytest

from tritonx._core.lifecycle import ModelManager
from tritonx._core.model_config import select_versions, version_folders
from tritonx._runtime.plugins import collect, make_plugin_manager
from tritonx.builtin.local_repository import LocalRepository
from tritonx.config import ServerSettings
from tritonx.errors import Code, TritonXError
from tritonx.proto import model_config_pb2


def test_version_folders_skip_non_numeric_and_leading_zeros(tmp_path: Path) -> None:
    for name in ("0", "1", "2", "10", "01", "00", "abc", "0x", "warmup"):
        (tmp_path / name).mkdir()
    (tmp_path / "3").write_text("a file, not a folder")
    assert sorted(version_folders(tmp_path)) == [0, 1, 2, 10]


def _policy(text: str) -> model_config_pb2.ModelVersionPolicy:
    from google.protobuf import text_format

    return text_format.Parse(text, model_config_pb2.ModelVersionPolicy())


def test_version_policies() -> None:
    versions = [1, 2, 3, 10]
    assert select_versions(model_config_pb2.ModelVersionPolicy(), versions) == [10]
    assert select_versions(_policy("latest { num_versions: 2 }"), versions) == [3, 10]
    assert select_versions(_policy("all { }"), versions) == versions
    assert select_versions(_policy("specific { versions: [1, 3, 7] }"), versions) == [1, 3]


def test_scan_finds_duplicates(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for repo in (a, b):
        (repo / "same").mkdir(parents=True)
    (a / "only_a").mkdir()
    (a / ".hidden").mkdir()
    manager = ModelManager(
        ServerSettings(model_repository=(str(a), f"file://{b}")),
        collect(make_plugin_manager(autoload=False)),
    )
    models, duplicates = manager.scan()
    assert sorted(models) == ["only_a"]
    assert duplicates == {"same": [str(a), f"file://{b}"]}


def test_a_manager_refuses_a_config_name_that_leaves_the_model_folder(tmp_path: Path) -> None:
    """However a manager is made (not only through Server.start()), ``--model-config-name``
    cannot name a file outside ``<model>/configs``."""
    for name in ("../x", "a/b", ".."):
        with pytest.raises(TritonXError) as err:
            ModelManager(
                ServerSettings(model_repository=(str(tmp_path),), model_config_name=name),
                collect(make_plugin_manager(autoload=False)),
            )
        assert err.value.code is Code.INVALID_ARG


def test_local_repository_stamp_changes_with_files(tmp_path: Path) -> None:
    (tmp_path / "m" / "1").mkdir(parents=True)
    repo = LocalRepository(str(tmp_path), {})
    assert repo.list_models() == ["m"]
    before = repo.stamp("m")
    (tmp_path / "m" / "1" / "model.bin").write_bytes(b"x")
    assert repo.stamp("m") != before
    assert repo.localize("m") == tmp_path / "m"
    # bytecode Python writes beside a model's modules is no change of the model
    after = repo.stamp("m")
    (tmp_path / "m" / "1" / "__pycache__").mkdir()
    (tmp_path / "m" / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"pyc")
    assert repo.stamp("m") == after
