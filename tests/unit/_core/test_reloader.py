"""``--reload``'s mapping of the paths watchfiles reports to the models they belong to."""

from __future__ import annotations

from pathlib import Path

from tritonx._core.reloader import changed_models


def test_changed_paths_name_their_models(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    changed = changed_models(
        [a, b],
        [
            str(a / "m" / "1"),
            str(a / "m" / "1" / "model.py"),
            str(a / "m" / "config.pbtxt"),
            str(b / "n"),
            str(a / "top_level_file"),  # a model of its own name: not a folder, not loaded
            str(a / ".hidden" / "x"),
            str(tmp_path / "elsewhere" / "x"),
        ],
    )
    assert changed == {"m": "m/1/model.py", "n": "n", "top_level_file": "top_level_file"}
