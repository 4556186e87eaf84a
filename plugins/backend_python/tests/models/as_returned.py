"""Returns OUT as the request parameter "what" asks, whatever the config says, for the output
checks (Triton passes a python model's outputs through as the model made them).

"one" (the default): OUT = [1.0] FP32 (shape [1]); "half": OUT = [1.0] FP16; "four": OUT = [0, 1, 2, 3]
FP32; "bls": calls the model named by the parameter "callee" with what="half" and answers,
in OUT, the callee's OUT as returned, and in KIND its ``triton_dtype()``.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            params = json.loads(request.parameters())
            what = params.get("what", "one")
            tensors = []
            if what == "one":
                tensors.append(pb_utils.Tensor("OUT", np.array([1.0], np.float32)))
            elif what == "half":
                tensors.append(pb_utils.Tensor("OUT", np.array([1.0], np.float16)))
            elif what == "four":
                tensors.append(pb_utils.Tensor("OUT", np.arange(4, dtype=np.float32)))
            elif what == "bls":
                answer = pb_utils.InferenceRequest(
                    model_name=params["callee"],
                    inputs=[pb_utils.get_input_tensor_by_name(request, "X")],
                    requested_output_names=["OUT"],
                    parameters={"what": "half"},
                ).exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                tensors.append(pb_utils.Tensor("OUT", out.as_numpy()))
                tensors.append(
                    pb_utils.Tensor("KIND", np.array([out.triton_dtype()], dtype=np.int32))
                )
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses
