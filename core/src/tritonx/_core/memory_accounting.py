"""What ``--model-memory-budget`` bills, and what holds it (:mod:`tritonx._core.residency`).

Memory is measured, not declared: the resident set (``/proc/<pid>/statm``) of the server
process and of every process it started, found through ``/proc/<pid>/task/*/children``.
Three rules say what of it the budget bills:

1. **Process-wide helpers are the server's.** The helper processes Python's
   :mod:`multiprocessing` starts once for the whole server, the first time a backend asks
   for them (the forkserver the Python backend forks its workers from, and the resource
   tracker), are found by their pids as the standard library records them in the server
   process (:func:`helper_pids`). Their own resident memory is left out of every
   measurement (the processes forked from them, the workers, stay in): it is neither a
   model's footprint nor billed to the budget. :attr:`Reading.helpers` reports it.
2. **Memory the server holds with no model loaded is the server's.** The budget's zero
   (:attr:`MemoryAccount.base`) is the measured total at the latest moment no model was
   loaded: at start-up, before any model loads, and again before each load that finds no
   model loaded (after a garbage collection and ``malloc_trim``); what the listeners add
   when they start after models pinned with ``--load-model`` moves it up too. What the listeners, the
   libraries a backend imported, and the allocator's arenas hold then is no loaded model's;
   with no model loaded, nothing is billed.
3. **The rest is billed.** The budget bounds the total's growth over that zero
   (:meth:`MemoryAccount.used`): the footprints of the loaded models (a model's footprint is
   what the total grew by across its load; loads are serialized under a budget, so the
   growth is theirs) and the *unattributed remainder*, the growth no footprint accounts
   for (what models allocated after their load, what an unload left behind, a library
   the first model of a backend imported while others stayed loaded). The remainder
   cannot accumulate past the next moment no model is loaded: rule 2 moves the zero there.
   What is billed is never less than the loaded models' footprints: a zero measured while
   transient memory was held (a large gRPC message, received whole before its model loads,
   in flight) is higher than what the server holds once it is freed, and would otherwise
   hide that much of the models' memory until the zero moves again.

A refusal names what holds the budget (:func:`describe_holders`): each loaded model with its
footprint, the unattributed remainder, and what is not billed (the zero and the helpers).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
MiB = 1 << 20


def memory_measurable() -> bool:
    """Whether :func:`read` can measure this process and its children (Linux /proc)."""
    main = Path(f"/proc/self/task/{os.getpid()}/children")
    return Path("/proc/self/statm").is_file() and main.is_file()


def _rss(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return 0  # exited meanwhile
    return int(fields[1]) * _PAGE


def _children(pid: int) -> list[int]:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tasks:
        try:
            out.extend(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return out


def helper_pids() -> frozenset[int]:
    """The pids of the process-wide helpers :mod:`multiprocessing` started for this process:
    its forkserver and its resource tracker (empty until a backend starts them).

    Read from the standard library's own records of them (``ForkServer._forkserver_pid``,
    ``ResourceTracker._pid``, the same in CPython 3.8 to 3.13); a Python that keeps them
    elsewhere yields none, and their memory is then billed as the first model's."""
    pids: set[int] = set()
    for module, holder, attribute in (
        ("multiprocessing.forkserver", "_forkserver", "_forkserver_pid"),
        ("multiprocessing.resource_tracker", "_resource_tracker", "_pid"),
    ):
        loaded = sys.modules.get(module)
        pid = getattr(getattr(loaded, holder, None), attribute, None)
        if isinstance(pid, int) and pid > 0:
            pids.add(pid)
    return frozenset(pids)


@dataclass(frozen=True)
class Reading:
    """One measurement of the server's memory.

    :ivar total: resident bytes of the server and all its descendants, the helpers' own
        left out (rule 1).
    :ivar helpers: resident bytes of the helpers themselves (their descendants not
        included).
    """

    total: int
    helpers: int


def read(pid: int | None = None) -> Reading:
    """Measure process ``pid`` (default: this one) and its descendants (rule 1)."""
    helpers = helper_pids() if pid is None else frozenset()
    stack = [os.getpid() if pid is None else pid]
    seen: set[int] = set()
    total = helper_bytes = 0
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in helpers:
            helper_bytes += _rss(current)
        else:
            total += _rss(current)
        stack.extend(_children(current))
    return Reading(total, helper_bytes)


def tree_rss(pid: int | None = None) -> int:
    """Resident bytes of process ``pid`` (default: this one) and all its descendants, the
    process-wide helpers of this process left out (:func:`read`)."""
    return read(pid).total


class MemoryAccount:
    """The budget's zero and what it bills (rules 2 and 3 of the module docstring)."""

    def __init__(self) -> None:
        #: the measured total the last time no model was loaded (the budget's zero)
        self.base = 0
        #: the helpers' resident bytes at the last measurement
        self.helpers = 0
        #: what :meth:`used` last returned (what a refusal's breakdown adds up to)
        self.last_used = 0

    def rebase(self) -> None:
        """No model is loaded: what the server holds now is its own (the zero moves here)."""
        reading = read()
        self.base, self.helpers = reading.total, reading.helpers

    @contextlib.contextmanager
    def servers_own(self) -> Iterator[None]:
        """What the total grows by inside this block is the server's own, whatever is loaded
        (the listeners, started after the pinned models loaded): the zero moves up by it."""
        before = self.total()
        yield
        self.base += max(0, self.total() - before)

    def total(self) -> int:
        """The measured total now (helpers left out)."""
        reading = read()
        self.helpers = reading.helpers
        return reading.total

    def used(self, any_loaded: bool, footprints: int = 0) -> int:
        """Bytes billed to the budget: the total's growth over the zero, and never less than
        ``footprints`` (the loaded models' footprints: a zero measured while transient memory
        was held, such as a large request in flight, would otherwise hide them once that
        memory is freed); 0 with no model loaded (then everything is the server's own)."""
        self.last_used = max(0, footprints, self.total() - self.base) if any_loaded else 0
        return self.last_used


def _mib(size: int) -> str:
    return f"{size / MiB:.1f} MiB"


def describe_holders(
    loaded: Iterable[str],
    footprints: Mapping[str, int],
    reasons: Mapping[str, str],
    account: MemoryAccount | None,
) -> str:
    """What holds the budgets, for a refusal: each loaded model (with a memory budget its
    footprint; why it stays, from ``reasons``), and with a memory budget (``account``) the
    unattributed remainder of what :meth:`MemoryAccount.used` last returned and what is
    not billed (the zero, the helpers).

    >>> account = MemoryAccount()
    >>> account.base, account.helpers, account.last_used = 80 * MiB, 48 * MiB, 53 * MiB
    >>> text = describe_holders(["b", "a"], {"a": 25 * MiB, "b": 25 * MiB}, {"a": "pinned"}, account)
    >>> for part in text.split("; "):
    ...     print(part)
    in use: 'a' 25.0 MiB (pinned), 'b' 25.0 MiB, unattributed 3.0 MiB
    not billed: 80.0 MiB the server held with no model loaded, 48.0 MiB of multiprocessing helpers
    >>> describe_holders(["a"], {}, {"a": "pinned"}, None)
    "loaded: 'a' (pinned)"
    """
    models = sorted(loaded)
    parts: list[str] = []
    for model in models:
        size = f" {_mib(footprints.get(model, 0))}" if account is not None else ""
        why = reasons.get(model)
        parts.append(f"'{model}'{size}" + (f" ({why})" if why else ""))
    if account is None:
        return "loaded: " + (", ".join(parts) if parts else "no model")
    remainder = max(0, account.last_used - sum(footprints.get(m, 0) for m in models))
    parts.append(f"unattributed {_mib(remainder)}")
    not_billed = f"{_mib(account.base)} the server held with no model loaded"
    if account.helpers:
        not_billed += f", {_mib(account.helpers)} of multiprocessing helpers"
    return f"in use: {', '.join(parts)}; not billed: {not_billed}"
