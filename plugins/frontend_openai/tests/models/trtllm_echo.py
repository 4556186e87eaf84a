"""A non-decoupled model in TensorRT-LLM's format (one tensor per parameter): its
text_output is the JSON of the inputs it received (the prompt, max_tokens, stop_words,
temperature...), so tests see what reached the model."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

NAMES = (
    "text_input",
    "max_tokens",
    "stream",
    "stop_words",
    "bad_words",
    "temperature",
    "top_p",
    "seed",
    "exclude_input_in_output",
    "frequency_penalty",
    "presence_penalty",
)


def _plain(array):
    values = [v.decode() if isinstance(v, bytes) else v.item() for v in array.reshape(-1)]
    return values[0] if len(values) == 1 else values


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            seen = {}
            for name in NAMES:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    seen[name] = _plain(tensor.as_numpy())
                    seen[name + ".shape"] = list(tensor.as_numpy().shape)
            if seen.get("stream"):
                error = pb_utils.TritonError("STREAM only supported in decoupled mode")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            text = json.dumps(seen, sort_keys=True)
            out = pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
