"""BLS outside ``execute`` and cancelling a decoupled BLS call.

The config parameter BLS_IN ("initialize" or "finalize") makes a BLS call there (Triton
refuses it). ``execute`` calls the decoupled model "stream" (see stream.py) for 100000
responses, cancels the call after the first one and answers SAW_CANCEL of its last response
(whether the callee saw ``is_cancelled()``).
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


def call_stream(count):
    return pb_utils.InferenceRequest(
        model_name="stream",
        inputs=[pb_utils.Tensor("COUNT", np.array([count], np.int32))],
        requested_output_names=["INDEX", "SAW_CANCEL"],
    ).exec(decoupled=True)


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.where = params.get("BLS_IN", {}).get("string_value", "")
        if self.where == "initialize":
            call_stream(1)

    def execute(self, requests):
        responses = []
        for _ in requests:
            iterator = call_stream(100000)
            next(iterator)
            iterator.cancel()
            saw = None
            for response in iterator:
                out = pb_utils.get_output_tensor_by_name(response, "SAW_CANCEL")
                if out is not None:
                    saw = out.as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("SAW_CANCEL", np.asarray(saw, dtype=bool))]
                )
            )
        return responses

    def finalize(self):
        if self.where == "finalize":
            call_stream(1)
