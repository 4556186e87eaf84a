"""``tritonx check``: what ``tritonx serve`` would make of a repository, without serving.

Every model goes through the load pipeline's own steps up to the point where instances would
start (``ModelManager.check``: localize, read the config, run the repository agents' LOAD
actions, resolve the backend, auto-complete, normalize, validate, select versions; the
agents then get LOAD_FAIL and the localized copy is released); ensembles are then
validated against their composing models' completed configs (``validate_with_composing``).
No instance is loaded and no backend session opened (a backend's auto-complete may read the
model file, as at load, but builds nothing: ``AutoCompleteContext.check_only``). Each backend
may add notes about a model (``Backend.check_notes``: e.g. the python backend says whether a
model's environment is cached, to build or failing), shown in a ``Notes`` column and as
``"notes"`` in the JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonx._core.ensemble_config import composing_models, is_ensemble, validate_with_composing
from tritonx._core.lifecycle import ModelManager
from tritonx._core.status import DUPLICATE_REASON
from tritonx.config import config_to_json_dict
from tritonx.datatypes import DataType
from tritonx.errors import TritonXError
from tritonx.proto import model_config_pb2


@dataclass
class CheckResult:
    """One model: its completed config and the versions it would load, or why it fails."""

    name: str
    repository: str = ""
    versions: list[int] = field(default_factory=list)
    error: str = ""
    config: Any = None  # inference.ModelConfig, completed and normalized
    #: the backend's notes (``Backend.check_notes``), e.g. ``{"environment": "cached (...)"}``
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.error

    def notes_text(self) -> str:
        """The notes as one table cell: ``key: value; key: value`` ("" without notes)."""
        return "; ".join(f"{key}: {value}" for key, value in self.notes.items())

    def summary(self) -> dict[str, str]:
        """The table cells: backend/platform, max batch size, inputs, outputs, instances."""
        c = self.config
        if c is None:
            return {}
        kinds = model_config_pb2.ModelInstanceGroup.Kind
        groups = ", ".join(
            f"{g.count}x{kinds.Name(g.kind)}" + (f" gpus {list(g.gpus)}" if g.gpus else "")
            for g in c.instance_group
        )
        return {
            "backend": "/".join(p for p in (c.platform, c.backend) if p) or "-",
            "max_batch_size": str(c.max_batch_size),
            "inputs": ", ".join(_tensor(t) for t in c.input) or "-",
            "outputs": ", ".join(_tensor(t) for t in c.output) or "-",
            "instances": groups or "-",
        }

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "repository": self.repository,
            "status": "OK" if self.ok else "ERROR",
            "versions": self.versions,
        }
        if self.error:
            out["error"] = self.error
        out["notes"] = dict(self.notes)
        if self.config is not None:
            out["config"] = config_to_json_dict(self.config)
        return out


def _tensor(t: Any) -> str:
    datatype = DataType.from_config(model_config_pb2.DataType.Name(t.data_type))
    return f"{t.name}:{datatype.value}[{','.join(str(d) for d in t.dims)}]"


async def check_repositories(manager: ModelManager) -> list[CheckResult]:
    """Check every model of the manager's repositories (raises when one cannot be read)."""
    sources, duplicates = manager.scan(strict=True)
    results: dict[str, CheckResult] = {}
    for name in sorted(set(sources) | set(duplicates)):
        if name in duplicates:
            results[name] = CheckResult(name, ", ".join(duplicates[name]), error=DUPLICATE_REASON)
            continue
        result = results[name] = CheckResult(name, sources[name].url)
        try:
            prepared = await manager.check(name, sources[name])
        except TritonXError as exc:
            result.error = exc.message
            continue
        result.config, result.versions = prepared.config, list(prepared.selected)
        result.notes = dict(prepared.notes)
    done: set[str] = set()
    for name in list(results):
        _check_ensemble(name, results, [], done)
    return [results[n] for n in sorted(results)]


def _check_ensemble(
    name: str, results: dict[str, CheckResult], path: list[str], done: set[str]
) -> None:
    """Validate an ensemble against its composing models (checked first, nested ones too)."""
    result = results[name]
    if name in done or not result.ok or result.config is None or not is_ensemble(result.config):
        return
    deps = composing_models(result.config)
    if name in deps:
        result.error = f"circular dependency between ensembles: {name} -> ... -> {name} -> {name}"
        done.add(name)
        return
    missing = sorted(d for d in deps if d not in results or results[d].error == DUPLICATE_REASON)
    if missing:
        result.error = (
            f"ensemble {name} contains models that are not available or ambiguous: "
            + ", ".join(missing)
        )
        done.add(name)
        return
    path.append(name)
    try:
        for dep in deps:
            if dep in path:
                result.error = (
                    f"circular dependency between ensembles: {dep} -> ... -> {name} -> {dep}"
                )
                return
            _check_ensemble(dep, results, path, done)
            if not results[dep].ok:
                result.error = (
                    f"ensemble '{name}' depends on '{dep}' which would fail to load: "
                    f"{results[dep].error}"
                )
                return
        try:
            validate_with_composing(result.config, {d: results[d].config for d in deps})
        except TritonXError as exc:
            result.error = exc.message
    finally:
        path.pop()
        done.add(name)
