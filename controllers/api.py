"""Calls to the Kubernetes API whose answers the controller does not need."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def write(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Make a write and read its answer to the end. The answer is not used, but an unread
    response keeps its connection out of the pool, so every next call would open a new TLS
    connection (measured: 199 connections for 200 creates)."""
    call(*args, _preload_content=False, **kwargs).data  # noqa: B018 - read to release
