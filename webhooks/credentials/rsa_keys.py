"""Checking that a PEM holds an RSA private key, with a bounded cache by content hash.

Loading an RSA key with cryptography verifies the key's consistency, which costs tens of
milliseconds; controllers and GitOps tools re-apply the same Secret over and over, so results are
kept in a small LRU keyed by the SHA-256 of the PEM. Only the digest and the verdict are kept,
never the key.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa

_PEM_BEGIN = b"-----BEGIN "

_KEY_KINDS: tuple[tuple[type, str], ...] = (
    (ec.EllipticCurvePrivateKey, "an EC key"),
    (ed25519.Ed25519PrivateKey, "an Ed25519 key"),
    (ed448.Ed448PrivateKey, "an Ed448 key"),
    (dsa.DSAPrivateKey, "a DSA key"),
)


def rsa_key_problem(pem: bytes) -> str | None:
    """None if `pem` is an unencrypted PEM RSA private key, else what is wrong (no key material)."""
    if _PEM_BEGIN not in pem:
        return (
            "must be a PEM private key starting with -----BEGIN PRIVATE KEY----- "
            "(newlines written as \\n in the JSON)"
        )
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:
        return "is encrypted with a password; use the unencrypted key file Google issues"
    except (ValueError, UnsupportedAlgorithm):
        return (
            "could not be read as a PEM private key (truncated or corrupted?); "
            "download a fresh key file"
        )
    if isinstance(key, rsa.RSAPrivateKey):
        return None
    kind = next((label for cls, label in _KEY_KINDS if isinstance(key, cls)), "not an RSA key")
    return f"is {kind}; a Google service-account key must be an RSA private key"


class RsaKeyChecker:
    """`rsa_key_problem` behind a bounded LRU keyed by the PEM's SHA-256."""

    def __init__(self, maxsize: int = 256) -> None:
        self._maxsize = maxsize
        self._results: OrderedDict[bytes, str | None] = OrderedDict()

    def __call__(self, pem: bytes) -> str | None:
        if self._maxsize <= 0:
            return rsa_key_problem(pem)
        digest = hashlib.sha256(pem).digest()
        if digest in self._results:
            self._results.move_to_end(digest)
            return self._results[digest]
        result = rsa_key_problem(pem)
        self._results[digest] = result
        if len(self._results) > self._maxsize:
            self._results.popitem(last=False)
        return result

    def __len__(self) -> int:
        return len(self._results)
