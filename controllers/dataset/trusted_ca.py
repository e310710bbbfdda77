"""The CA bundle loaders trust, from a ConfigMap, when the configuration names one.

rclone (Go's crypto/x509) and Python (OpenSSL) both read SSL_CERT_FILE as the file of trusted
CAs in place of the system's, so one mounted file and one variable cover every loader. Pure.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from gpu_admission.config.model import Config

TRUSTED_CA_VOLUME = "trusted-ca"
TRUSTED_CA_DIR = "/etc/gpu-admission/trusted-ca"
TRUSTED_CA_FILE = "ca.crt"


class TrustedCa(NamedTuple):
    volume: dict[str, Any]
    mount: dict[str, Any]
    env: dict[str, Any]


def trusted_ca(config: Config) -> TrustedCa | None:
    name = config.dataset.trusted_ca_config_map
    if not name:
        return None
    return TrustedCa(
        volume={
            "name": TRUSTED_CA_VOLUME,
            "configMap": {
                "name": name,
                "items": [{"key": config.dataset.trusted_ca_key, "path": TRUSTED_CA_FILE}],
            },
        },
        mount={"name": TRUSTED_CA_VOLUME, "mountPath": TRUSTED_CA_DIR, "readOnly": True},
        env={"name": "SSL_CERT_FILE", "value": f"{TRUSTED_CA_DIR}/{TRUSTED_CA_FILE}"},
    )
