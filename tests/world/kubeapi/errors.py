"""Kubernetes ``Status`` errors raised inside the emulator and rendered like kube-apiserver's."""

from __future__ import annotations

from typing import Any


class StatusError(Exception):
    """An API failure that becomes a ``kind: Status`` response body with the given HTTP code."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def to_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # a webhook denial without a reason has none, like the real server
            status["reason"] = self.reason
        if self.details:
            status["details"] = self.details
        status["code"] = self.code
        return status


def _details(kind: str, group: str, name: str, causes: list[dict[str, Any]] | None = None) -> dict:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    if causes:
        details["causes"] = causes
    return details


def qualified(resource: str, group: str) -> str:
    """``pods`` for the core group, ``jobs.batch`` otherwise (as in apiserver messages)."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> StatusError:
    return StatusError(
        404,
        "NotFound",
        f'{qualified(resource, group)} "{name}" not found',
        _details(resource, group, name),
    )


def already_exists(resource: str, group: str, name: str) -> StatusError:
    return StatusError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        _details(resource, group, name),
    )


def conflict(resource: str, group: str, name: str) -> StatusError:
    return StatusError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": the object '
        "has been modified; please apply your changes to the latest version and try again",
        _details(resource, group, name),
    )


def forbidden(resource: str, group: str, name: str, message: str) -> StatusError:
    """``apierrors.NewForbidden``: 403 `<resource> "<name>" is forbidden: <message>`."""
    return StatusError(
        403,
        "Forbidden",
        f'{qualified(resource, group)} "{name}" is forbidden: {message}',
        _details(resource, group, name),
    )


def cause(reason: str, field: str, message: str) -> dict[str, str]:
    """One entry of an Invalid Status's details.causes."""
    return {"reason": reason, "message": message, "field": field}


def invalid(kind: str, group: str, name: str, causes: list[dict[str, Any]]) -> StatusError:
    """422 Invalid; each cause is ``{"reason": ..., "message": ..., "field": ...}``."""
    parts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    summary = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    qualified_kind = f"{kind}.{group}" if group else kind
    return StatusError(
        422,
        "Invalid",
        f'{qualified_kind} "{name}" is invalid: {summary}',
        _details(kind, group, name, causes),
    )


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def gone(message: str) -> StatusError:
    return StatusError(410, "Expired", message)
