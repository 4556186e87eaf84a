"""Ensembles and their composing models, as Triton's dependency graph sees them.

The model manager records, for each ensemble it prepared, the composing models its steps
name (:class:`DependencyGraph`, until the ensemble is unloaded). An ensemble's load links it
to them: a cycle between ensembles fails it, and so does a composing model that is missing,
ambiguous, failed or lacks a version a step requires (:func:`composing_configs`, Triton's
messages); it is then validated against their completed configs. The graph also tells which
ensembles to reload when a composing model is reloaded (:meth:`DependencyGraph.users`) and in
which order ensembles are unloaded at exit (:meth:`DependencyGraph.outer_first`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tritonx._core.ensemble_config import validate_with_composing
from tritonx._core.entries import ModelEntry
from tritonx._core.status import UNLOADED_REASON
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError


class DependencyError(TritonXError):
    """An ensemble that cannot load because of its composing models (Triton's dependency
    graph status: INVALID_ARG)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Code.INVALID_ARG)


class DependencyGraph:
    """Ensemble → the composing models of its last prepared config (until unloaded)."""

    def __init__(self) -> None:
        self._deps: dict[str, tuple[str, ...]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._deps

    def of(self, name: str) -> tuple[str, ...]:
        """The composing models of ensemble ``name`` (() for any other model)."""
        return self._deps.get(name, ())

    def link(self, name: str, deps: tuple[str, ...]) -> None:
        """Record the composing models of ensemble ``name``; refuse a cycle."""
        self._deps[name] = deps
        self.check_cycles(name)

    def drop(self, name: str) -> None:
        self._deps.pop(name, None)

    def users(self, name: str) -> list[str]:
        """The other ensembles that use ``name``."""
        return [e for e, deps in self._deps.items() if e != name and name in deps]

    def outer_first(self, names: Iterable[str]) -> Iterator[list[str]]:
        """The ensembles among ``names`` in batches, each batch used by no ensemble left
        (outer before inner: their requests drain while the composing models still serve)."""
        ensembles = [n for n in names if n in self._deps]
        while ensembles:
            inner = {d for e in ensembles for d in self._deps[e]}
            outer = [e for e in ensembles if e not in inner] or ensembles
            yield outer
            ensembles = [e for e in ensembles if e not in outer]

    def check_cycles(self, name: str) -> None:
        """Triton's ``CircularDependencyCheck`` over the ensembles known so far."""
        deps = self._deps
        seen: set[str] = set()

        def visit(current: str) -> str | None:
            for upstream in deps.get(current, ()):
                if upstream == name:
                    return current
                if upstream in seen:
                    continue
                seen.add(upstream)
                found = visit(upstream)
                if found is not None:
                    return found
            return None

        last = visit(name)
        if last is not None:
            raise DependencyError(
                f"circular dependency between ensembles: {name} -> ... -> {last} -> {name}"
            )


def composing_configs(
    name: str,
    config: Any,
    loads: Mapping[str, object],
    models: Mapping[str, ModelEntry],
) -> dict[str, ModelConfig]:
    """Check ensemble ``name`` (``config``: its ``inference.ModelConfig``) against its
    composing models once their loads are done, as Triton's dependency graph does, and
    validate it against their completed configs.

    :param loads: each composing model (not the ensemble itself) → what its load returned
        (its entry, None when it is not in any repository, or the exception it raised).
    :param models: the manager's entries.
    :returns: each composing model's config (its highest ready version's).
    :raises DependencyError: with Triton's message.
    """
    missing = [
        d
        for d, result in loads.items()
        if result is None or (isinstance(result, BaseException) and d not in models)
    ]
    if missing:
        raise DependencyError(
            f"ensemble {name} contains models that are not available or ambiguous: "
            + ", ".join(sorted(missing))
        )
    required: dict[str, set[int]] = {}
    for step in config.ensemble_scheduling.step:
        required.setdefault(step.model_name, set()).add(int(step.model_version))
    composing: dict[str, ModelConfig] = {}
    for dep in loads:
        entry = models[dep]
        ready = _ready_versions(name, dep, entry)
        for version in sorted(required[dep]):
            if version != -1 and version not in ready:
                raise DependencyError(
                    f"ensemble '{name}' depends on '{dep}' whose required version "
                    f"{version} is not loaded."
                )
        composing[dep] = entry.versions[ready[-1]].config  # type: ignore[assignment]
    try:
        validate_with_composing(config, {d: c.raw for d, c in composing.items()})
    except DependencyError:
        raise
    except TritonXError as exc:
        raise DependencyError(exc.message) from exc
    return composing


def _ready_versions(name: str, dep: str, entry: ModelEntry) -> list[int]:
    """The ready versions of composing model ``dep`` of ensemble ``name`` (at least one)."""
    ready = entry.ready_versions()
    if entry.invalid and entry.error:
        raise DependencyError(
            f"ensemble '{name}' depends on '{dep}' which is not valid. Model '{dep}' "
            f"failed with error: {entry.error}"
        )
    if not ready:
        reason = entry.error or "".join(
            f"version {v.version} is at {v.state.value} state: {v.reason};"
            for v in entry.versions.values()
            if v.reason and v.reason != UNLOADED_REASON
        )
        message = f"ensemble '{name}' depends on '{dep}' which has no loaded version."
        if reason:
            message += f" Model '{dep}' loading failed with error: {reason}"
        raise DependencyError(message)
    return ready
