"""Triton's rate limiter (``--rate-limit=execution_count``, core ``rate_limiter.cc``).

Each instance group may declare ``rate_limiter { resources [ { name, count, global } ] priority }``.
Before an instance executes a batch it must hold its resources; resources are per device unless
``global``. A resource's pool is the largest count any single instance asks for (per device),
unless ``--rate-limit-resource=<name>:<count>[:<device>]`` sets it. Among instances waiting for
resources, the one with the lowest ``execution_count * max(priority, 1)`` goes first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from tritonx.errors import invalid_arg

GLOBAL = -1


@dataclass(eq=False)
class Ticket:
    """One instance's claim on the rate limiter."""

    needs: dict[tuple[str, int], int]
    priority: int
    executions: int = 0
    waiting: bool = False

    @property
    def score(self) -> int:
        return self.executions * max(self.priority, 1)


@dataclass
class RateLimiter:
    """Shared by every model of a server; a no-op when ``mode`` is ``off``."""

    mode: str = "off"
    overrides: dict[tuple[str, int], int] = field(default_factory=dict)
    _pools: dict[tuple[str, int], int] = field(default_factory=dict)
    _used: dict[tuple[str, int], int] = field(default_factory=dict)
    _globals: dict[str, bool] = field(default_factory=dict)
    _waiters: list[Ticket] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)

    @classmethod
    def from_settings(cls, mode: str, resources: Iterable[str]) -> RateLimiter:
        """Parse ``--rate-limit`` and ``--rate-limit-resource=<name>:<count>[:<device>]``."""
        overrides: dict[tuple[str, int], int] = {}
        for spec in resources:
            parts = spec.split(":")
            if len(parts) not in (2, 3) or not parts[0]:
                raise invalid_arg(
                    f"--rate-limit-resource '{spec}' is not <name>:<count>[:<device>]"
                )
            try:
                count = int(parts[1])
                device = int(parts[2]) if len(parts) == 3 else GLOBAL
            except ValueError:
                raise invalid_arg(
                    f"--rate-limit-resource '{spec}' is not <name>:<count>[:<device>]"
                ) from None
            overrides[(parts[0], device)] = count
        return cls(mode=mode, overrides=overrides)

    @property
    def enabled(self) -> bool:
        return self.mode == "execution_count"

    def register(
        self, resources: Iterable[tuple[str, int, bool]], device: int, priority: int
    ) -> Ticket:
        """An instance's ticket: ``resources`` are (name, count, global) of its group."""
        needs: dict[tuple[str, int], int] = {}
        with self._cond:
            for name, count, is_global in resources:
                prior = self._globals.setdefault(name, is_global)
                if prior != is_global:
                    raise invalid_arg(
                        f"Resource '{name}' is present as both global and device-specific resource "
                        "in the model configuration."
                    )
                key = (name, GLOBAL if is_global else device)
                needs[key] = needs.get(key, 0) + count
                pool = self.overrides.get(key, self.overrides.get((name, GLOBAL)))
                if pool is None:
                    self._pools[key] = max(self._pools.get(key, 0), needs[key])
                else:
                    self._pools[key] = pool
                    if needs[key] > pool:
                        raise invalid_arg(
                            f"Resource count for '{name}' is limited to {pool} which will prevent "
                            f"scheduling of one or more model instances, the minimum required count "
                            f"is {needs[key]}"
                        )
        return Ticket(needs, priority)

    def _available(self, ticket: Ticket) -> bool:
        return all(
            self._used.get(k, 0) + n <= self._pools.get(k, 0) for k, n in ticket.needs.items()
        )

    def acquire(self, ticket: Ticket) -> None:
        """Block until ``ticket``'s resources are free and it is the best waiting candidate."""
        if not self.enabled:
            return
        with self._cond:
            ticket.waiting = True
            self._waiters.append(ticket)
            try:
                while True:
                    if self._available(ticket):
                        ready = [t for t in self._waiters if self._available(t)]
                        if min(ready, key=lambda t: t.score) is ticket:
                            break
                    self._cond.wait()
                for key, n in ticket.needs.items():
                    self._used[key] = self._used.get(key, 0) + n
            finally:
                self._waiters.remove(ticket)
                ticket.waiting = False

    def release(self, ticket: Ticket) -> None:
        """Give back the resources held for one execution."""
        if not self.enabled:
            return
        with self._cond:
            ticket.executions += 1
            for key, n in ticket.needs.items():
                self._used[key] -= n
            self._cond.notify_all()
