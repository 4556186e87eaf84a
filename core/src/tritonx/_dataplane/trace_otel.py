"""``--trace-config mode=opentelemetry``: traces as OpenTelemetry spans exported over OTLP/HTTP
by a batch span processor, laid out as tritonserver lays them out (server ``src/tracer.cc``):

* ``InferRequest``: one root span per sampled client request (its parent is the W3C context
  the client sent, if any), with the transport's timestamps as events;
* ``<model name>``: one span per request from REQUEST_START to REQUEST_END, child of the root
  span, or of the parent request's span for ensemble steps and BLS calls; attributes
  ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
  ``triton.trace_parent_id`` and ``triton.request_id``; QUEUE_START... as events;
* ``compute``: COMPUTE_START to COMPUTE_END, child of its request's span, with
  COMPUTE_INPUT_END and COMPUTE_OUTPUT_START as events.

Needs ``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http`` (the ``otel``
extra); imported only in that mode.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tritonx.errors import invalid_arg

if TYPE_CHECKING:
    from tritonx._dataplane.trace import RequestTrace

#: tritonserver's ``kTritonTracer``.
TRACER_NAME = "triton-server"
SERVICE_NAME = "triton-inference-server"
_SERVER = otel_trace.SpanKind.SERVER


class OtelExporter:
    """The tracer provider, its batch span processor and OTLP/HTTP exporter.

    :param options: ``--trace-config opentelemetry,<key>=<value>`` pairs: ``url`` (default
        ``http://localhost:4318/v1/traces``, or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``),
        ``resource=<key>=<value>`` (repeatable; ``OTEL_RESOURCE_ATTRIBUTES`` also counts),
        ``bsp_max_queue_size``, ``bsp_schedule_delay`` (ms), ``bsp_max_export_batch_size``.
    """

    def __init__(self, options: tuple[tuple[str, str], ...]) -> None:
        attributes: dict[str, Any] = {"service.name": SERVICE_NAME}
        url: str | None = None
        bsp: dict[str, int] = {}
        for key, value in options:
            if key == "url":
                url = value
            elif key == "resource":
                name, _, text = value.partition("=")
                attributes[name] = text
            elif key.startswith("bsp_"):
                bsp[key] = int(value)
        try:
            processor = BatchSpanProcessor(
                OTLPSpanExporter(endpoint=url),
                max_queue_size=bsp.get("bsp_max_queue_size"),
                schedule_delay_millis=bsp.get("bsp_schedule_delay"),
                max_export_batch_size=bsp.get("bsp_max_export_batch_size"),
            )
        except ValueError as exc:
            raise invalid_arg(f"--trace-config opentelemetry: {exc}") from None
        self.provider = TracerProvider(resource=Resource.create(attributes), shutdown_on_exit=False)
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer(TRACER_NAME)
        self._propagator = TraceContextTextMapPropagator()

    def extract(self, headers: Mapping[str, str]) -> Any:
        """The client's context from a ``traceparent`` header, or None."""
        if "traceparent" not in headers:
            return None
        context = self._propagator.extract(headers)
        span = otel_trace.get_current_span(context)
        return context if span.get_span_context().is_valid else None

    def start(self, context: Any) -> OtelTrace:
        """The spans of one sampled request, under ``context`` (None: a new trace)."""
        return OtelTrace(self.tracer, context)

    def shutdown(self) -> None:
        """Export what is queued and stop (blocking: call it off the event loop)."""
        self.provider.shutdown()


class OtelTrace:
    """The spans of one sampled request and of the requests made on its behalf."""

    __slots__ = ("_offset", "_stacks", "_tracer", "root_span")

    def __init__(self, tracer: Any, context: Any) -> None:
        self._tracer = tracer
        now = time.time_ns()
        #: wall clock minus the monotonic clock the timestamps use
        self._offset = now - time.perf_counter_ns()
        self.root_span = tracer.start_span(
            "InferRequest",
            context=context if context is not None else otel_context.Context(),
            kind=_SERVER,
            start_time=now,
        )
        self._stacks: dict[int, list[Any]] = {}

    def bind(self, root: RequestTrace) -> None:
        """The client's request's trace: its spans go under the root span."""
        self._stacks[root.id] = [self.root_span]

    def _start(self, name: str, parent: Any, ns: int, attributes: Any = None) -> Any:
        return self._tracer.start_span(
            name,
            context=otel_trace.set_span_in_context(parent),
            kind=_SERVER,
            start_time=self._offset + ns,
            attributes=attributes,
        )

    def request_start(self, trace: RequestTrace, request_id: str, ns: int) -> None:
        """REQUEST_START: the request's span, under the root span or its parent's span."""
        own = self._stacks.setdefault(trace.id, [])
        source = self._stacks.get(trace.parent_id) if trace.parent_id else own
        parent = source[-1] if source else self.root_span
        attributes: dict[str, Any] = {
            "triton.model_name": trace.model_name,
            "triton.model_version": trace.model_version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
        }
        if request_id:
            attributes["triton.request_id"] = request_id
        span = self._start(trace.model_name, parent, ns, attributes)
        own.append(span)
        span.add_event("REQUEST_START", timestamp=self._offset + ns)

    def activity(self, trace: RequestTrace, activity: str, ns: int) -> None:
        """Any other activity: an event on the request's current span; COMPUTE_START opens
        the ``compute`` span, COMPUTE_END and REQUEST_END close the current one."""
        stack = self._stacks.setdefault(trace.id, [])
        at = self._offset + ns
        if activity == "COMPUTE_START":
            stack.append(self._start("compute", stack[-1] if stack else self.root_span, ns))
        if not stack:
            return
        stack[-1].add_event(activity, timestamp=at)
        if activity in ("COMPUTE_END", "REQUEST_END") and stack[-1] is not self.root_span:
            stack.pop().end(end_time=at)

    def capture(self, name: str, ns: int) -> None:
        """A transport timestamp: an event of the root span."""
        self.root_span.add_event(name, timestamp=self._offset + ns)

    def finish(self) -> None:
        """End every span still open, the root span last."""
        for stack in self._stacks.values():
            while stack and stack[-1] is not self.root_span:
                stack.pop().end()
        self.root_span.end()
