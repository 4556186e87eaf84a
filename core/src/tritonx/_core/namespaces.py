"""Model namespaces (``--model-namespacing``): the rules of Triton's model identifiers.

The rules of Triton's ``ModelRepositoryManager``; the model manager keys its models by
:class:`ModelId` text (``<repository>::<name>``) when namespacing is on
(:class:`Namespaces`):

* each repository is a namespace (its path); with namespacing off every namespace is ``""``
  and an identifier prints as the bare name (Triton's ``ModelIdentifier::str``);
* a request names a model without a namespace: :meth:`GlobalMap.find` gives the one
  identifier of that name, or Triton's errors (unknown; ambiguous: the "ambiguity" message);
  Python BLS calls go through the same lookup (Triton has no namespace in its request API);
* an ensemble step resolves in the ensemble's own namespace first, else to the one model of
  that name the repositories list (:meth:`Namespaces.steps`, Triton's fuzzy ``FindNode``);
  a loaded ensemble whose steps would now resolve otherwise (a model of the name appeared in
  its namespace, the one it used is gone) is loaded again (Triton's ``missing_nodes_``);
* the load and unload APIs act on every namespace's model of the name;
* per-model metrics get a ``namespace`` label (:data:`NAMESPACE_LABEL`: the repository
  path) only when namespacing is on.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonx.errors import TritonXError, invalid_arg, not_found


class Polled(Protocol):
    """What :class:`Namespaces` reads and sets of a model entry (``_core.entries``)."""

    name: str
    namespace: str
    model: str
    versions: Any


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


class Namespaces:
    """What the model manager asks about namespaces with ``--model-namespacing`` on: its
    models are keyed by ``<repository>::<name>`` (:class:`ModelId`'s text).

    :param ids: every key the repositories listed → its identifier (kept up to date by
        :class:`~tritonx._core.repository_listing.RepositoryListing`).
    """

    def __init__(self, ids: Mapping[str, ModelId]) -> None:
        self.ids = ids
        #: the models known (polled by a load, until unloaded), by name
        self.known = GlobalMap()

    def id_of(self, key: str) -> ModelId:
        """The identifier of a key (a key no repository listed, a model loaded with load-API
        files, is a name without namespace, as Triton's)."""
        return self.ids.get(key) or ModelId("", key)

    def shown(self, key: str) -> str:
        """The name of the model a key stands for."""
        return self.id_of(key).name

    def keys(self, name: str, found: Iterable[str]) -> list[str]:
        """The keys among ``found`` of the models named ``name`` (every namespace: the load
        and unload APIs act on them all); ``[name]`` when there is none."""
        keys = sorted(k for k in found if k in self.ids and self.ids[k].name == name)
        return keys or [name]

    def request_key(self, name: str, models: Container[str]) -> str:
        """The key of the model a request naming ``name`` goes to: a key itself (an ensemble
        step's, :func:`step_model`), else the one model known under that name (Triton's
        errors when none or several are)."""
        if name in models and name in self.ids:
            return name
        return str(self.known.find(name))

    def steps(self, key: str, config: Any, found: Iterable[str]) -> dict[str, str]:
        """Each model an ensemble's steps name → the key of the model it uses: the one in
        the ensemble's namespace, else the only one of that name among ``found`` (the keys
        the repositories list); raises Triton's error for the names that resolve to none."""
        own = self.id_of(key)
        listed: dict[str, list[str]] = {}
        for k in found:
            mid = self.ids.get(k)
            if mid is not None:
                listed.setdefault(mid.name, []).append(k)
        resolved: dict[str, str] = {}
        missing: list[str] = []
        for step in config.ensemble_scheduling.step:
            name = step.model_name
            if name in resolved or name in missing:
                continue
            preferred = str(ModelId(own.namespace, name))
            candidates = listed.get(name, [])
            if preferred in candidates:
                resolved[name] = preferred
            elif len(candidates) == 1:
                resolved[name] = candidates[0]
            else:
                missing.append(name)
        if missing:
            raise unresolved_steps(own, missing)
        return resolved

    def adopt(self, entry: Polled) -> str:
        """A load polled ``entry``: it gets its namespace and name, and is known under that
        name (requests may then find it); returns the name."""
        mid = self.id_of(entry.name)
        entry.namespace, entry.model = mid.namespace, mid.name
        self.known.add(mid)
        return mid.name

    def moved(self, entry: Polled, found: Iterable[str], linked: tuple[str, ...]) -> bool:
        """Whether ensemble ``entry``'s steps resolve, among ``found``, to other models than
        the ``linked`` ones (or to none now)."""
        config = next((v.config.raw for v in entry.versions.values() if v.config), None)
        if config is None:
            return False
        try:
            resolved = self.steps(entry.name, config, found)
        except TritonXError:
            return True
        return tuple(dict.fromkeys(resolved.values())) != linked

    def stamp_steps(self, config: Any, resolved: Mapping[str, str]) -> None:
        """Write each step's resolved namespace into ``config`` (Triton's
        ``model_namespace``): the ensemble calls that model (:func:`step_model`)."""
        for step in config.ensemble_scheduling.step:
            step.model_namespace = self.id_of(resolved[step.model_name]).namespace


def step_model(step: Any) -> str:
    """The model an ensemble step calls: its key when the manager resolved it to a
    namespace (``model_namespace``), else its name."""
    if step.model_namespace:
        return str(ModelId(step.model_namespace, step.model_name))
    return step.model_name
