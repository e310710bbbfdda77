"""Fixtures every journey may use: the object stores, started once per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.world.stand_ins.objectstores import GcsStore, S3Store, gcs_store, s3_store


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Store]:
    with s3_store() as store:
        yield store


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsStore]:
    with gcs_store() as store:
        yield store
