"""How many loader shards a dataset PVC gets: its `data-load-parallelism` annotation, or the
configured default. Pure; the admission webhook refuses what this calls an error, and the
controller applies the same rule to what reached it anyway.

Several loader pods write one volume at once, possibly from different nodes, which only a
ReadWriteMany volume allows: a ReadWriteOnce volume attaches to one node, so shards scheduled
elsewhere would wait for ever (or, on one node, share a volume its driver did not promise to
share). The configured default only applies where it can: an RWO PVC that asked for nothing
gets one shard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

READ_WRITE_MANY = "ReadWriteMany"


@dataclass(frozen=True, slots=True)
class Parallelism:
    shards: int
    error: str | None = None  # why the annotation cannot be honoured, for the user


def load_parallelism(
    annotations: Mapping[str, str],
    access_modes: Sequence[str],
    key: str,
    default: int,
    maximum: int,
) -> Parallelism:
    shared = READ_WRITE_MANY in access_modes
    raw = annotations.get(key)
    if raw is None:
        return Parallelism(default if shared else 1)
    text = raw.strip()
    if not text.isdigit() or int(text) < 1:
        return Parallelism(
            1,
            f"{key}: {raw!r} is not a whole number of loader shards; set it to a number from "
            f"1 to {maximum}, or remove it",
        )
    shards = int(text)
    if shards > maximum:
        return Parallelism(
            1,
            f"{key}: {shards} shards is more than the {maximum} this cluster allows; ask for "
            f"{maximum} or fewer",
        )
    if shards > 1 and not shared:
        modes = ", ".join(access_modes) or "none"
        return Parallelism(
            1,
            f"{key}: {shards} loader shards write the volume at once, from any node, which only "
            f"a ReadWriteMany volume allows, but this PVC's accessModes are [{modes}]; request "
            f"ReadWriteMany (on a storage class that supports it) or load with 1 shard",
        )
    return Parallelism(shards)
