"""A model's own packages put first on a worker's path (its requirements' environment).

Standard library only: a fresh worker imports this before anything else, so the model's
versions of packages (numpy included) win over the server's.
"""

from __future__ import annotations

import importlib
import os
import site
import sys


def layer(site_dir: str) -> None:
    """Put a folder of packages first on ``sys.path`` (``site.addsitedir`` semantics: its
    ``.pth`` files run) and its console scripts first on ``PATH``.

    :raises SystemExit: the folder is gone (the worker cannot run the model).
    """
    if not os.path.isdir(site_dir):
        raise SystemExit(f"tritonx: the model's environment {site_dir} is gone")
    before = list(sys.path)
    site.addsitedir(site_dir)
    sys.path[:] = [p for p in sys.path if p not in before] + before
    os.environ["PATH"] = os.pathsep.join(
        p for p in (os.path.join(site_dir, "bin"), os.environ.get("PATH", "")) if p
    )
    importlib.invalidate_caches()
