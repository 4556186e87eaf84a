"""Custom metrics: a counter, a gauge and a histogram labelled with the model name."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"], "version": args["model_version"]}
        # the families are kept: as in Triton, a family's metrics die with it
        self.families = [
            pb_utils.MetricFamily(
                name="requests_count_custom",
                description="Number of requests seen by the model",
                kind=pb_utils.MetricFamily.COUNTER,
            ),
            pb_utils.MetricFamily(
                name="last_value_custom",
                description="The last value seen",
                kind=pb_utils.MetricFamily.GAUGE,
            ),
            pb_utils.MetricFamily(
                name="input_size_custom",
                description="Input sizes",
                kind=pb_utils.MetricFamily.HISTOGRAM,
            ),
        ]
        self.requests = self.families[0].Metric(labels=labels)
        self.last = self.families[1].Metric(labels=labels)
        self.sizes = self.families[2].Metric(labels=labels, buckets=[1, 10, 100])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            self.requests.increment(1)
            self.last.set(float(x.reshape(-1)[-1]))
            self.sizes.observe(x.size)
            count = np.array([self.requests.value()], dtype=np.float32)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", count)])
            )
        return responses
