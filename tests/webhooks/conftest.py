"""Fixtures for the webhooks' tests."""

from __future__ import annotations

import pytest

from tests.support.keys import new_rsa_pem


@pytest.fixture(scope="module")
def rsa_pem() -> str:
    """An RSA private key for service-account key files (slow to make: once per module)."""
    return new_rsa_pem()
