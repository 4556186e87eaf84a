"""A rolling update without Kubernetes: zero failed requests at concurrency 16.

What runs: real ``tritonx serve`` processes (the pods), real ``tritonclient.http`` clients at
concurrency 16, real SIGTERMs. What is modelled, with the timings of deploy/kustomize:

- **Endpoints** (EndpointSlice + kube-proxy): the replicas whose readiness probe
  (``/v2/health/ready``, every ``PROBE_PERIOD``) last passed and that are not being deleted.
- **Clients**: tritonclient.http or tritonclient.grpc, one client per endpoint per worker.
- **Per-request balancing**: every request goes to the next endpoint, round robin, as a headless
  Service with client-side balancing (gRPC's ``round_robin``) or an L7 proxy does. (kube-proxy
  balances connections; a keep-alive connection stays on its pod, see deploy/README.md.)
  A refused connection is retried on the next endpoint, as a client or proxy does when a pod's
  listener is gone before its endpoint is.
- **Pod deletion**: the endpoint is removed at once, but clients see it ``PROPAGATION`` later
  (kube-proxy / DNS lag); the kubelet runs the preStop hook (``sleep PRE_STOP``) and then sends
  SIGTERM; the server turns unready at once, finishes what is in flight (a long request sent
  just before the deletion) within ``--exit-timeout-secs``, keeps accepting connections while it
  drains, and exits.
- **Rolling update** (``maxSurge: 1, maxUnavailable: 0``): a new pod is started and must be
  ready (in the endpoints) before an old one is deleted; two old pods are replaced this way.

Zero requests may fail and every response must be right; the servers must exit with code 0.
"""

from __future__ import annotations

import errno
import itertools
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tritonx.testing import ModelRepositoryBuilder

CONCURRENCY = 16
PROBE_PERIOD = 0.2  # readinessProbe periodSeconds (2 in the manifests), scaled down
PROPAGATION = 0.3  # endpoint removal reaching the clients
PRE_STOP = 1.0  # preStop sleep (10 in the manifests): longer than PROPAGATION
EXIT_TIMEOUT = 10  # --exit-timeout-secs (30 in the manifests)


def _refused(exc: BaseException) -> bool:
    """A refused connection (nothing was sent): safe to send elsewhere."""
    if isinstance(exc, InferenceServerException) and "Connection refused" in (exc.message() or ""):
        return True  # gRPC: the channel could not connect
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        if isinstance(seen, OSError) and seen.errno == errno.ECONNREFUSED:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Endpoints:
    """The ready, not-deleted replicas as the clients see them (probed every PROBE_PERIOD)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replicas: list[Any] = []
        self._ready: set[str] = set()
        self._deleted_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._rr = itertools.count()
        self._prober = threading.Thread(target=self._probe, daemon=True)
        self._prober.start()

    def add(self, replica: Any) -> None:
        with self._lock:
            self._replicas.append(replica)

    def delete(self, replica: Any) -> None:
        with self._lock:
            self._deleted_at[replica.name] = time.monotonic()

    def _probe(self) -> None:
        while not self._stop.wait(PROBE_PERIOD):
            with self._lock:
                replicas = list(self._replicas)
            ready = {r.name for r in replicas if r.proc.poll() is None and r.ready()}
            with self._lock:
                self._ready = ready

    def visible(self) -> list[Any]:
        now = time.monotonic()
        with self._lock:
            return [
                r
                for r in self._replicas
                if r.name in self._ready
                and now < self._deleted_at.get(r.name, float("inf")) + PROPAGATION
            ]

    def wait_visible(self, replica: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while replica not in self.visible():
            assert time.monotonic() < deadline, replica.log.read_text()
            assert replica.proc.poll() is None, replica.log.read_text()
            time.sleep(0.05)

    def pick(self) -> list[Any]:
        """The visible endpoints, starting at the next one round robin."""
        visible = self.visible()
        if not visible:
            return []
        start = next(self._rr) % len(visible)
        return visible[start:] + visible[:start]

    def close(self) -> None:
        self._stop.set()
        self._prober.join(5)


class Load:
    """CONCURRENCY threads sending inferences to the endpoints until stopped."""

    def __init__(self, endpoints: Endpoints, protocol: str) -> None:
        self.endpoints = endpoints
        self.protocol = protocol
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.served: Counter[str] = Counter()
        self.refusals = 0
        self._lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._worker, args=(i,)) for i in range(CONCURRENCY)
        ]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def _worker(self, index: int) -> None:
        lib: Any = httpclient if self.protocol == "http" else grpcclient
        clients: dict[str, Any] = {}
        n = 0
        while not self.stop.is_set():
            n += 1
            value = np.full((1, 1), index * 100000 + n, np.float32)
            data = lib.InferInput("INPUT0", [1, 1], "FP32")
            data.set_data_from_numpy(value)
            error = "no ready endpoint"
            for replica in self.endpoints.pick():
                client = clients.get(replica.name)
                if client is None:
                    if self.protocol == "http":
                        client = httpclient.InferenceServerClient(replica.url, network_timeout=30)
                    else:
                        client = grpcclient.InferenceServerClient(replica.grpc_url)
                    clients[replica.name] = client
                try:
                    out = client.infer("echo", [data]).as_numpy("OUTPUT0")
                except (InferenceServerException, OSError) as exc:
                    if _refused(exc):
                        with self._lock:
                            self.refusals += 1
                        clients.pop(replica.name).close()
                        continue  # the next endpoint, as a Service would never have sent it
                    error = f"{replica.name}: {type(exc).__name__}: {exc}"
                    break
                if out is None or out.tolist() != value.tolist():
                    error = f"{replica.name}: wrong output {out!r} for {value!r}"
                    break
                with self._lock:
                    self.served[replica.name] += 1
                error = ""
                break
            if error:
                with self._lock:
                    self.failures.append(error)
                time.sleep(0.01)
        for client in clients.values():
            client.close()


def _long_request(url: str, result: dict[str, object]) -> None:
    try:
        client = httpclient.InferenceServerClient(url, network_timeout=30)
        data = httpclient.InferInput("INPUT0", [1, 1], "FP32")
        data.set_data_from_numpy(np.full((1, 1), 7, np.float32))
        result["value"] = client.infer("long", [data]).as_numpy("OUTPUT0").tolist()
    except Exception as exc:  # reported by the caller's assertion
        result["error"] = exc


def _delete_pod(replica: Any, endpoints: Endpoints) -> None:
    """Kubernetes' pod deletion: endpoint removal, a long request still in flight on the pod,
    preStop sleep, SIGTERM; then the drain is checked from outside."""
    result: dict[str, object] = {}
    in_flight = threading.Thread(target=_long_request, args=(replica.url, result))
    in_flight.start()  # routed just before the endpoint removal
    time.sleep(0.1)
    endpoints.delete(replica)
    time.sleep(PRE_STOP)
    assert replica not in endpoints.visible()
    replica.terminate()
    time.sleep(0.3)
    # readiness is false at once while the drain runs and the listener still accepts
    assert replica.proc.poll() is None, "exited before its in-flight request finished"
    assert replica.ready_status() == 400
    assert replica.accepts_connections()
    assert replica.proc.wait(EXIT_TIMEOUT + 5) == 0, replica.log.read_text()
    in_flight.join(30)
    assert result.get("value") == [[7.0]], result
    assert not replica.accepts_connections()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_rolling_update_loses_no_request(
    model_repository: ModelRepositoryBuilder, start_replica: Callable[..., Any], protocol: str
) -> None:
    model_repository.add_identity(
        "echo",
        dims=[1],
        max_batch_size=8,
        parameters={"execute_delay_ms": "10"},
        extra="dynamic_batching { }",
    )
    model_repository.add_identity(
        "long", dims=[1], max_batch_size=1, parameters={"execute_delay_ms": "3000"}
    )
    serve = [
        sys.executable,
        "-m",
        "tritonx",
        "serve",
        f"--model-repository={model_repository.root}",
        f"--exit-timeout-secs={EXIT_TIMEOUT}",
    ]
    endpoints = Endpoints()
    try:
        old = [start_replica(serve, name=f"old-{i}") for i in range(2)]
        for replica in old:
            endpoints.add(replica)
        for replica in old:
            endpoints.wait_visible(replica)
        with Load(endpoints, protocol) as load:
            time.sleep(1.0)
            new = []
            for i, replica in enumerate(old):
                surge = start_replica(serve, name=f"new-{i}")  # maxSurge 1
                endpoints.add(surge)
                endpoints.wait_visible(surge)  # maxUnavailable 0: ready before the deletion
                new.append(surge)
                _delete_pod(replica, endpoints)
            time.sleep(1.0)
        assert load.failures == [], f"{len(load.failures)} failed: {load.failures[:5]}"
        # every pod served, the old ones before their deletion and the new ones after
        assert all(load.served[r.name] > 20 for r in [*old, *new]), load.served
        assert sum(load.served.values()) > 500, load.served
    finally:
        endpoints.close()
