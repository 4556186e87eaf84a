"""The scheduler seam: one protocol for every way a model version runs requests, and the
factory that picks the implementation from the model's config.

* no scheduling block: Triton's default scheduler (each free instance takes one request);
* ``dynamic_batching``: the dynamic batcher;
* ``sequence_batching``: the sequence batcher (``_core/sequence_scheduler.py``);
* ``platform: "ensemble"``: the ensemble scheduler (``_core/ensemble.py``), which calls the
  composing models through the ``ServerHandle``.

The data plane and the model lifecycle use only :class:`Scheduler`; new schedulers (sequence
batcher, ensembles) plug in here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from tritonx._core.batcher import DirectQueue, DynamicBatcher
from tritonx._core.ensemble import EnsembleScheduler
from tritonx._core.ensemble_config import is_ensemble
from tritonx._core.instances import InstanceScheduler
from tritonx._core.rate_limiter import RateLimiter
from tritonx._core.sequence_scheduler import SequenceScheduler, sequence_batcher
from tritonx._dataplane.stats import LatencyStats, ModelStats
from tritonx.backend import Backend, LoadContext, ModelInstance
from tritonx.config import ModelConfig
from tritonx.errors import Code, TritonXError
from tritonx.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from tritonx.handle import ServerHandle


class Scheduler(Protocol):
    """Runs the requests of one loaded model version."""

    #: whether responses are streamed (decoupled models)
    decoupled: bool
    #: the version's statistics (``/stats``, ``/metrics``)
    stats: ModelStats

    async def start(self) -> None:
        """Load whatever the scheduler runs on (instances); raise if that fails."""

    def submit(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Queue a validated request of a non-decoupled model; the future gets its response.
        Raises UNAVAILABLE when the queue is full."""

    def stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Queue a request of a decoupled model; yield its responses until the final one."""

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until no request is in flight; False if ``timeout`` passed first."""

    async def stop(self, timeout: float | None = None, error: TritonXError | None = None) -> bool:
        """Fail queued requests with ``error`` (default: Triton's "Server exiting"), stop and
        unload; False if executions outlived ``timeout`` (they were then aborted or
        abandoned, their requests failed)."""

    def is_ready(self) -> bool:
        """Whether the version can serve."""

    def not_ready_reason(self) -> str:
        """Why :meth:`is_ready` is False."""

    async def probe_ready(self) -> str | None:
        """Ask the instances' models whether they can serve (:meth:`ModelInstance.probe_ready`);
        None: ready, else the first reason."""

    def restarts(self) -> int:
        """How many times its instances restarted since it loaded (:attr:`ModelInstance.restarts`)."""

    @property
    def inflight(self) -> int:
        """Requests accepted and not yet answered."""

    @property
    def pending_count(self) -> int:
        """Requests accepted but not yet executing."""

    @property
    def in_use(self) -> bool:
        """Whether a request is in flight, or (sequence batching) a live sequence holds a
        slot: the version is not unloaded to make room for another model."""

    @property
    def instances(self) -> Sequence[ModelInstance | None]:
        """The loaded instances (None while one loads or after it unloaded)."""


def make_scheduler(
    config: ModelConfig,
    version: int,
    backend: Backend | None,
    contexts: Sequence[LoadContext],
    passive: Sequence[bool],
    rate_limiter: RateLimiter,
    latency: LatencyStats | None,
    *,
    server: ServerHandle | None = None,
    composing: Mapping[str, ModelConfig] | None = None,
    inline_execution_us: float = 0.0,
) -> Scheduler:
    """The scheduler ``config`` asks for (see the module docstring).

    :param server: what an ensemble calls its composing models through.
    :param composing: an ensemble's composing models' configs, as validated at load.
    :param inline_execution_us: ``--inline-execution-us`` (direct and dynamic batching).
    """
    if is_ensemble(config.raw):
        if server is None or composing is None:
            raise TritonXError(
                f"ensemble '{config.name}' needs the server handle and its composing models",
                Code.INTERNAL,
            )
        return EnsembleScheduler(config, version, server, composing, latency)
    if backend is None:
        raise TritonXError(f"model '{config.name}' has no backend", Code.INTERNAL)
    if config.raw.HasField("sequence_batching"):
        return SequenceScheduler(
            config,
            version,
            backend,
            contexts,
            sequence_batcher(config, contexts, passive),
            passive,
            rate_limiter,
            latency,
        )
    if config.raw.HasField("dynamic_batching"):
        return InstanceScheduler(
            config,
            version,
            backend,
            contexts,
            lambda reject: DynamicBatcher(config, reject),
            passive,
            rate_limiter,
            latency,
            inline_execution_us,
        )
    return InstanceScheduler(
        config,
        version,
        backend,
        contexts,
        DirectQueue,
        passive,
        rate_limiter,
        latency,
        inline_execution_us,
    )
