"""Many models in little memory: load on first request, budgets, idle unload.

With ``--model-load-on-demand`` a request for a model that is in a repository but not
loaded (an inference, its metadata or config) loads it first: the model manager's lookup
raises :class:`~tritonx.errors.NotLoaded`, the caller awaits :meth:`Residency.ensure` and looks again.
Concurrent requests for one model share one load, bounded by
``--model-load-on-demand-timeout-secs``; a name in no repository gets Triton's unknown-model
error without a load attempt, and without a read of the repositories: the names their last
read listed answer it (:meth:`ModelManager.listed`; read again by a poll, the index, load
and unload APIs, or once ``--unknown-model-rescan-secs`` have passed); a failed load fails
every request waiting for it, and the next attempt waits for a back-off that doubles with
each failure (1 s up to :data:`MAX_BACKOFF`).

Budgets (``--max-loaded-models``, ``--model-memory-budget``): loads run one at a time;
before one, the least recently used models that may go are unloaded until the new one fits;
after it, again if it did not fit its estimate. A model may go unless it is pinned (listed
with ``--load-model``, or its config has the parameter ``tritonx_pinned: "true"``), a
request is in flight on it or a live sequence holds it, a request is waiting for its load,
or a loaded ensemble uses it. When every loaded model is busy the load waits for one to
become idle, up to the request's timeout; when none could ever go, it fails at once:
UNAVAILABLE, naming the budget and what holds it.

Against thrash (requests cycling over more models than the budgets hold, each one loading
its model and unloading another): a model loaded less than ``--model-min-residency-secs``
ago is not unloaded to make room for a request's model. When only such models could make
room, the request is refused at once (UNAVAILABLE, saying when the next one may go; counted
in ``tritonx_model_min_residency_refusals_total``), before any read of the repositories or
load: requests can cause no more than about N / ``--model-min-residency-secs`` loads a
second (N: the models the budgets hold). The load API is not held back (an operator's load
unloads what it must).

Memory is measured, not declared (:mod:`~tritonx._core.memory_accounting` has the rules):
the resident set of the server and of every process it started (a python model's workers),
through ``/proc``, less the process-wide helpers of Python's multiprocessing (a forkserver,
a resource tracker: the server's, found by their pids). A model's footprint is what that
total grew by across its load (loads are serialized under a budget, so the growth is
theirs); the memory budget bounds the total's growth over what it was the last time no
model was loaded (at start-up, and before each load that finds none loaded), billed at no
less than the loaded models' footprints: memory the server holds with no model loaded is
never billed, memory the allocator keeps after an unload counts until no model is loaded.
A refusal for want of room lists what holds the budgets: each loaded model, its footprint
and why it stays, and the unattributed remainder.

``--model-idle-unload-secs`` unloads models no request used for that long (same rules).

A model this policy unloads keeps Triton's per-model counters (``nv_inference_*``: they stay
on ``/metrics`` and its next load continues them); an explicit unload drops them, as Triton's.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from tritonx._core.memory_accounting import MemoryAccount, describe_holders, tree_rss
from tritonx._dataplane.heap import trim_heap_now, unmap_large_blocks
from tritonx.config import ServerSettings
from tritonx.errors import Code, TritonXError, not_found, unavailable

if TYPE_CHECKING:
    from tritonx._core.dependencies import DependencyGraph
    from tritonx._core.entries import ModelEntry

log = logging.getLogger("tritonx.residency")

T = TypeVar("T")

#: The longest wait (s) between two on-demand load attempts of a model that failed to load.
MAX_BACKOFF = 30.0
#: The config parameter that keeps a model loaded (``string_value: "true"``).
PINNED_PARAMETER = "tritonx_pinned"
#: Seconds between two looks at the busy models while a load waits for room.
ROOM_RECHECK = 1.0


class NoRoom(TritonXError):
    """The budgets have no room for a model (UNAVAILABLE, naming the budget and what holds
    it)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Code.UNAVAILABLE)


# ---------------------------------------------------------------------------------- residency


class Manager(Protocol):
    """What residency needs of the model manager that owns it
    (:class:`~tritonx._core.lifecycle.ModelManager`)."""

    #: the manager's models, by name (the same dict: residency reads it, never changes it)
    models: dict[str, ModelEntry]

    @property
    def scans(self) -> int:
        """Reads of every repository so far."""
        ...

    def scan(self, strict: bool = False) -> tuple[Mapping[str, object], Mapping[str, list[str]]]:
        """The models of every repository: those found once, and those found in several."""
        ...

    async def listed(self, name: str) -> bool:
        """Whether a repository lists ``name`` (as their last read found it)."""
        ...

    def resident(self, name: str) -> bool:
        """Whether ``name`` has a version loaded and READY."""
        ...

    async def load_named(self, name: str) -> None:
        """Load ``name`` as the repository API would; raises its errors."""
        ...

    async def evict(self, name: str) -> None:
        """Unload ``name``."""
        ...


def _loaded(entry: ModelEntry | None) -> bool:
    """Whether a version of ``entry`` has a scheduler (loading, ready or unloading)."""
    return entry is not None and any(v.scheduler is not None for v in entry.versions.values())


@dataclass
class _Failure:
    """A model's last failed on-demand load: its error, and when to try again."""

    error: TritonXError
    attempts: int
    retry_at: float


class Residency:
    """Which models are loaded, for ``--model-load-on-demand`` and the budgets (see the
    module docstring). Owned by the :class:`~tritonx._core.lifecycle.ModelManager`.

    :ivar loads: on-demand loads completed, by model (``tritonx_model_on_demand_loads_total``).
    :ivar load_failures: on-demand loads failed, by model.
    :ivar evictions: unloads by ``(model, reason)``, reason ``budget`` or ``idle``.
    :ivar waits: requests that waited for a load, by model; :ivar wait_seconds: how long.
    :ivar footprints: bytes each loaded model added to the server's memory at its load.
    :ivar min_residency_refusals: requests refused by ``--model-min-residency-secs``, by
        the model they asked for.
    """

    def __init__(self, manager: Manager, deps: DependencyGraph, settings: ServerSettings) -> None:
        self._manager = manager
        #: the manager's models (the same dict) and ensembles' dependency graph
        self._models = manager.models
        self._deps = deps
        self.timeout = settings.model_load_on_demand_timeout_secs
        self.max_models = settings.max_loaded_models
        self.memory_budget = settings.model_memory_budget
        self.idle_secs = settings.model_idle_unload_secs
        self.min_residency = settings.model_min_residency_secs
        self.pinned: set[str] = set()
        self.footprints: dict[str, int] = {}
        #: what each model's last load added, loaded or not (the estimates of later loads)
        self._measured: dict[str, int] = {}
        self.loads: Counter[str] = Counter()
        self.load_failures: Counter[str] = Counter()
        self.evictions: Counter[tuple[str, str]] = Counter()
        self.waits: Counter[str] = Counter()
        self.wait_seconds: dict[str, float] = {}
        self.min_residency_refusals: Counter[str] = Counter()
        #: the memory budget's zero and what it bills (:mod:`~tritonx._core.memory_accounting`)
        self.account = MemoryAccount()
        self._loading: dict[str, asyncio.Task[None]] = {}
        self._failures: dict[str, _Failure] = {}
        #: requests waiting in :meth:`ensure`, by model: their model is not evicted
        self._holds: Counter[str] = Counter()
        #: set when a request waiting for a load resumes (its model may go from then on)
        self._released = asyncio.Event()
        #: one load (or eviction round) at a time under a budget
        self._admission = asyncio.Lock()
        self._idle_task: asyncio.Task[None] | None = None

    @property
    def budgeted(self) -> bool:
        """Whether a budget limits the loaded models."""
        return bool(self.max_models or self.memory_budget)

    @property
    def scans(self) -> int:
        """Reads of every repository so far (``tritonx_model_repository_scans_total``)."""
        return self._manager.scans

    def start(self) -> None:
        """Measure the server's memory before models load; start the idle unloads."""
        if self.memory_budget:
            unmap_large_blocks()  # an unloaded model's buffers leave the resident set
            self.account.rebase()
        if self.idle_secs > 0:
            self._idle_task = asyncio.create_task(self._idle_loop(), name="tritonx-idle-unload")

    def servers_own(self) -> contextlib.AbstractContextManager[None]:
        """A block whose allocations are the server's (:meth:`MemoryAccount.servers_own`)."""
        return self.account.servers_own() if self.memory_budget else contextlib.nullcontext()

    async def stop(self) -> None:
        """Stop the idle unloads and the on-demand loads under way."""
        tasks = [t for t in (self._idle_task, *self._loading.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._idle_task = None

    # ------------------------------------------------------------------ the models

    def loaded_names(self) -> list[str]:
        """The models with a version loaded (loading, ready or unloading)."""
        return [name for name, entry in self._models.items() if _loaded(entry)]

    def loaded_count(self) -> int:
        """How many models are loaded."""
        return len(self.loaded_names())

    def _last_used(self, name: str) -> float:
        """When a request last asked for ``name`` (or it loaded), ``time.monotonic()``."""
        entry = self._models.get(name)
        return entry.last_used if entry is not None else 0.0

    def _young_for(self, name: str, now: float) -> float:
        """Seconds until ``name`` has been loaded ``--model-min-residency-secs`` (0: it
        has)."""
        entry = self._models.get(name)
        loaded_at = entry.loaded_at if entry is not None else 0.0
        return max(0.0, loaded_at + self.min_residency - now)

    def _in_use(self, name: str) -> bool:
        """Whether a request is in flight on ``name`` or a live sequence holds it."""
        entry = self._models.get(name)
        return entry is not None and any(
            v.scheduler is not None and v.scheduler.in_use for v in entry.versions.values()
        )

    def _used_by_loaded_ensemble(self, name: str) -> bool:
        """Whether a loaded ensemble has ``name`` among its composing models."""
        return any(_loaded(self._models.get(e)) for e in self._deps.users(name) if e != name)

    def _composing_closure(self, name: str) -> set[str]:
        """The composing models of ensemble ``name``, and theirs in turn."""
        out: set[str] = set()
        queue = [d for d in self._deps.of(name) if d != name]
        while queue:
            current = queue.pop()
            if current not in out:
                out.add(current)
                queue.extend(d for d in self._deps.of(current) if d != current)
        return out

    def _pinned_by_config(self, name: str) -> bool:
        """Whether ``name``'s config has the parameter ``tritonx_pinned: "true"``."""
        entry = self._models.get(name)
        for v in entry.versions.values() if entry is not None else ():
            if v.config is not None and v.scheduler is not None:
                param = v.config.raw.parameters.get(PINNED_PARAMETER)
                return param is not None and param.string_value.strip().lower() == "true"
        return False

    async def _drained_one(self, names: list[str], timeout: float) -> None:
        """Wait until a request in flight on one of ``names`` ends, or ``timeout`` s."""
        drains = [
            asyncio.ensure_future(v.scheduler.drain())
            for name in names
            if (entry := self._models.get(name)) is not None
            for v in entry.versions.values()
            if v.scheduler is not None and v.scheduler.inflight
        ]
        if not drains:
            await asyncio.sleep(timeout)  # held by live sequences: look again later
            return
        _, pending = await asyncio.wait(drains, timeout=timeout, return_when="FIRST_COMPLETED")
        for task in pending:
            task.cancel()

    def memory_used(self) -> int:
        """Bytes billed to ``--model-memory-budget``: the growth of the server's resident
        memory (workers included, multiprocessing's helpers not) over what it held the last
        time no model was loaded, at least the loaded models' footprints; 0 with no model
        loaded (:mod:`~tritonx._core.memory_accounting`)."""
        loaded = self.loaded_names()
        return self.account.used(bool(loaded), sum(self.footprints.get(n, 0) for n in loaded))

    # ------------------------------------------------------------------ on demand

    async def ensure(self, name: str) -> None:
        """Load ``name`` for a request that found it not loaded (shared by every request
        that waits for it); returns once it is loaded.

        :raises TritonXError: NOT_FOUND when no repository has it; UNAVAILABLE with the
            load's failure (also for the requests of the back-off period that follows it),
            after ``--model-load-on-demand-timeout-secs``, or when the budgets have no room
            (at once when only models loaded less than ``--model-min-residency-secs`` ago
            could make room).
        """
        if name not in self._loading:
            if self._manager.resident(name):
                return  # loaded since the request looked
            if not await self._manager.listed(name):  # (no read of the repositories)
                raise not_found(f"Request for unknown model: '{name}' is not found")
        loop = asyncio.get_running_loop()
        self._holds[name] += 1
        try:
            task = self._loading.get(name)
            if task is None:
                if self._manager.resident(name):
                    return  # loaded since the request looked
                failure = self._failures.get(name)
                if failure is not None and time.monotonic() < failure.retry_at:
                    raise failure.error
                refused = self.refusal(name)
                if refused is not None:
                    raise refused
                task = self._loading[name] = loop.create_task(
                    self._load(name), name=f"tritonx-on-demand-{name}"
                )
                task.add_done_callback(lambda done: self._loaded(name, done))
            began = time.monotonic()
            try:
                await asyncio.wait_for(asyncio.shield(task), self.timeout or None)
            except TimeoutError:
                self._waited(name, time.monotonic() - began)
                raise unavailable(
                    f"model '{name}' is not loaded after waiting {self.timeout:g} s "
                    "(--model-load-on-demand-timeout-secs)"
                ) from None
            except TritonXError as exc:
                if exc.code is not Code.NOT_FOUND:  # (no series for names in no repository)
                    self._waited(name, time.monotonic() - began)
                raise
            self._waited(name, time.monotonic() - began)
        except asyncio.CancelledError:
            task = self._loading.get(name) or task
            current = asyncio.current_task()
            if task is not None and task.cancelled() and current is not None:
                if not current.cancelling():  # the server stopped the load: it exits
                    raise TritonXError("Server exiting", Code.UNAVAILABLE) from None
            raise
        finally:
            self._holds[name] -= 1
            if not self._holds[name]:
                del self._holds[name]
                self._released.set()

    def _waited(self, name: str, seconds: float) -> None:
        self.waits[name] += 1
        self.wait_seconds[name] = self.wait_seconds.get(name, 0.0) + seconds

    def _loaded(self, name: str, task: asyncio.Task[None]) -> None:
        if self._loading.get(name) is task:
            del self._loading[name]
        if not task.cancelled():
            task.exception()  # retrieved here: the waiters may all have timed out

    async def _load(self, name: str) -> None:
        sources, duplicates = await asyncio.to_thread(self._manager.scan)
        if name not in sources and name not in duplicates:
            raise not_found(f"Request for unknown model: '{name}' is not found")
        log.info("loading model '%s' on demand", name)
        try:
            await self.admit(name, lambda: self._manager.load_named(name), protect=True)
        except NoRoom:
            raise  # the budgets' doing, not the model's: no back-off
        except TritonXError as exc:
            self.load_failures[name] += 1
            raise self._failed(name, exc) from None
        self._failures.pop(name, None)
        self.loads[name] += 1

    def _failed(self, name: str, exc: TritonXError) -> TritonXError:
        """Record ``name``'s failed load: the error its waiters (and the requests until the
        next attempt) get."""
        previous = self._failures.get(name)
        attempts = 1 if previous is None else previous.attempts + 1
        delay = min(MAX_BACKOFF, 2.0 ** (attempts - 1))
        error = unavailable(f"failed to load model '{name}' on demand: {exc.message.strip()}")
        self._failures[name] = _Failure(error, attempts, time.monotonic() + delay)
        log.error(
            "failed to load model '%s' on demand (attempt %d; the next one in %g s at the "
            "earliest): %s",
            name,
            attempts,
            delay,
            exc.message.strip(),
        )
        return error

    def forget_failure(self, name: str) -> None:
        """An explicit load of ``name`` ends its back-off."""
        self._failures.pop(name, None)

    # ------------------------------------------------------------------ budgets

    async def admit(
        self, name: str, load: Callable[[], Awaitable[T]], *, protect: bool = False
    ) -> T:
        """Run ``load`` (of ``name``) within the budgets: room made first, the model's
        footprint measured, and room made again should it not fit.

        :param protect: a request's load: models loaded less than
            ``--model-min-residency-secs`` ago are not unloaded for it."""
        if not self.budgeted:  # (concurrent loads: each footprint may include others')
            before = tree_rss()
            result = await load()
            self._measure(name, before)
            return result
        try:  # (bounded: a model loading another from its initialize() waits on itself)
            await asyncio.wait_for(self._admission.acquire(), self.timeout or None)
        except TimeoutError:
            raise NoRoom(
                f"cannot load model '{name}': other loads kept the budgets busy for "
                f"{self.timeout:g} s"
            ) from None
        try:
            if self.memory_budget and not self.loaded_names():
                await self._give_back()  # what the server holds now is its own: the zero
                self.account.rebase()
            await self._make_room(name, not self._manager.resident(name), protect)
            before = tree_rss()
            result = await load()
            self._measure(name, before)
            await self._fit(name, protect)
            return result
        finally:
            self._admission.release()

    def _measure(self, name: str, before: int) -> None:
        """``name`` loaded: its footprint (the growth since ``before``), pinned by its config?"""
        if not self._manager.resident(name):
            return
        self.footprints[name] = self._measured[name] = max(0, tree_rss() - before)
        if self._pinned_by_config(name):
            self.pinned.add(name)

    def _estimate(self, name: str) -> int:
        """Bytes a load of ``name`` is expected to add: what its last load added, else the
        median of what every model's last load added (nothing measured yet: nothing)."""
        known = self._measured.get(name)
        if known is not None:
            return known
        return int(statistics.median(self._measured.values())) if self._measured else 0

    def _over(self, adding: int, extra_bytes: int) -> str | None:
        """Which budget ``adding`` more models (``extra_bytes`` more) would exceed, or None
        (the memory in use measured in any case: a refusal's breakdown adds it up)."""
        used = self.memory_used() if self.memory_budget else 0
        if self.max_models and len(self.loaded_names()) + adding > self.max_models:
            return f"--max-loaded-models {self.max_models}"
        if self.memory_budget and used + extra_bytes > self.memory_budget:
            return f"--model-memory-budget {self.memory_budget} bytes ({used} bytes in use)"
        return None

    def _may_go(self, name: str, keep: set[str]) -> bool:
        """Whether ``name`` may be unloaded to make room, once it is idle."""
        return not (name in keep or name in self.pinned or self._used_by_loaded_ensemble(name))

    def _idle(self, name: str) -> bool:
        """No request in flight on ``name``, none waiting to resume with it, and no live
        sequence on it."""
        return name not in self._holds and not self._in_use(name)

    def _victim(self, keep: set[str], protect: bool) -> tuple[str | None, list[str], list[str]]:
        """The least recently used model that may go now, the models that may go once
        idle, and (``protect``) those held back only by ``--model-min-residency-secs``."""
        candidates = [n for n in self.loaded_names() if self._may_go(n, keep)]
        young: list[str] = []
        if protect and self.min_residency > 0:
            now = time.monotonic()
            young = [n for n in candidates if self._young_for(n, now) > 0]
            if young:
                candidates = [n for n in candidates if n not in young]
        idle = [n for n in candidates if self._idle(n)]
        if not idle:
            return None, candidates, young
        return min(idle, key=self._last_used), candidates, young

    def refusal(self, name: str) -> NoRoom | None:
        """The refusal a request's load of ``name`` (not loaded) would meet at once, as
        things stand: only models loaded less than ``--model-min-residency-secs`` ago could
        make room. Checked before the load is started (it would read the repositories); the
        load itself checks again."""
        if self.min_residency <= 0 or not self.budgeted:
            return None
        budget = self._over(1, self._estimate(name))
        if budget is None:
            return None
        victim, candidates, young = self._victim({name}, protect=True)
        if victim is None and not candidates and young:
            return self._too_young(name, budget, young, {name})
        return None

    def _too_young(self, name: str, budget: str, young: list[str], keep: set[str]) -> NoRoom:
        """The refusal of ``name``'s load: only ``young`` models could make room."""
        now = time.monotonic()
        soonest = min(self._young_for(n, now) for n in young)
        self.min_residency_refusals[name] += 1
        return NoRoom(
            f"cannot load model '{name}': {budget} reached and every loaded model that could "
            f"be unloaded was loaded less than {self.min_residency:g} s ago "
            f"(--model-min-residency-secs); the first may be unloaded in {soonest:.2f} s; "
            + self._holders(name, keep, young)
        )

    def _holders(self, name: str, keep: set[str], young: list[str]) -> str:
        """What holds the budgets as a load of ``name`` finds them (``keep``: the models
        it keeps; ``young``: those held back by ``--model-min-residency-secs``): each loaded
        model, its footprint and why it stays; the unattributed remainder; what is not
        billed (:func:`~tritonx._core.memory_accounting.describe_holders`)."""
        loaded = self.loaded_names()
        reasons = {n: self._why_kept(n, name, keep, young) for n in loaded}
        account = self.account if self.memory_budget else None
        return describe_holders(loaded, self.footprints, reasons, account)

    def _why_kept(self, model: str, name: str, keep: set[str], young: list[str]) -> str:
        """Why loaded ``model`` is not unloaded for ``name``'s load ("" when it may go)."""
        if model == name:
            return "this load"
        if model in keep:
            return f"used by '{name}'"
        if model in self.pinned:
            return "pinned"
        if self._used_by_loaded_ensemble(model):
            return "used by a loaded ensemble"
        if model in self._holds:
            return "requests wait for it"
        if self._in_use(model):
            return "serving requests"
        if model in young:
            return "loaded less than --model-min-residency-secs ago"
        return ""

    async def _make_room(self, name: str, adding: bool, protect: bool) -> None:
        """Unload models until ``name`` fits (its memory estimated: with nothing left to
        unload, the load is tried and :meth:`_fit` judges what it measured)."""
        count = 1 if adding else 0
        await self._evict_until(
            lambda: self._over(count, self._estimate(name)),
            {name},
            name,
            protect,
            measured=lambda: self._over(count, 0),
        )

    async def _fit(self, name: str, protect: bool) -> None:
        """After ``name``'s load: unload others until it fits; if it cannot, unload it."""
        keep = {name, *self._composing_closure(name)}
        try:
            await self._evict_until(lambda: self._over(0, 0), keep, name, protect)
        except NoRoom:
            log.warning("unloading '%s' again: it does not fit the budgets", name)
            self._keep_stats(name)
            await self._manager.evict(name)
            self.footprints.pop(name, None)
            if self.memory_budget:
                await self._give_back()
            raise

    async def _evict_until(
        self,
        over: Callable[[], str | None],
        keep: set[str],
        name: str,
        protect: bool,
        *,
        measured: Callable[[], str | None] | None = None,
    ) -> None:
        """Unload the least recently used idle models while ``over()`` names a budget;
        with none to unload, wait for one to go idle, or give up (:class:`NoRoom`): at once
        when only models loaded less than ``--model-min-residency-secs`` ago could go
        (``protect``), else unless ``measured()`` (the budgets without estimates) is None:
        then the load is tried."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout if self.timeout else None
        waited = False
        while (budget := over()) is not None:
            victim, candidates, young = self._victim(keep, protect)
            if victim is not None:
                await self.evict(victim, "budget", budget)
                continue
            if not candidates:
                if young:
                    raise self._too_young(name, budget, young, keep)
                if measured is not None and measured() is None:
                    return  # only the estimate does not fit: try
                raise NoRoom(
                    f"cannot load model '{name}': {budget} reached and no loaded model can be "
                    "unloaded; " + self._holders(name, keep, young)
                )
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                raise NoRoom(
                    f"cannot load model '{name}': {budget} reached and every loaded model "
                    f"that could be unloaded kept serving requests for {self.timeout:g} s; "
                    + self._holders(name, keep, young)
                )
            if not waited:
                waited = True
                log.info(
                    "%s reached: waiting for a loaded model to go idle to load '%s' (%s)",
                    budget,
                    name,
                    ", ".join(sorted(candidates)),
                )
            await self._wait_idle(candidates, min(ROOM_RECHECK, left or ROOM_RECHECK))

    async def _wait_idle(self, names: list[str], timeout: float) -> None:
        """Wait until a request on one of ``names`` ends, a request waiting for a load
        resumes, or ``timeout`` s."""
        self._released.clear()
        waits = [
            asyncio.ensure_future(self._drained_one(names, timeout)),
            asyncio.ensure_future(self._released.wait()),
        ]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()

    async def evict(self, name: str, reason: str, budget: str = "") -> None:
        """Unload ``name`` to make room (``reason`` ``budget``) or because it idled."""
        if reason == "budget":
            log.info("unloading model '%s' (least recently used) to stay within %s", name, budget)
        else:
            log.info("unloading model '%s': no request for %g s", name, self.idle_secs)
        self._keep_stats(name)
        await self._manager.evict(name)
        self.evictions[(name, reason)] += 1
        self.footprints.pop(name, None)
        if self.memory_budget:
            await self._give_back()

    async def _give_back(self) -> None:
        """After an unload, under a memory budget: free what only reference cycles still
        hold (an instance's buffers), then hand the freed heap back to the system, so the
        next measurement sees it gone."""
        gc.collect()
        await trim_heap_now()

    def _keep_stats(self, name: str) -> None:
        """``name`` is about to be unloaded by this policy: its loaded versions keep their
        statistics (Triton's per-model counters stay on ``/metrics`` and its next load goes
        on counting in them: :func:`~tritonx._core.entries.merge_versions`)."""
        entry = self._models.get(name)
        for v in entry.versions.values() if entry is not None else ():
            if v.scheduler is not None:
                v.kept_stats = v.scheduler.stats

    def forget(self, name: str) -> None:
        """``name`` was unloaded (the repository API, a poll): no footprint any more, and
        no statistics kept from an eviction (its counters go, as Triton's do)."""
        self.footprints.pop(name, None)
        entry = self._models.get(name)
        for v in entry.versions.values() if entry is not None else ():
            v.kept_stats = None

    # ------------------------------------------------------------------ idle unload

    async def _idle_loop(self) -> None:
        while True:
            manager = self._manager
            now = time.monotonic()
            wake = now + self.idle_secs
            for name in self.loaded_names():
                if not self._may_go(name, set()):
                    continue
                due = self._last_used(name) + self.idle_secs
                if due > now:
                    wake = min(wake, due)
                elif self._idle(name):
                    with contextlib.suppress(TritonXError):
                        async with self._admission:
                            if manager.resident(name) and self._idle(name):
                                if self._last_used(name) + self.idle_secs <= time.monotonic():
                                    await self.evict(name, "idle")
                else:
                    wake = min(wake, now + ROOM_RECHECK)
            await asyncio.sleep(max(0.05, wake - time.monotonic()))
