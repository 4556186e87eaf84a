"""``tritonx plugins`` lists the DALI plugin, found through its ``tritonx`` entry point
(the installed distribution, or a dist-info written from its pyproject when it is not
installed: :func:`tritonx.testing.listed_plugins`)."""

from __future__ import annotations

from pathlib import Path

from tritonx.testing import listed_plugins

ROOT = Path(__file__).resolve().parent.parent


def test_tritonx_plugins_lists_backend_dali(tmp_path: Path) -> None:
    plugin = listed_plugins(ROOT, tmp_path)["backend_dali"]
    assert plugin["distribution"] == "tritonx-backend-dali"
    assert plugin["hooks"] == ["tritonx_register_backends"]
    assert plugin["registered"]["backends"] == ["dali"]
