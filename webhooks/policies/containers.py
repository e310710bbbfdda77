"""Walking a pod's containers: every kind of container, with the JSON Pointer to it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """One container of a pod spec and where it lives in the pod."""

    list_name: str  # initContainers | containers | ephemeralContainers
    index: int
    container: Mapping[str, Any]

    @property
    def path(self) -> str:
        return f"/spec/{self.list_name}/{self.index}"

    @property
    def name(self) -> str:
        return str(self.container.get("name", ""))

    @property
    def describe(self) -> str:
        """How a user would call it in a message: `container "trainer"`, `init container "x"`."""
        kind = {
            "initContainers": "init container",
            "containers": "container",
            "ephemeralContainers": "ephemeral container",
        }[self.list_name]
        return f'{kind} "{self.name}"'

    def resource_names(self) -> set[str]:
        """Resource names in requests and limits."""
        resources = self.container.get("resources") or {}
        return set(resources.get("requests") or {}) | set(resources.get("limits") or {})

    def resource_quantity(self, name: str) -> tuple[str | None, str | None]:
        """(request, limit) for one resource, as the strings the API holds."""
        resources = self.container.get("resources") or {}
        request = (resources.get("requests") or {}).get(name)
        limit = (resources.get("limits") or {}).get(name)
        return (
            None if request is None else str(request),
            None if limit is None else str(limit),
        )

    def env_entries(self, name: str) -> list[Mapping[str, Any]]:
        return [e for e in self.container.get("env") or [] if e.get("name") == name]


def iter_containers(
    pod: Mapping[str, Any], lists: tuple[str, ...] = CONTAINER_LISTS
) -> Iterator[ContainerRef]:
    spec = pod.get("spec") or {}
    for list_name in lists:
        for index, container in enumerate(spec.get(list_name) or []):
            yield ContainerRef(list_name, index, container)
