"""BLS: calls add_sub (sync, async) and repeat (decoupled) from an async execute.

"bytes_names" calls add_sub naming the model and outputs with bytes, as python_backend's BLS
example does with a name read from a BYTES tensor.

The request parameter "mode" picks what to do; OUTPUT0 is FP32 [4], MESSAGE a string.
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def add_sub_request(a, b, model_name="add_sub", outputs=("OUTPUT0", "OUTPUT1")):
    return pb_utils.InferenceRequest(
        model_name=model_name,
        inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", b)],
        requested_output_names=list(outputs),
    )


def reply(output, message=""):
    return pb_utils.InferenceResponse(
        output_tensors=[
            pb_utils.Tensor("OUTPUT0", output.astype(np.float32)),
            pb_utils.Tensor("MESSAGE", np.array([message.encode()], dtype=object)),
        ]
    )


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "sync")
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if mode == "sync":
                response = add_sub_request(a, b).exec()
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
                responses.append(reply(out, "sync"))
            elif mode == "async":
                first, second = await asyncio.gather(
                    add_sub_request(a, b).async_exec(), add_sub_request(b, a).async_exec()
                )
                out0 = pb_utils.get_output_tensor_by_name(first, "OUTPUT1").as_numpy()
                out1 = pb_utils.get_output_tensor_by_name(second, "OUTPUT1").as_numpy()
                responses.append(reply(out0 - out1, "async"))
            elif mode == "decoupled":
                values = a.astype(np.int32)
                request_ = pb_utils.InferenceRequest(
                    model_name="repeat",
                    inputs=[pb_utils.Tensor("IN", values)],
                    requested_output_names=["OUT"],
                )
                got = []
                for response in request_.exec(decoupled=True):
                    if response.has_error():
                        raise pb_utils.TritonModelException(response.error().message())
                    out = pb_utils.get_output_tensor_by_name(response, "OUT")
                    if out is not None:
                        got.append(int(out.as_numpy()[0]))
                responses.append(reply(np.array(got), f"decoupled:{len(got)}"))
            elif mode == "bytes_names":
                name = np.array([b"add_sub"], dtype=object)[0]
                response = add_sub_request(a, b, name, (b"OUTPUT0",)).exec()
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                names = [t.name() for t in response.output_tensors()]
                out = pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy()
                responses.append(reply(out, f"bytes_names:{','.join(names)}"))
            elif mode == "missing":
                response = add_sub_request(a, b, model_name="no_such_model").exec()
                assert response.has_error()
                responses.append(reply(a, response.error().message()))
            else:
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"bad mode {mode}"))
                )
        return responses
