"""Serve y = x @ W + b, with W and b stored in <version>/model.npz (a complete tritonx backend)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import tritonx
from tritonx import Backend, InferenceRequest, InferenceResponse, LoadContext, ModelInstance


@tritonx.hookimpl
def tritonx_register_backends(registry: tritonx.BackendRegistry) -> None:
    """Register the ``linear`` backend."""
    registry.add(LinearBackend)


class LinearBackend(Backend):
    """``backend: "linear"`` in config.pbtxt; reads ``model.npz`` (arrays ``W`` and ``b``)."""

    name = "linear"
    default_model_filename = "model.npz"
    config_keys = frozenset()  # reads no --backend-config=linear,<key>=<value> setting

    def load(self, ctx: LoadContext) -> ModelInstance:
        assert ctx.model_path is not None
        with np.load(ctx.model_path) as npz:
            return LinearModel(npz["W"], npz["b"])


class LinearModel(ModelInstance):
    """One instance: the weights, and a batched matrix product per execute."""

    def __init__(self, w: np.ndarray, b: np.ndarray) -> None:
        self.w, self.b = w, b

    def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        x = tritonx.concat_inputs(requests)["INPUT0"]  # [sum of batch sizes, in_features]
        return tritonx.split_outputs(requests, {"OUTPUT0": x @ self.w + self.b})
