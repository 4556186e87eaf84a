"""Which instances an instance-group update keeps, loads and retires (Triton's
``UpdateInstanceGroup``): a pure comparison of the running instances' load contexts with
the new config's, used by :meth:`~tritonx._core.instances.InstanceScheduler.update_instances`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tritonx.backend import LoadContext
from tritonx.proto import model_config_pb2


@dataclasses.dataclass
class GroupChanges:
    """What an instance-group update changes."""

    #: the contexts of the instances to load (not matching a running one), in config order
    added: list[LoadContext]
    #: whether each of ``added`` is passive
    added_passive: list[bool]
    #: the indexes of the running instances no new one matches (to retire)
    removed: list[int]


def match_instances(
    running: Sequence[LoadContext],
    out_of_service: Sequence[bool],
    contexts: Sequence[LoadContext],
    passive: Sequence[bool],
) -> GroupChanges:
    """Compare the instances running (``running`` by index, but those ``out_of_service``)
    with the new config's ``contexts``: a new instance whose group settings (all but the
    group's name and count) and device match a running one's reuses it; the others are
    added; running instances left over are removed."""
    by_signature: dict[bytes, list[int]] = {}
    for index, ctx in enumerate(running):
        if not out_of_service[index]:
            by_signature.setdefault(signature(ctx), []).append(index)
    added: list[LoadContext] = []
    added_passive: list[bool] = []
    for ctx, is_passive in zip(contexts, passive, strict=True):
        same = by_signature.get(signature(ctx))
        if same:
            same.pop()  # reused as it is (Triton takes the last one)
        else:
            added.append(ctx)
            added_passive.append(is_passive)
    removed = [index for indexes in by_signature.values() for index in indexes]
    return GroupChanges(added, added_passive, removed)


def signature(ctx: LoadContext) -> bytes:
    """What makes two instances interchangeable (Triton's ``InstanceConfigSignature`` and
    device): the group's settings but its name and count, and the device."""
    group = next(g for g in ctx.config.raw.instance_group if g.name == ctx.instance.group_name)
    normalized = model_config_pb2.ModelInstanceGroup()
    normalized.CopyFrom(group)
    normalized.name = ""
    normalized.count = 1
    return normalized.SerializeToString(deterministic=True) + str(ctx.instance.device_id).encode()
