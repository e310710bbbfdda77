"""Private keys as the files people put in credential Secrets hold them (PKCS#8 PEM)."""

from __future__ import annotations

import json
from pathlib import Path

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


def service_account_key_file(path: Path, client_email: str) -> Path:
    """A Google service-account key file at `path`, as the console downloads one."""
    document = {
        "type": "service_account",
        "project_id": "ml-platform-demo",
        "private_key_id": "3f1c2a9b7e6d5c4b3a2918f7e6d5c4b3a2918f7e",
        "private_key": new_rsa_pem(),
        "client_email": client_email,
        "client_id": "104729384756102938475",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    path.write_text(json.dumps(document))
    return path
