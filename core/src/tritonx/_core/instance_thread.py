"""One model instance's worker thread (:func:`run_instance_thread`): it loads the instance,
serves batches from the scheduler's queue until the scheduler stops or retires the instance,
and unloads it.

A thread takes the next batch, holds its instance's lock while the batch runs (waiting for
the rate limiter first when it is on) and hands the answers to the event loop only once it
has let go of the instance. It uses its scheduler only through :class:`ThreadServices`
(the execution modes' :class:`~tritonx._core.execution.SchedulerServices` and what loading
and retiring instances need).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from tritonx._core.execution import SchedulerServices
from tritonx._core.rate_limiter import RateLimiter, Ticket
from tritonx.backend import Backend, LoadContext, ModelInstance
from tritonx.errors import Code, TritonXError

log = logging.getLogger("tritonx.scheduler")

#: How often an instance thread checks whether its not-ready instance recovered.
NOT_READY_POLL_S = 0.02


class ThreadServices(SchedulerServices, Protocol):
    """What an instance thread uses of its scheduler, besides the execution services."""

    @property
    def backend(self) -> Backend:
        """The backend that loads the instances."""

    @property
    def rate_limiter(self) -> RateLimiter:
        """The server's rate limiter (a thread with a ticket waits for it per batch)."""

    @property
    def passive(self) -> list[bool]:
        """Whether each instance is passive (loaded, never given requests), by index."""

    @property
    def out_of_service(self) -> list[bool]:
        """Whether each instance is out of service, by index: retired by an instance-group
        update (its thread leaves when it next wakes) or added and not warmed up yet."""


def run_instance_thread(
    sched: ThreadServices,
    loop: asyncio.AbstractEventLoop,
    index: int,
    ctx: LoadContext,
    ready: asyncio.Future[None],
    ticket: Ticket | None,
    go: threading.Event | None = None,
) -> None:
    """The body of instance ``index``'s thread: load it (``ready`` gets the outcome), wait
    for ``go`` when an instance-group update added it (it is warmed up first), serve, then
    unload it, unless it was retired (the update unloads it)."""
    instance = _load(sched, loop, ctx, ready)
    if instance is None:
        return
    sched.instances[index] = instance
    loop.call_soon_threadsafe(_set_result, ready, None)
    retired = sched.out_of_service
    if go is not None:  # added by an instance-group update: warmed up first
        go.wait()
        if retired[index]:  # the update failed: it was unloaded when retired
            return
    if not sched.passive[index]:
        _serve(sched, loop, index, instance, ticket)
    else:  # passive instances are loaded but never given requests
        sched.stopping.wait()
    if retired[index]:  # unloaded when retired
        return
    try:
        if not sched.passive[index]:
            with sched.locks[index]:  # an asynchronous batch may still be running on it
                instance.unload()
        else:
            instance.unload()
    except Exception:
        log.exception("unloading instance %s of %s failed", ctx.instance.name, ctx.model_name)
    sched.instances[index] = None


def _load(
    sched: ThreadServices,
    loop: asyncio.AbstractEventLoop,
    ctx: LoadContext,
    ready: asyncio.Future[None],
) -> ModelInstance | None:
    """The backend's instance for ``ctx``; None when it failed (``ready`` gets the error)."""
    backend = sched.backend
    try:
        instance = backend.load(ctx)
        if not isinstance(instance, ModelInstance):
            raise TritonXError(
                f"backend '{backend.name}' load() returned {type(instance).__name__}, "
                "not a ModelInstance",
                Code.INTERNAL,
            )
    except BaseException as exc:
        loop.call_soon_threadsafe(_set_exception, ready, exc)
        return None
    return instance


def _serve(
    sched: ThreadServices,
    loop: asyncio.AbstractEventLoop,
    index: int,
    instance: ModelInstance,
    ticket: Ticket | None,
) -> None:
    """Run the queue's batches on ``instance`` until the queue stops or it is retired."""
    get = sched.batcher.get
    limiter = sched.rate_limiter
    busy = sched.busy
    running = sched.running
    lock = sched.locks[index]
    retired = sched.out_of_service
    post_now = loop.call_soon_threadsafe
    # the answers of a batch reach the loop only once this thread has let go of the
    # instance: a client answered may find it idle at once (inline execution claims
    # it with the lock), never busy with the batch that was just answered
    answers: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def post(callback: Callable[..., object], *args: Any) -> None:
        answers.append((callback, args))

    while not retired[index]:
        if not instance.is_ready():
            # recovering (e.g. restarting its worker process): leave the queue to the
            # instances that serve
            if sched.stopping.wait(NOT_READY_POLL_S):
                break
            continue
        batch = get(index)
        if batch is None:
            break
        with lock:  # (the loop may be running a batch on this instance)
            if retired[index]:  # removed meanwhile: another instance runs it
                sched.queue_all([batch])
                break
            busy[index] = True
            running[index] = batch
            try:
                if ticket is not None:
                    limiter.acquire(ticket)
                    try:
                        sched.execute(instance, batch, post)
                    finally:
                        limiter.release(ticket)
                else:
                    sched.execute(instance, batch, post)
            except Exception as exc:  # the thread lives on to serve the next batch
                sched.fail_batch(batch, exc)
            finally:
                busy[index] = False
                running[index] = None
        for callback, args in answers:
            post_now(callback, *args)
        answers.clear()


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
