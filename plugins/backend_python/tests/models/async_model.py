"""``async def execute`` (plain or decoupled, as the config says), as the request parameter
"how" asks:

"barrier": every request waits until "n" requests carrying the same "key" are inside
``execute`` at once (they overlap), then answers OUT = its IN; "bls": awaits two
``async_exec`` calls of add_sub at once and answers OUT = INPUT0 + INPUT1 of the first;
"raise": raises ``ValueError("boom in the coroutine")`` after an await.
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.barriers = {}

    def answer(self, request, out):
        response = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out)])
        if self.decoupled:
            request.get_response_sender().send(
                response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
            return None
        return response

    async def barrier(self, key, n, count):
        arrived, event = self.barriers.setdefault(key, [0, asyncio.Event()])
        self.barriers[key][0] = arrived + count
        if arrived + count >= n:
            event.set()
        await event.wait()

    async def execute(self, requests):
        params = json.loads(requests[0].parameters())
        how = params.get("how")
        values = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        if how == "barrier":
            await self.barrier(params["key"], int(params["n"]), len(requests))
            outs = values
        elif how == "bls":
            outs = []
            for value in values:
                a = value.astype(np.float32)
                calls = [
                    pb_utils.InferenceRequest(
                        model_name="add_sub",
                        inputs=[pb_utils.Tensor("INPUT0", a), pb_utils.Tensor("INPUT1", a)],
                        requested_output_names=["OUTPUT0"],
                    ).async_exec()
                    for _ in range(2)
                ]
                first, _ = await asyncio.gather(*calls)
                out = pb_utils.get_output_tensor_by_name(first, "OUTPUT0").as_numpy()
                outs.append(out.astype(np.int32))
        else:
            await asyncio.sleep(0)
            raise ValueError("boom in the coroutine")
        responses = [self.answer(r, out) for r, out in zip(requests, outs, strict=True)]
        return None if self.decoupled else responses
