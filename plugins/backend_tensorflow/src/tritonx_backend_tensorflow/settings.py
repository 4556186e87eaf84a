"""The settings of the TensorFlow backend, read as Triton's tensorflow backend reads them:
``--backend-config=tensorflow,<key>=<value>`` (:class:`BackendSettings`) and a model's
``parameters`` (:class:`ModelSettings`).

Pure Python: nothing here imports tensorflow, so the rules are testable on their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonx.errors import invalid_arg

#: ``--backend-config=tensorflow,<key>`` keys (besides the global ``default-max-batch-size``).
BACKEND_KEYS = frozenset({"allow-soft-placement", "gpu-memory-fraction", "version"})

#: Triton's ``default-max-batch-size`` (the server passes 4 to every backend by default).
DEFAULT_MAX_BATCH_SIZE = 4

#: Every model ``parameters`` key Triton's tensorflow backend reads.
MODEL_KEYS = (
    "MAX_SESSION_SHARE_COUNT",
    "TF_NUM_INTRA_THREADS",
    "TF_NUM_INTER_THREADS",
    "TF_USE_PER_SESSION_THREADS",
    "TF_GRAPH_TAG",
    "TF_SIGNATURE_DEF",
    "TF_INIT_OPS_FILE",
)


def _bool(key: str, value: str) -> bool:
    """Triton's ``ParseBoolValue``: true/on/1 and false/off/0, any case."""
    v = value.strip().lower()
    if v in ("true", "on", "1", "yes"):
        return True
    if v in ("false", "off", "0", "no"):
        return False
    raise invalid_arg(f"failed to convert '{key}' value '{value}' to a boolean")


def _int(key: str, value: str, model: str = "") -> int:
    v = value.strip()
    try:
        return int(v)
    except ValueError:
        where = f" for TensorFlow model '{model}'" if model else ""
        raise invalid_arg(
            f"failed to convert '{key}' value '{value}' to an integer{where}"
        ) from None


@dataclass(frozen=True)
class BackendSettings:
    """``--backend-config=tensorflow,...``.

    :param allow_soft_placement: ``allow-soft-placement`` (default true): ops without a kernel
        for the instance's device run on the CPU.
    :param gpu_memory_fraction: ``gpu-memory-fraction`` (default 0: grow as needed).
    :param default_max_batch_size: ``default-max-batch-size`` (default 4), for auto-complete.
    """

    allow_soft_placement: bool = True
    gpu_memory_fraction: float = 0.0
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE


def parse_backend_config(config: Mapping[str, str]) -> BackendSettings:
    """Read the backend's ``--backend-config`` settings (Triton's messages)."""
    soft = True
    fraction = 0.0
    if "allow-soft-placement" in config:
        soft = _bool("allow-soft-placement", config["allow-soft-placement"])
    if "gpu-memory-fraction" in config:
        raw = config["gpu-memory-fraction"]
        try:
            fraction = float(raw.strip())
        except ValueError:
            raise invalid_arg(f"failed to convert 'gpu-memory-fraction' value '{raw}'") from None
        if not 0.0 <= fraction <= 1.0:
            raise invalid_arg(f"'gpu-memory-fraction' must be between 0.0 and 1.0, got '{raw}'")
    if "version" in config:
        version = config["version"].strip()
        if version != "2":
            raise invalid_arg(
                f"--backend-config=tensorflow,version={version}: only TensorFlow 2 is "
                "supported (as in Triton since 23.04)"
            )
    default_mbs = _int(
        "default-max-batch-size", config.get("default-max-batch-size", str(DEFAULT_MAX_BATCH_SIZE))
    )
    return BackendSettings(soft, fraction, default_mbs)


@dataclass(frozen=True)
class ModelSettings:
    """A model's ``parameters`` (Triton's tensorflow backend names).

    :param max_session_share_count: ``MAX_SESSION_SHARE_COUNT``: instances on one device that
        share one TF session (default 1: a session per instance).
    :param intra_threads: ``TF_NUM_INTRA_THREADS`` (0: TensorFlow picks).
    :param inter_threads: ``TF_NUM_INTER_THREADS`` (0: TensorFlow picks).
    :param per_session_threads: ``TF_USE_PER_SESSION_THREADS``.
    :param graph_tag: ``TF_GRAPH_TAG`` (default ``serve``).
    :param signature_def: ``TF_SIGNATURE_DEF`` (default ``serving_default``).
    :param init_ops_file: ``TF_INIT_OPS_FILE``: a JSON file ``{"init_ops": [...]}`` in the
        version folder or the model folder; the operations run once after the load.
    """

    max_session_share_count: int = 1
    intra_threads: int = 0
    inter_threads: int = 0
    per_session_threads: bool = False
    graph_tag: str = ""
    signature_def: str = ""
    init_ops_file: str = ""


def parse_model_settings(parameters: Mapping[str, str], model: str) -> ModelSettings:
    """Read ``parameters`` with Triton's rules and messages.

    Triton ignores keys it does not read; so does this backend (other plugins, repository
    agents and the core read ``parameters`` too).
    """
    p = parameters
    share = 1
    if "MAX_SESSION_SHARE_COUNT" in p:
        share = _int("MAX_SESSION_SHARE_COUNT", p["MAX_SESSION_SHARE_COUNT"], model)
        if share <= 0:
            raise invalid_arg(
                "parameter 'MAX_SESSION_SHARE_COUNT' must be positive number for TensorFlow "
                f"model '{model}'"
            )
    intra = 0
    if "TF_NUM_INTRA_THREADS" in p:
        intra = _int("TF_NUM_INTRA_THREADS", p["TF_NUM_INTRA_THREADS"], model)
        if intra < 0:
            raise invalid_arg(
                "parameter 'TF_NUM_INTRA_THREADS' must be non-negative number for TensorFlow "
                f"model '{model}'"
            )
    inter = 0
    if "TF_NUM_INTER_THREADS" in p:
        inter = _int("TF_NUM_INTER_THREADS", p["TF_NUM_INTER_THREADS"], model)
        if inter < 0:
            # Triton passes a negative value on to TensorFlow, which then runs every op in
            # the caller's thread; refused here rather than given that undocumented meaning
            raise invalid_arg(
                "parameter 'TF_NUM_INTER_THREADS' must be non-negative number for TensorFlow "
                f"model '{model}'"
            )
    per_session = False
    if "TF_USE_PER_SESSION_THREADS" in p:
        per_session = _bool("TF_USE_PER_SESSION_THREADS", p["TF_USE_PER_SESSION_THREADS"])
    return ModelSettings(
        max_session_share_count=share,
        intra_threads=intra,
        inter_threads=inter,
        per_session_threads=per_session,
        graph_tag=p.get("TF_GRAPH_TAG", ""),
        signature_def=p.get("TF_SIGNATURE_DEF", ""),
        init_ops_file=p.get("TF_INIT_OPS_FILE", ""),
    )
