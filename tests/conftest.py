"""Shared pytest configuration: the test world's fixtures (the API emulator, the admission
cluster) are available to every test, and the `e2e` marker is set by folder."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.world.kubeapi.pytest_plugin", "tests.world.harness"]

E2E_FOLDER = Path(__file__).resolve().parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/e2e is a journey; elsewhere a module says so with `pytestmark`.
    for item in items:
        if item.path.is_relative_to(E2E_FOLDER):
            item.add_marker(pytest.mark.e2e)
