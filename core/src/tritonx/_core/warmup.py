"""Model warmup (``model_warmup``): sample requests run on every instance before a version
is READY (Triton core's ``TritonModelInstance::GenerateWarmupData`` and ``WarmUp``).

For each sample with ``batch_size`` > 0 the core builds ``batch_size`` requests of one item
each (a leading batch dimension of 1 when the model batches) from zero data, random data
(zeros for BYTES, as Triton) or a file under ``<model>/warmup/``, and hands them to each
loaded instance's ``execute`` directly, ``count`` times (at least once). Inputs that are not
model inputs (a sequence model's control tensors) are passed as given, as Triton's override
inputs. Warmup requests bypass the scheduler, so they never reach the statistics or metrics.
The first failing sample stops the warmup and fails the load with
"failed to run warmup sample '<name>': <error>; ".
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tritonx._core.validation import validate_request
from tritonx.backend import ModelInstance
from tritonx.batching import BatchIO
from tritonx.config import ModelConfig
from tritonx.datatypes import DataType, deserialize_bytes_tensor
from tritonx.errors import TritonXError, invalid_arg
from tritonx.proto import model_config_pb2
from tritonx.types import InferenceRequest, InferenceResponse, ResponseSender

if TYPE_CHECKING:
    from tritonx._core.scheduler import Scheduler

log = logging.getLogger("tritonx.warmup")

#: The folder of a model that holds ``input_data_file`` files.
WARMUP_FOLDER = "warmup"


@dataclass
class WarmupSample:
    """One ``model_warmup`` entry turned into requests (one per ``batch_size`` item)."""

    name: str
    count: int
    requests: list[InferenceRequest]


def build_samples(config: ModelConfig, model_dir: Path, version: int) -> list[WarmupSample]:
    """The warmup samples of ``config``, with Triton's errors for a bad setting."""
    samples: list[WarmupSample] = []
    rng = np.random.default_rng()
    for setting in config.raw.model_warmup:
        if setting.batch_size == 0:
            log.debug("Skipping batch 0 warmup sample '%s'", setting.name)
            continue
        log.debug("Generating warmup sample data for '%s'", setting.name)
        arrays: dict[str, np.ndarray] = {}
        for name, meta in sorted(setting.inputs.items()):
            if any(d == -1 for d in meta.dims):
                raise invalid_arg(
                    "warmup setting expects all variable-size dimensions are specified for "
                    f"input '{name}'"
                )
            arrays[name] = _input_data(name, meta, model_dir, rng)
        batching = config.max_batch_size != 0
        originals = config.input_map
        requests: list[InferenceRequest] = []
        for _ in range(setting.batch_size):
            inputs = {
                n: (a.reshape((1, *a.shape)) if batching else a).copy() for n, a in arrays.items()
            }
            request = InferenceRequest(
                config.name, {n: a for n, a in inputs.items() if n in originals}, version
            )
            validate_request(request, config)
            # control tensors and other non-model inputs go in as given (override inputs)
            request.inputs.update({n: a for n, a in inputs.items() if n not in originals})
            requests.append(request)
        samples.append(WarmupSample(setting.name, max(int(setting.count), 1), requests))
    return samples


def _input_data(name: str, meta: Any, model_dir: Path, rng: np.random.Generator) -> np.ndarray:
    """One input's data (without batch dimension) from a ``ModelWarmup.Input``."""
    datatype = DataType.from_config(model_config_pb2.DataType.Name(meta.data_type))
    shape = tuple(int(d) for d in meta.dims)
    count = int(np.prod(shape, dtype=np.int64))
    source = meta.WhichOneof("input_data_type")
    if source is None:
        raise invalid_arg(f"warmup setting expects input '{name}' to have input_data_type set")
    if source == "zero_data" or (source == "random_data" and datatype is DataType.BYTES):
        if datatype is DataType.BYTES:
            return np.full(shape, b"", dtype=object)
        return np.zeros(shape, dtype=datatype.numpy_dtype)
    if source == "random_data":
        if datatype is DataType.BOOL:
            return rng.integers(0, 2, size=shape).astype(np.bool_)
        dtype = datatype.numpy_dtype
        raw = rng.bytes(count * dtype.itemsize)
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    data = _read_warmup_file(model_dir, meta.input_data_file)
    if datatype is DataType.BYTES:
        items = deserialize_bytes_tensor(data)
        if items.size < count:
            raise invalid_arg(
                f"warmup setting expects {count} elements, but the data provided from "
                f"{meta.input_data_file} only has {items.size} elements"
            )
        return items[:count].reshape(shape)
    size = count * datatype.numpy_dtype.itemsize
    if size > len(data):
        # Triton's text, missing space included
        raise invalid_arg(
            f"warmup setting expects {size} bytes, but the data provided from "
            f"{meta.input_data_file}only has {len(data)} bytes"
        )
    return np.frombuffer(data[:size], dtype=datatype.numpy_dtype).reshape(shape).copy()


def _read_warmup_file(model_dir: Path, filename: str) -> bytes:
    folder = (model_dir / WARMUP_FOLDER).resolve()
    path = (folder / filename).resolve()
    if not filename or folder not in path.parents:
        raise invalid_arg(
            f"warmup input_data_file '{filename}' must name a file inside the model's "
            f"'{WARMUP_FOLDER}' folder"
        )
    try:
        return path.read_bytes()
    except OSError as exc:
        raise invalid_arg(
            f"failed to open text file for read {model_dir / WARMUP_FOLDER / filename}: "
            f"{os.strerror(exc.errno) if exc.errno else exc}"
        ) from exc


def run_samples(
    instance: ModelInstance,
    instance_name: str,
    config: ModelConfig,
    samples: Sequence[WarmupSample],
) -> None:
    """Run every sample ``count`` times on ``instance`` (its caller's thread); raise
    Triton's "failed to run warmup sample" error at the first failing one."""
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            log.debug(
                "model '%s' instance %s is running warmup sample '%s' for iteration %d",
                config.name,
                instance_name,
                sample.name,
                iteration,
            )
            errors = _execute(instance, config, sample.requests)
            if errors:
                log.debug(
                    "model '%s' instance %s failed to run warmup sample '%s'",
                    config.name,
                    instance_name,
                    sample.name,
                )
                raise invalid_arg(
                    f"failed to run warmup sample '{sample.name}': "
                    + "".join(f"{e}; " for e in errors)
                )


def _execute(
    instance: ModelInstance, config: ModelConfig, templates: Sequence[InferenceRequest]
) -> list[str]:
    """One execution of a sample's requests; the error messages of its responses."""
    errors: list[str] = []
    requests = [_fresh(r) for r in templates]
    batch_io = BatchIO.of(config)
    if batch_io is not None and batch_io.batch_inputs:  # as for every batch the core runs
        batch_io.attach(requests)
    finals: list[threading.Event] = []
    if config.decoupled:
        for request in requests:
            done = threading.Event()
            finals.append(done)

            def deliver(
                response: InferenceResponse | None, final: bool, done: threading.Event = done
            ) -> None:
                if response is not None and response.error is not None:
                    errors.append(response.error.message)
                if final:
                    done.set()

            request.response_sender = ResponseSender(deliver)
    try:
        responses = instance.execute(requests)
    except Exception as exc:
        return [TritonXError.wrap(exc).message]
    if config.decoupled:
        for done in finals:
            done.wait()
        return errors
    if responses is None or len(responses) != len(requests):
        got = "None" if responses is None else str(len(responses))
        return [f"model '{config.name}' returned {got} responses for {len(requests)} requests"]
    return [r.error.message for r in responses if r.error is not None]


def _fresh(template: InferenceRequest) -> InferenceRequest:
    """A new request with the template's (read-only shared) tensors."""
    request = InferenceRequest(template.model_name, dict(template.inputs), template.model_version)
    request.batch_size = template.batch_size
    return request


async def warm_up(scheduler: Scheduler, config: ModelConfig, model_dir: Path, version: int) -> None:
    """Warm every loaded instance of a started scheduler up; on failure stop the scheduler
    (its instances unload) and raise the warmup error."""
    if not config.raw.model_warmup:
        return
    try:
        samples = await asyncio.to_thread(build_samples, config, model_dir, version)
        if samples:
            names = _instance_names(config)
            await asyncio.gather(
                *(
                    asyncio.to_thread(
                        run_samples,
                        instance,
                        names[i] if i < len(names) else str(i),
                        config,
                        samples,
                    )
                    for i, instance in enumerate(scheduler.instances)
                    if instance is not None
                )
            )
    except BaseException:
        await scheduler.stop()
        raise


async def warm_up_instances(
    instances: list[tuple[str, ModelInstance]], config: ModelConfig, model_dir: Path, version: int
) -> None:
    """Warm up ``instances`` ((name, instance) pairs: those an instance-group update added)
    with the config's warmup samples; raises the warmup error."""
    if not config.raw.model_warmup or not instances:
        return
    samples = await asyncio.to_thread(build_samples, config, model_dir, version)
    if samples:
        await asyncio.gather(
            *(
                asyncio.to_thread(run_samples, instance, name, config, samples)
                for name, instance in instances
            )
        )


def _instance_names(config: ModelConfig) -> list[str]:
    kinds = model_config_pb2.ModelInstanceGroup.Kind
    names: list[str] = []
    for group in config.raw.instance_group:
        devices = len(group.gpus) if group.kind == kinds.KIND_GPU else 1
        names.extend(f"{group.name}_{n}" for n in range(group.count * max(devices, 1)))
    return names
