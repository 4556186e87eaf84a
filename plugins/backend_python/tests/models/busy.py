"""A CPU-busy pure-Python model: spins for ITERATIONS loop turns per request (GIL-bound)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "ITERATIONS").as_numpy()[0])
            total = 0
            for i in range(n):
                total += i % 7
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("TOTAL", np.array([total], dtype=np.int64))]
                )
            )
        return responses
