"""OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, without reading its config (it
also loads under a config override that declares no inputs or outputs)."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [
                pb_utils.Tensor("OUTPUT0", in_0 + in_1),
                pb_utils.Tensor("OUTPUT1", in_0 - in_1),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
