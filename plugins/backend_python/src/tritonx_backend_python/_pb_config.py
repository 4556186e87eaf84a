"""``pb_utils.ModelConfig``: the config a model's ``auto_complete_config`` receives, completes
with Triton's checks (and error texts), and returns.

Part of the split of :mod:`tritonx_backend_python.pb_utils`, which re-exports it.
"""

from __future__ import annotations

import json
from typing import Any

from tritonx_backend_python._pb_base import TritonModelException


class ModelConfig:
    """The config ``auto_complete_config(auto_complete_model_config)`` receives and returns."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        config = json.loads(model_config) if isinstance(model_config, str) else model_config
        config.setdefault("input", [])
        config.setdefault("output", [])
        config.setdefault("max_batch_size", 0)
        self._model_config: dict[str, Any] = config

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a dict."""
        return self._model_config

    @property
    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Set ``max_batch_size`` (error if the config already has a larger one)."""
        current = int(self._model_config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Use the dynamic batcher unless another scheduler is configured."""
        for other in ("sequence_batching", "ensemble_scheduling"):
            if other in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but "
                    f"auto-complete-config function for model '{self._name}' tries to set "
                    "scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def _add_io(self, kind: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
        name = entry.get("name", "")
        for prop in entry:
            if prop not in allowed:
                listing = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model "
                    f"'{self._name}' contains property other than {listing}."
                )
        if "name" not in entry:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{self._name}' is missing "
                "'name' property."
            )
        for prop in ("data_type", "dims"):
            if prop not in entry:
                raise ValueError(
                    f"{kind} '{name}' in auto-complete-config function for model "
                    f"'{self._name}' is missing '{prop}' property."
                )
        for current in self._model_config[kind]:
            if current["name"] != name:
                continue
            ctype = current.get("data_type", "TYPE_INVALID")
            if ctype != "TYPE_INVALID" and ctype != entry["data_type"]:
                raise ValueError(
                    f"unable to load model '{self._name}', configuration expects datatype "
                    f"{ctype} for {kind} '{name}', model provides {entry['data_type']}"
                )
            cdims = [int(d) for d in current.get("dims", [])]
            if cdims and cdims != [int(d) for d in entry["dims"]]:
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects dims "
                    f"{list(entry['dims'])} but the model configuration specifies dims {cdims}"
                )
            if (
                "optional" in current
                and "optional" in entry
                and current["optional"] != entry["optional"]
            ):
                raise ValueError(
                    f"model '{self._name}', tensor '{name}': the model expects optional "
                    f"{entry['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = entry["data_type"]
            current["dims"] = list(entry["dims"])
            if "optional" in entry:
                current["optional"] = entry["optional"]
            return
        self._model_config[kind].append(dict(entry))

    def add_input(self, input: dict[str, Any]) -> None:
        """Add an input ``{name, data_type, dims[, optional]}`` (checked against the config)."""
        self._add_io("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        """Add an output ``{name, data_type, dims}`` (checked against the config)."""
        self._add_io("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set ``model_transaction_policy`` (``{"decoupled": bool}``)."""
        for prop in transaction_policy_dict:
            if prop != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for model "
                    f"'{self._name}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            new = bool(transaction_policy_dict["decoupled"])
            if "decoupled" in policy and bool(policy["decoupled"]) != new:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for model "
                    f"'{self._name}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = new


def auto_completed(result: object, config: dict[str, Any]) -> dict[str, Any]:
    """The config dict of what a model's ``auto_complete_config`` (given ``config``)
    returned: anything but a :class:`ModelConfig` (e.g. nothing) is refused with Triton's
    text (python_backend ``src/pb_stub.cc``)."""
    if not isinstance(result, ModelConfig):
        raise TritonModelException(
            f"auto_complete_config function in model '{config.get('name', '')}' must return "
            "a valid pb.ModelConfig object."
        )
    return result.as_dict()
