"""Shared pytest configuration: the test world's fixtures (the real control plane, the admission
cluster) are available to every test, and the `e2e` marker is set by folder."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = [
    "tests.world.real_cluster",
    "tests.world.harness",
]

# Journeys across parts, the image tier (it builds and runs the container image) and the real-API
# tier (it starts kube-apiserver).
SLOW_FOLDERS = tuple(
    Path(__file__).resolve().parent / name for name in ("e2e", "image", "real_api", "install")
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/e2e and tests/image; elsewhere a module says so with `pytestmark`.
    for item in items:
        if any(item.path.is_relative_to(folder) for folder in SLOW_FOLDERS):
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say how the project's image was run, if anything ran it: a skipped image tier, or loader
    pods run as host processes, must never read as the image having been tested."""
    from tests.e2e.datasets import loader_images
    from tests.install.conftest import NOT_RUN, RAN_ON
    from tests.world import control_plane
    from tests.world.containers.engine import Unavailable, engine

    for version in dict.fromkeys(control_plane.STARTED):
        terminalreporter.write_line(f"real-API tier: ran against kube-apiserver {version}")
    if control_plane.SKIPPED and not control_plane.STARTED:
        reason = control_plane.SKIPPED[0]
        terminalreporter.write_line(f"real-API tier: NOT RUN ({reason})", yellow=True)

    for version in dict.fromkeys(RAN_ON):
        terminalreporter.write_line(f"install tier: ran on kubelet {version}")
    if NOT_RUN and not RAN_ON:
        terminalreporter.write_line(f"install tier: NOT RUN ({NOT_RUN[0]})", yellow=True)

    if engine.cache_info().currsize == 0:
        return  # nothing in this run needed the image
    found = engine()
    if isinstance(found, Unavailable):
        terminalreporter.write_line(f"image: NOT RUN ({found.reason})", yellow=True)
    else:
        terminalreporter.write_line(f"image: run with {found.kind}")
    if loader_images.cache_info().currsize:
        images = loader_images()
        where = (
            f"host processes ({images.reason})"
            if isinstance(images, Unavailable)
            else f"containers of {images.image}"
        )
        terminalreporter.write_line(f"dataset loader pods ran as {where}")
