"""Loads another model from ``initialize``, the pattern of Triton's python_backend README
("Model Loading API") and of qa/python_models/bls_model_loading: ``is_model_ready``, then
``load_model``, then ``is_model_ready`` again, as the config parameters ask:

"LOAD_NAME": the model to load; "LOAD_CONFIG_FILE" (optional): a file holding the JSON
config override;
"LOAD_SOURCE" (optional): a file whose bytes become ``files={"file:1/model.py": ...}``.

RESULT (BYTES [1]) is what ``initialize`` saw: ``before=<ready> load=<"ok" or the
TritonModelException's text> after=<ready>``.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def parameter(config, key, default=""):
    return config.get("parameters", {}).get(key, {}).get("string_value", default)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.name = parameter(config, "LOAD_NAME")
        source = parameter(config, "LOAD_SOURCE")
        files = {"file:1/model.py": Path(source).read_bytes()} if source else None
        config_file = parameter(config, "LOAD_CONFIG_FILE")
        override = Path(config_file).read_text() if config_file else ""
        before = pb_utils.is_model_ready(model_name=self.name)
        try:
            pb_utils.load_model(model_name=self.name, config=override, files=files)
            loaded = "ok"
        except pb_utils.TritonModelException as exc:
            loaded = str(exc)
        after = pb_utils.is_model_ready(model_name=self.name)
        self.result = f"before={before} load={loaded} after={after}"

    def execute(self, requests):
        out = pb_utils.Tensor("RESULT", np.array([self.result.encode()], dtype=object))
        return [pb_utils.InferenceResponse(output_tensors=[out]) for _ in requests]
