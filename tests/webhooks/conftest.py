"""Fixtures for the webhooks' tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from certs.issue import CertBundle
from tests.support.keys import new_rsa_pem

from .server_helpers import client_context, issue_localhost_bundle


@pytest.fixture(scope="module")
def rsa_pem() -> str:
    """An RSA private key for service-account key files (slow to make: once per module)."""
    return new_rsa_pem()


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    """A CA and a serving certificate for 127.0.0.1, for the service over real HTTPS."""
    return issue_localhost_bundle()


@pytest.fixture
async def session(bundle: CertBundle) -> AsyncIterator[aiohttp.ClientSession]:
    """An HTTPS client that trusts `bundle`'s CA, as the API server trusts caBundle."""
    connector = aiohttp.TCPConnector(ssl=client_context(bundle))
    async with aiohttp.ClientSession(connector=connector) as client:
        yield client
