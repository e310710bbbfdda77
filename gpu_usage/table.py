"""The node's table, as `gpu-admission gpu-usage --once` prints it: one line per GPU process,
then each GPU's memory no process lists, sorted by GPU and then by memory, largest first."""

from __future__ import annotations

from collections.abc import Sequence

from gpu_usage.attribution import UNLISTED, UsageRow
from gpu_usage.units import MIB

HEADER = ("PID", "NAMESPACE", "POD", "CONTAINER", "GPU", "MEMORY", "SM", "SHARE")


def _mib(value: int | None) -> str:
    return "?" if value is None else f"{value / MIB:,.0f} MiB"


def _share(row: UsageRow) -> str:
    if row.share_bytes is None:
        return "-"
    note = " (JAX pool)" if row.preallocated else ""
    if row.used_bytes is not None and not row.preallocated:
        note = f" ({100.0 * row.used_bytes / row.share_bytes:.0f}%)"
    return f"{_mib(row.share_bytes)}{note}"


def _cells(row: UsageRow) -> tuple[str, ...]:
    if row.command == UNLISTED and row.pid == 0:
        who: tuple[str, str, str, str] = ("-", "-", UNLISTED, "-")
    elif row.in_pod:
        who = (str(row.pid), row.namespace, row.pod, row.container)
    else:
        who = (str(row.pid), "-", f"(host) {row.command}", "-")
    gpu = f"{row.gpu.index} {row.gpu.model}"
    sm = "n/a" if row.sm_percent is None else f"{row.sm_percent:.0f}%"
    if row.pid == 0:
        sm = "-"
    return (*who, gpu, _mib(row.used_bytes), sm, _share(row))


def aligned(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    """Columns two spaces apart, each as wide as its widest cell (the agent's and `usage`'s)."""
    table = [header, *lines]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in table
    )


def render(rows: list[UsageRow]) -> str:
    if not rows:
        return "no GPU process on this node"
    ordered = sorted(rows, key=lambda r: (r.gpu.index, r.pid == 0, -(r.used_bytes or 0)))
    return aligned(HEADER, [_cells(row) for row in ordered])
