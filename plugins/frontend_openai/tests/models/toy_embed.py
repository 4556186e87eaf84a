"""An embedding model by the frontend's convention (one BYTES input, one FP32 output), with
batching: each text's vector is [characters, words, 1.5]."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            rows = [[len(t.decode()), len(t.split()), 1.5] for t in texts]
            out = pb_utils.Tensor("EMBEDDING", np.array(rows, dtype=np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
