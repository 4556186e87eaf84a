"""Custom metrics as Triton's qa ``python_models/custom_metrics`` uses them: each request names
a scenario (TEST) and gives the server's metrics address (URL); the model runs it inside
``execute``, reading ``/metrics`` itself where the scenario does, and answers with what it saw
(OUT, JSON): the ``/metrics`` text, or each step's outcome ("ok" or "<exception type>: <text>")."""

import functools
import json
import urllib.request

import numpy as np
import triton_python_backend_utils as pb_utils

# "model" sorts after "le": prometheus-cpp still writes `le` last
HISTOGRAM_LABELS = {"example1": "histogram_label1", "model": "triton_metrics"}


def outcome(step):
    try:
        step()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            test = pb_utils.get_input_tensor_by_name(request, "TEST").as_numpy()[0].decode()
            url = pb_utils.get_input_tensor_by_name(request, "URL").as_numpy()[0].decode()
            self.url = url
            result = getattr(self, test)()
            out = np.array([json.dumps(result).encode()], dtype=object)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", out)]))
        return responses

    def metrics(self):
        with urllib.request.urlopen(f"http://{self.url}/metrics", timeout=30) as answer:
            return answer.read().decode()

    def histogram(self):
        family = pb_utils.MetricFamily(
            name="tx_histogram_e2e",
            description="test metric histogram kind end to end",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        metric = family.Metric(labels=HISTOGRAM_LABELS, buckets=[0.1, 1.0, 2.5, 5.0, 10.0])
        before = self.metrics()
        for datum in (0.05, 1.5, 6.0):
            metric.observe(datum)
        return {"before": before, "after": self.metrics()}

    def histogram_args(self):
        family = pb_utils.MetricFamily(
            name="tx_histogram_args",
            description="test metric histogram args",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        counter = pb_utils.MetricFamily(
            name="tx_counter_args", description="a counter", kind=pb_utils.MetricFamily.COUNTER
        )
        return {
            "missing": outcome(lambda: family.Metric(labels={})),
            "none": outcome(lambda: family.Metric(labels={}, buckets=None)),
            "unsorted": outcome(lambda: family.Metric(labels={}, buckets=[2.5, 0.1, 1.0])),
            "duplicate": outcome(lambda: family.Metric(labels={}, buckets=[1, 1, 2, 5, 5])),
            "empty": outcome(lambda: family.Metric(labels={}, buckets=[])),
            "counter": outcome(lambda: counter.Metric(labels={}, buckets=[1.0])),
            "tuple": outcome(lambda: family.Metric(labels={}, buckets=(1.0,))),
        }

    def dup_family_diff_kind(self):
        first = pb_utils.MetricFamily(
            name="tx_dup_metric_family_diff_kind",
            description="same name, different kind",
            kind=pb_utils.MetricFamily.COUNTER,
        )

        def second():
            pb_utils.MetricFamily(
                name="tx_dup_metric_family_diff_kind",
                description="same name, different kind",
                kind=pb_utils.MetricFamily.GAUGE,
            )

        result = {"gauge": outcome(second), "counter": outcome(lambda: first.Metric().value())}
        return result

    def misuse(self):
        """Each kind asked what it does not support (Triton's core src/metric_family.cc)."""
        result = {}
        for kind, name in (
            (pb_utils.MetricFamily.COUNTER, "tx_misuse_counter"),
            (pb_utils.MetricFamily.GAUGE, "tx_misuse_gauge"),
            (pb_utils.MetricFamily.HISTOGRAM, "tx_misuse_histogram"),
        ):
            family = pb_utils.MetricFamily(name=name, description="misuse", kind=kind)
            buckets = [1.0] if kind == pb_utils.MetricFamily.HISTOGRAM else None
            metric = family.Metric(labels={"example1": "label1"}, buckets=buckets)
            result[name] = {
                "increment": outcome(functools.partial(metric.increment, -1)),
                "set": outcome(functools.partial(metric.set, 10)),
                "observe": outcome(functools.partial(metric.observe, 10)),
            }
        return result

    def lifetime(self):
        result = {}
        for kind, name in (
            (pb_utils.MetricFamily.COUNTER, "tx_metric_lifetime_error_counter"),
            (pb_utils.MetricFamily.GAUGE, "tx_metric_lifetime_error_gauge"),
            (pb_utils.MetricFamily.HISTOGRAM, "tx_metric_lifetime_error_histogram"),
        ):
            family = pb_utils.MetricFamily(name=name, description="lifetime", kind=kind)
            buckets = [1.0] if kind == pb_utils.MetricFamily.HISTOGRAM else None
            metric = family.Metric(labels={"example1": "label1"}, buckets=buckets)
            del family  # before its metric: Triton clears the metric
            result[name] = {
                "increment": outcome(functools.partial(metric.increment, 10)),
                "set": outcome(functools.partial(metric.set, 10)),
                "observe": outcome(functools.partial(metric.observe, 10)),
                "value": outcome(metric.value),
            }
        return result
