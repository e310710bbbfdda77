"""The image tier: the image built from the Dockerfile (`make image`'s script), run as the
manifests and the loader Job spec run it. Where it cannot be built or run, the tier is skipped
with the reason (and fails in CI, which installs what it needs)."""

from __future__ import annotations

import os

import pytest

from tests.world.containers.engine import Engine, Unavailable, build_image, engine


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the image tier cannot run in CI: {reason}")
    pytest.skip(f"image tier: {reason}")


@pytest.fixture(scope="session")
def image() -> str:
    built = build_image()
    if isinstance(built, Unavailable):
        _unavailable(built.reason)
    assert isinstance(built, str)
    return built


@pytest.fixture(scope="session")
def runner(image: str) -> Engine:
    found = engine()
    if isinstance(found, Unavailable):
        _unavailable(found.reason)
    assert not isinstance(found, Unavailable)
    print(f"\nimage tier: {image} runs with {found.kind}")
    return found
