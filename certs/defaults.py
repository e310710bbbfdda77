"""The certificate choices users name (`certs issue --key-type`, `--days`), kept apart from the
code that makes certificates so that the command line is built without importing cryptography:
every process parses its command line, and only `serve` and `certs issue` make certificates."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

DEFAULT_CA_VALIDITY = timedelta(days=5 * 365)
DEFAULT_SERVING_VALIDITY = timedelta(days=365)


class KeyType(StrEnum):
    ECDSA_P256 = "ecdsa-p256"
    RSA_2048 = "rsa-2048"
    RSA_3072 = "rsa-3072"
