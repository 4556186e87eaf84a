"""Triton's qa/python_models/async_execute_decouple_bls pattern: a decoupled ``async def
execute`` whose every request makes one decoupled BLS call, ``await
pb_utils.InferenceRequest(...).async_exec(decoupled=True)``, then iterates its responses
(a plain ``for``) and sends each on, then the final flag.

The BLS call goes to the model named by the request parameter "callee" with the request's
IN and its parameters; OUT is the callee's OUT.
"""

import asyncio
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def one(self, request):
        params = json.loads(request.parameters())
        call = pb_utils.InferenceRequest(
            model_name=params["callee"],
            inputs=[
                pb_utils.Tensor("IN", pb_utils.get_input_tensor_by_name(request, "IN").as_numpy())
            ],
            requested_output_names=["OUT"],
            parameters=params,
        )
        responses = await call.async_exec(decoupled=True)
        sender = request.get_response_sender()
        for response in responses:
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            out = pb_utils.get_output_tensor_by_name(response, "OUT")
            if out is not None:
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def execute(self, requests):
        await asyncio.gather(*(self.one(request) for request in requests))
        return None
