"""``BackendContract``: the test suite every backend inherits.

A backend's test module subclasses it and provides a ``model`` fixture that writes one model
into the ``model_repository`` fixture and returns its folder::

    class TestLinear(BackendContract):
        backend_module = "tritonx_backend_linear"
        framework_modules = ()

        @pytest.fixture
        def model(self, model_repository):
            return model_repository.add("lin", backend="linear", ...)

The suite checks: load → ready; metadata matches the config; one inference returns every
configured output with the configured datatype and shape; a list of N requests handed to
``execute`` gives N responses, in order, equal to running them one by one; requested-output
filtering; unload; and that importing the plugin's entry point imports no framework.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pluggy
import pytest

from tritonx._runtime.plugins import collect
from tritonx.backend import InstanceSpec, LoadContext
from tritonx.config import ModelConfig, ServerSettings
from tritonx.datatypes import DataType
from tritonx.server import Server
from tritonx.types import InferenceRequest


def example_inputs(config: ModelConfig, batch: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs that fit ``config``: variable dims become 3, batching models get ``batch`` rows."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    lead = (batch,) if config.max_batch_size > 0 else ()
    for io in config.inputs:
        shape = lead + tuple(3 if d == -1 else d for d in io.dims)
        dt = io.datatype
        if dt is DataType.BYTES:
            values = rng.integers(0, 10, size=shape)
            arr = np.empty(shape, dtype=object)
            arr.reshape(-1)[:] = [str(int(v)).encode() for v in values.reshape(-1)]
            out[io.name] = arr
        elif dt is DataType.BOOL:
            out[io.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif dt in (DataType.FP16, DataType.FP32, DataType.FP64):
            out[io.name] = rng.standard_normal(size=shape).astype(dt.numpy_dtype)
        else:
            out[io.name] = rng.integers(0, 10, size=shape).astype(dt.numpy_dtype)
    return out


def _check_output(config: ModelConfig, name: str, array: np.ndarray, batch: int) -> None:
    io = config.output_map[name]
    if io.datatype is DataType.BYTES:
        assert array.dtype == object or array.dtype.kind in "SU", (name, array.dtype)
    elif io.datatype is not DataType.BF16:
        assert array.dtype == io.datatype.numpy_dtype, (name, array.dtype, io.datatype)
    dims = (batch, *io.dims) if config.max_batch_size > 0 else io.dims
    assert len(array.shape) == len(dims), (name, array.shape, dims)
    for got, want in zip(array.shape, dims, strict=True):
        assert want == -1 or got == want, (name, array.shape, dims)


class BackendContract:
    """Inherited tests every backend must pass (see the module docstring)."""

    #: the plugin's entry-point module (imported in a subprocess by the light-import test)
    backend_module: ClassVar[str] = ""
    #: modules that importing ``backend_module`` must not import (the framework)
    framework_modules: ClassVar[tuple[str, ...]] = ()
    #: entry-point names of the plugins to load (``tritonx_plugins`` fixture)
    plugins: ClassVar[tuple[str, ...]] = ()

    @pytest.fixture
    def tritonx_plugins(self) -> tuple[str, ...]:
        return self.plugins

    @pytest.fixture
    def model(self, model_repository: Any) -> Path:
        raise NotImplementedError("a BackendContract subclass must define the 'model' fixture")

    @pytest.fixture
    def server_settings(self, model_repository: Any, model: Path) -> ServerSettings:
        from tritonx.testing import loopback_settings

        return loopback_settings(
            model_repository.root,
            model_control_mode="explicit",
            load_model=("*",),
            allow_http=False,
            allow_grpc=False,
            allow_metrics=False,
        )

    def make_inputs(
        self, config: ModelConfig, batch: int = 2, seed: int = 0
    ) -> dict[str, np.ndarray]:
        """Inputs for ``config``; override when the model needs particular values."""
        return example_inputs(config, batch, seed)

    def outputs_equal(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether two runs of the same input agree (override for nondeterministic models)."""
        if a.dtype.kind in "fc":
            return bool(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
        return bool(np.array_equal(a, b))

    # ------------------------------------------------------------------ the suite

    async def test_contract_load_ready(self, server: Server, model: Path) -> None:
        assert server.model_ready(model.name), server.status_table()

    async def test_contract_metadata(self, server: Server, model: Path) -> None:
        meta = server.model_metadata(model.name)
        config = server.model_config(model.name)
        assert meta.name == model.name
        assert meta.platform == (config.platform or config.backend)
        assert [t.name for t in meta.inputs] == [t.name for t in config.inputs]
        lead = (-1,) if config.max_batch_size > 0 else ()
        for spec, io in zip(meta.inputs, config.inputs, strict=True):
            assert spec.datatype == io.datatype.value
            assert spec.shape == lead + io.dims
        for spec, io in zip(meta.outputs, config.outputs, strict=True):
            assert spec.datatype == io.datatype.value
            assert spec.shape == lead + io.dims

    async def test_contract_single_infer(self, server: Server, model: Path) -> None:
        config = server.model_config(model.name)
        batch = 2 if config.max_batch_size >= 2 else 1
        response = await server.infer(InferenceRequest(model.name, self.make_inputs(config, batch)))
        assert response.error is None
        assert response.model_name == model.name
        assert set(response.outputs) == set(config.output_map)
        for name, array in response.outputs.items():
            _check_output(config, name, np.asarray(array), batch)

    async def test_contract_batch_of_requests(
        self, server: Server, model: Path, plugin_manager: pluggy.PluginManager
    ) -> None:
        config = server.model_config(model.name)
        requests = []
        for seed in range(3):
            req = InferenceRequest(model.name, self.make_inputs(config, 1, seed=seed + 1))
            req.batch_size = 1
            requests.append(req)
        singles = [
            await server.infer(InferenceRequest(model.name, dict(r.inputs))) for r in requests
        ]
        # a second instance of the backend, loaded the way the server loads one, is handed
        # the whole list at once
        backend_cls = collect(plugin_manager).backends.get(config.backend)
        assert backend_cls is not None, f"backend '{config.backend}' is not registered"
        version = max(int(v) for v in server.model_metadata(model.name).versions)
        version_path = model / str(version)
        filename = config.raw.default_model_filename or backend_cls.default_model_filename
        ctx = LoadContext(
            model_name=model.name,
            version=version,
            model_dir=model,
            version_path=version_path,
            model_path=version_path / filename if filename else None,
            config=config,
            instance=InstanceSpec(name=f"{model.name}_contract", group_name=model.name),
        )
        backend = backend_cls({})
        instance = await asyncio.to_thread(backend.load, ctx)
        try:
            responses = await asyncio.to_thread(instance.execute, requests)
        finally:
            await asyncio.to_thread(instance.unload)
            backend.close()
        assert responses is not None and len(responses) == len(requests)
        for single, batched in zip(singles, responses, strict=True):
            assert batched.error is None, batched.error
            for name in config.output_map:
                assert self.outputs_equal(
                    np.asarray(single.outputs[name]), np.asarray(batched.outputs[name])
                ), name

    async def test_contract_requested_output(self, server: Server, model: Path) -> None:
        config = server.model_config(model.name)
        first = config.outputs[0].name
        request = InferenceRequest(
            model.name, self.make_inputs(config, 1), requested_outputs=(first,)
        )
        response = await server.infer(request)
        assert list(response.outputs) == [first]

    async def test_contract_unload(self, server: Server, model: Path) -> None:
        await server.unload_model(model.name)
        assert not server.model_ready(model.name)
        rows = [r for r in server.repository_index() if r.name == model.name]
        assert rows and all(r.reason == "unloaded" for r in rows)
        await server.load_model(model.name)
        assert server.model_ready(model.name)

    def test_contract_light_import(self) -> None:
        if not self.backend_module:
            pytest.skip("no backend_module declared")
        code = (
            "import json, sys\n"
            f"import {self.backend_module}\n"
            f"print(json.dumps([m for m in {list(self.framework_modules)!r} if m in sys.modules]))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout.strip().splitlines()[-1]) == []
