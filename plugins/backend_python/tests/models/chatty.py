"""Logs 200 lines and counts 200 metric increments per request before answering (tests that
they are all handled by the time the response is)."""

import triton_python_backend_utils as pb_utils

LINES = 200


class TritonPythonModel:
    def initialize(self, args):
        self.logger = pb_utils.Logger
        # the family is kept: as in Triton, a family's metrics die with it
        self.family = pb_utils.MetricFamily(
            name="chatty_lines_custom",
            description="Lines logged",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.counter = self.family.Metric(labels={"model": args["model_name"]})

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            tag = int(value.reshape(-1)[0])
            for line in range(LINES):
                self.logger.log_info(f"chatty request {tag} line {line}")
                self.counter.increment(1)
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", value)])
            )
        return responses
