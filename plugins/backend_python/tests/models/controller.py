"""Model control from a model (``pb_utils.load_model`` / ``unload_model`` /
``is_model_ready``), as the request parameters ask; RESULT (BYTES [1]) is "ok", the readiness
("True" / "False") or the text of the TritonModelException raised.

"op": "load" (model "name", JSON "config", and "source_path": a file whose bytes become
``files={"file:1/model.py": ...}``), "unload", "ready" (with "version"), "bad_files"
(``files`` that is not a dict).
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def run(self, params):
        op, name = params["op"], params["name"]
        if op == "load":
            files = None
            if "source_path" in params:
                files = {"file:1/model.py": Path(params["source_path"]).read_bytes()}
            pb_utils.load_model(model_name=name, config=params.get("config", ""), files=files)
        elif op == "unload":
            pb_utils.unload_model(model_name=name)
        elif op == "ready":
            return str(pb_utils.is_model_ready(model_name=name, model_version=params["version"]))
        elif op == "bad_files":
            pb_utils.load_model(model_name=name, files=["model.py"])
        return "ok"

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                result = self.run(json.loads(request.parameters()))
            except pb_utils.TritonModelException as exc:
                result = str(exc)
            out = pb_utils.Tensor("RESULT", np.array([result.encode()], dtype=object))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
