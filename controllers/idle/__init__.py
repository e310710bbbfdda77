"""Idle GPUs announced and, where a namespace opts in, given back (docs/idle-gpus.md)."""

from controllers.idle.checker import IdleChecker, IdleMetrics

__all__ = ["IdleChecker", "IdleMetrics"]
