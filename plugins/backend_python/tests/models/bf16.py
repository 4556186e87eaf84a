"""BF16 in, BF16 out: doubles the input. As under Triton, a BF16 tensor is read and made
through DLPack (``as_numpy()`` refuses BF16), here with torch."""

import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, "INPUT0").to_dlpack())
            out = pb_utils.Tensor.from_dlpack("OUTPUT0", x * 2)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
