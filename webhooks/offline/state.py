"""What `gpu-admission review` works with: a document of its input, the cluster state it reviews
against, and what it found of each document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_admission.cluster.view import ClusterView, MissResolver


@dataclass
class Document:
    source: str
    obj: dict[str, Any]


@dataclass
class ClusterState:
    view: ClusterView
    exempt_namespaces: set[str]
    resolver: MissResolver | None = None
    # Labelled for ServiceAccount-bound credentials (apiserver_policies.credential_namespaces).
    credential_namespaces: set[str] = field(default_factory=set)


@dataclass
class Result:
    document: Document
    allowed: bool = True
    changes: int = 0
    warnings: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    # What policies in audit (or warn) mode would have done, each as "policy (mode): what".
    recorded: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def identity(self) -> str:
        meta = self.document.obj.get("metadata") or {}
        namespace = meta.get("namespace")
        name = meta.get("name") or f"{meta.get('generateName', '')}<generated>"
        where = f"{namespace}/{name}" if namespace else name
        return f"{self.document.obj.get('kind')} {where} ({self.document.source})"
