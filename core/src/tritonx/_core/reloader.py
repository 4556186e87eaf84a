"""``tritonx serve --reload`` (development): watch the local model repositories and reload a
model whose files change.

:class:`Reloader` runs :func:`watchfiles.awatch` (the ``reload`` extra: ``pip install
'tritonx[reload]'``) over the repositories' folders; watchfiles debounces an editor's save
into one batch, and its default filter drops ``__pycache__``, ``.pyc`` files and editor
files (``.swp``, ``~`` backups, ``.#`` locks). Each changed path names a model, the first
component under its repository's folder; the batch goes to the model manager
(:meth:`~tritonx._core.lifecycle.ModelManager.reload_changed`), which reloads them through
the load path of the load API and the repository poll, with what it does and why in the log.
The model manager starts the reloader once the start-up models are loaded and stops it
first when it shuts down.

Only folders are watched: :func:`watched_folder` tells a local repository (a plain path or a
``file://`` URL) from a cloud one (``s3://``, ``gs://``, ``as://``), which ``--reload``
refuses (:func:`tritonx._runtime.settings_check.check_reload`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path, PurePath

from tritonx.repository import url_scheme

__all__ = ["INSTALL_HINT", "Reloader", "changed_models", "watched_folder", "watchfiles_missing"]

log = logging.getLogger("tritonx.reload")

#: how to get watchfiles (the core's ``reload`` extra)
INSTALL_HINT = "pip install 'tritonx[reload]'"
#: ``{model: a file of it that changed, relative to its repository}`` → reload them
Apply = Callable[[Mapping[str, str]], Awaitable[None]]


def watched_folder(url: str) -> Path | None:
    """The folder ``--reload`` watches for repository ``url``: the path of a plain path or a
    ``file://`` URL; None for any other scheme (a cloud repository)."""
    scheme = url_scheme(url)
    if scheme == "":
        return Path(url)
    if scheme == "file":
        return Path(url[len("file://") :])
    return None


def watchfiles_missing() -> str | None:
    """Why ``--reload`` cannot run here (watchfiles is not installed), or None."""
    if importlib.util.find_spec("watchfiles") is None:
        return f"--reload needs the watchfiles package: {INSTALL_HINT}"
    return None


def changed_models(roots: Iterable[Path], paths: Iterable[str]) -> dict[str, str]:
    """The models that ``paths`` (absolute paths watchfiles reported) belong to: ``{model:
    its deepest changed path, relative to its repository}``. A path at the top of a
    repository names a model folder added or removed (or a file there: the model manager
    finds no such model); hidden entries and paths outside the repositories name none."""
    # watchfiles reports absolute paths under the folder as given (or as resolved)
    folders = [folder for root in roots for folder in (root.absolute(), root.resolve())]
    out: dict[str, str] = {}
    for text in sorted(paths):
        path = Path(text).absolute()
        for root in folders:
            try:
                relative = path.relative_to(root)
            except ValueError:
                continue
            parts = relative.parts
            if parts and not parts[0].startswith("."):
                # the deepest path names the change best (a file rather than its folder)
                known = out.get(parts[0])
                if known is None or len(parts) > len(PurePath(known).parts):
                    out[parts[0]] = str(PurePath(*parts))
            break
    return out


class Reloader:
    """Watches ``roots`` and hands each batch of changed models to ``apply``.

    :param roots: the repositories' folders.
    :param apply: reloads the models of a batch (failures are its to log).
    """

    def __init__(self, roots: Iterable[Path], apply: Apply) -> None:
        self.roots = [Path(root) for root in roots]
        self._apply = apply
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start watching: returns once watchfiles watches the folders (a change made from
        then on is seen)."""
        self._task = asyncio.create_task(self._run(), name="tritonx-reload")
        # the task runs up to its first wait, inside awatch: watchfiles registered the
        # folders before it (RustNotify is made before awatch first awaits)
        await asyncio.sleep(0)
        folders = ", ".join(str(root) for root in self.roots)
        log.info("--reload: watching %s; a model whose files change is reloaded", folders)

    async def stop(self) -> None:
        """Stop watching (watchfiles sees its stop event within 50 ms); a reload under way
        ends first, as a load API call does (never cancelled half-way)."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stop.set()
        await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        try:
            import watchfiles

            async for changes in watchfiles.awatch(*self.roots, stop_event=self._stop):
                models = changed_models(self.roots, (path for _, path in changes))
                if not models:
                    continue
                try:
                    await self._apply(models)
                except Exception:
                    log.exception("--reload: reloading %s failed", ", ".join(sorted(models)))
        except Exception:
            log.exception("--reload: watching the repositories failed; no more reloads")
