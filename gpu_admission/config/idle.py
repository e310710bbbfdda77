"""The `idle` configuration section: the controller's leader reads the idle-GPU recording rules
from Prometheus, announces each idle workload once per idle stretch (a Warning Event `GPUIdle`)
and, in namespaces that opt in, gives its GPUs back after a grace period (docs/idle-gpus.md).
The idle-gpus component sets `prometheus_url` and brings the RBAC it needs."""

from __future__ import annotations

import urllib.parse
from typing import Annotated, Any

from pydantic import Field, field_validator

from gpu_admission.config.base import _Model, duration_seconds


class IdleConfig(_Model):
    prometheus_url: str | None = None
    """The Prometheus that evaluates the monitoring component's idle rules (e.g.
    http://prometheus-operated.monitoring:9090). Null: the controller reads no figures, writes
    no GPUIdle Event and gives nothing back."""
    interval: Annotated[float, Field(ge=1)] = 60.0
    """Seconds (or a duration: 30s, 5m) between the leader's checks of what is idle."""
    grace: Annotated[float, Field(ge=0)] = 1800.0
    """How long after the GPUIdle Event a workload in an opted-in namespace keeps its GPUs
    (seconds, or a duration: 30m). Using them in the meantime ends the idle stretch."""
    dry_run: bool = False
    """True: in opted-in namespaces, say (an Event and the audit log) what would be given back,
    and change nothing."""

    @field_validator("interval", "grace", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return duration_seconds(value)

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urllib.parse.urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be Prometheus's base URL, like http://prometheus-operated.monitoring:9090"
            )
        return value.rstrip("/")
