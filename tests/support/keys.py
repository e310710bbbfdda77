"""Private keys as the files people put in credential Secrets hold them (PKCS#8 PEM)."""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes


def pem(key: PrivateKeyTypes) -> str:
    """The key as PKCS#8 PEM, unencrypted, as Google's service-account key files hold it."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def new_rsa_pem() -> str:
    """A fresh 2048-bit RSA key (the size Google issues), as PEM."""
    return pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
