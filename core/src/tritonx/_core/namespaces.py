"""Model namespaces (``--model-namespacing``): the rules of Triton's model identifiers.

Groundwork for issue #49 part B: the model manager does not use this module yet (the flag is
still refused by ``_runtime.settings_check``). It holds the resolution rules of Triton's
``ModelRepositoryManager`` so that the manager can key its models by :class:`ModelId`:

* each repository is a namespace (its path); with namespacing off every namespace is ``""``
  and an identifier prints as the bare name (Triton's ``ModelIdentifier::str``);
* a request names a model without a namespace: :meth:`GlobalMap.find` gives the one
  identifier of that name, or Triton's errors (unknown; ambiguous: the "ambiguity" message);
  Python BLS calls go through the same lookup (Triton has no namespace in its request API);
* an ensemble step resolves in the ensemble's own namespace first, else to the one model of
  that name anywhere (:meth:`GlobalMap.resolve_step`, Triton's fuzzy ``FindNode``); a step
  that did not resolve exactly is resolved again when a model of its name appears
  (Triton's ``missing_nodes_``);
* the load and unload APIs act on every namespace's model of the name;
* per-model metrics get a ``namespace`` label (the repository path) only when namespacing
  is on (:func:`metric_labels`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tritonx.errors import TritonXError, invalid_arg, not_found
from tritonx.repository import Repository

#: Triton's per-model metric label of the namespace (``kMetricsLabelModelNamespace``)
NAMESPACE_LABEL = "namespace"


@dataclass(frozen=True, order=True)
class ModelId:
    """A model's identity: its namespace (a repository path; ``""`` without namespacing)
    and its name."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}::{self.name}" if self.namespace else self.name


def namespace_of(repo: Repository, namespacing: bool) -> str:
    """The namespace of the models of ``repo``: its path with namespacing on, else ``""``."""
    return repo.url if namespacing else ""


def scan_ids(
    listed: Iterable[tuple[Repository, Iterable[str]]], namespacing: bool
) -> tuple[dict[ModelId, Repository], dict[ModelId, list[str]]]:
    """The models of every repository (``(repository, names it lists)``) by identifier, and
    the identifiers found in two or more repositories (with their URLs), which Triton does
    not serve. With namespacing on no identifier can repeat: each repository is its own
    namespace."""
    found: dict[ModelId, list[Repository]] = {}
    for repo, names in listed:
        namespace = namespace_of(repo, namespacing)
        for name in names:
            found.setdefault(ModelId(namespace, name), []).append(repo)
    unique = {mid: repos[0] for mid, repos in found.items() if len(repos) == 1}
    duplicates = {mid: [r.url for r in repos] for mid, repos in found.items() if len(repos) > 1}
    return unique, duplicates


@dataclass
class GlobalMap:
    """Triton's global map: each model name and the identifiers of the models known (polled)
    under it."""

    ids: dict[str, set[ModelId]] = field(default_factory=dict)

    def add(self, mid: ModelId) -> None:
        """``mid`` is known (a load polled it)."""
        self.ids.setdefault(mid.name, set()).add(mid)

    def discard(self, mid: ModelId) -> None:
        """``mid`` is no longer known (removed from the repositories and unloaded)."""
        known = self.ids.get(mid.name)
        if known is not None:
            known.discard(mid)
            if not known:
                del self.ids[mid.name]

    def named(self, name: str) -> list[ModelId]:
        """Every identifier known under ``name`` (the load and unload APIs act on all)."""
        return sorted(self.ids.get(name, ()))

    def find(self, name: str) -> ModelId:
        """The one model a request naming ``name`` goes to (Triton's
        ``FindModelIdentifier``): INVALID_ARG when none or several are known."""
        known = self.ids.get(name)
        if known is None:
            raise invalid_arg(f"Request for unknown model: '{name}' is not found")
        if not known:
            raise not_found(f"Identifier of model '{name}' is not found in global map")
        if len(known) > 1:
            raise ambiguous(name, len(known))
        return next(iter(known))

    def resolve_step(self, ensemble: ModelId, step: str) -> tuple[ModelId | None, bool]:
        """The model an ensemble step naming ``step`` uses: the one in the ensemble's own
        namespace, else the only one of that name; None when neither is known. The flag
        says whether it resolved in the ensemble's namespace (if not, the step is resolved
        again whenever a model named ``step`` appears)."""
        preferred = ModelId(ensemble.namespace, step)
        known = self.ids.get(step, set())
        if preferred in known:
            return preferred, True
        if len(known) == 1:
            return next(iter(known)), False
        return None, False


def ambiguous(name: str, count: int) -> TritonXError:
    """Triton's error for a request naming a model known in ``count`` namespaces."""
    return invalid_arg(
        f"There are {count} identifiers of model '{name}' in global map, model namespace "
        "must be provided to resolve ambiguity."
    )


def unresolved_steps(ensemble: ModelId, names: Iterable[str]) -> TritonXError:
    """Triton's error for an ensemble whose steps name models that are missing or known in
    several namespaces none of which is the ensemble's."""
    listed = ", ".join(sorted(set(names)))
    return invalid_arg(
        f"ensemble {ensemble} contains models that are not available or ambiguous: {listed}"
    )


def metric_labels(mid: ModelId) -> Mapping[str, str]:
    """The labels a model's per-model metrics start with: ``namespace`` (only with
    namespacing on), then ``model`` (``version`` and tags follow)."""
    if mid.namespace:
        return {NAMESPACE_LABEL: mid.namespace, "model": mid.name}
    return {"model": mid.name}
