"""Reading the API server's refusals: what a Status says beyond its code."""

from __future__ import annotations

import contextlib
import json

from kubernetes.client.exceptions import ApiException


def namespace_terminating(exc: ApiException) -> bool:
    """Whether a create was refused because its namespace is being deleted: 403 with the cause
    `NamespaceTerminating` (kube-apiserver's NamespaceLifecycle admission plugin). Nothing can be
    made there any more; the namespace, and what was in it, is going."""
    if exc.status != 403:
        return False
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        body = json.loads(exc.body or "{}")
        causes = (body.get("details") or {}).get("causes") or []
        return any(c.get("reason") == "NamespaceTerminating" for c in causes)
    return False
