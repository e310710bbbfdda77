"""Micro-benchmark: the cost of one credential-secrets validation call, by kind of Secret.

Compares an Opaque Secret (the common case, which must pass at once), an aws-credential Secret,
and a gcp-credential service-account key with the RSA key check uncached (every call parses and
verifies the key), and cached by content hash (the default: re-applied Secrets hit the cache).
Run: `python -m bench.bench_secret_validation [--seconds 1.0]`.
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from webhooks.core.review import AdmissionRequest
from webhooks.policies.credential_secrets import policies

VIEW = StaticClusterView()


def _request(secret_type: str, values: dict[str, str]) -> AdmissionRequest:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "bench", "namespace": "ml"},
        "type": secret_type,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
    }
    return AdmissionRequest(
        uid="bench",
        kind="Secret",
        resource="secrets",
        sub_resource="",
        operation="CREATE",
        namespace="ml",
        name="bench",
        object=obj,
        old_object=None,
        dry_run=False,
    )


def _gcp_key_file() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "ml-platform-demo",
            "private_key_id": "3f1c2a9b7e6d5c4b3a2918f7e6d5c4b3a2918f7e",
            "private_key": pem,
            "client_email": "loader@ml-platform-demo.iam.gserviceaccount.com",
            "client_id": "104729384756102938475",
            "token_uri": "https://oauth2.googleapis.com/token",
        }
    )


def _per_call(call: Callable[[], object], seconds: float) -> tuple[float, int]:
    """Mean seconds per call over at least `seconds` (and at least 5 calls)."""
    call()  # warm up (and fill a cache, where there is one)
    calls = 0
    started = time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds and calls >= 5:
            return elapsed / calls, calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per case")
    args = parser.parse_args(argv)

    cached = policies(Config())[0].validate
    uncached = policies(Config.model_validate({"credentials": {"key_check_cache_size": 0}}))[
        0
    ].validate
    opaque = _request("Opaque", {"token": "x" * 64, "ca.crt": "y" * 1200})
    aws = _request(
        "aws-credential",
        {
            "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "AWS_REGION": "us-east-1",
        },
    )
    gcp = _request("gcp-credential", {"key.json": _gcp_key_file()})
    for validate, request in ((cached, opaque), (cached, aws), (cached, gcp), (uncached, gcp)):
        assert validate(request, VIEW).allowed

    cases = [
        ("Opaque (passes untouched)", lambda: cached(opaque, VIEW)),
        ("aws-credential", lambda: cached(aws, VIEW)),
        ("gcp-credential, RSA check uncached", lambda: uncached(gcp, VIEW)),
        ("gcp-credential, RSA check cached", lambda: cached(gcp, VIEW)),
    ]
    print(f"{'case':<40}{'per call':>14}{'calls':>10}")
    results = {}
    for label, call in cases:
        mean, calls = _per_call(call, args.seconds)
        results[label] = mean
        print(f"{label:<40}{mean * 1e6:>11.1f} us{calls:>10}")
    ratio = (
        results["gcp-credential, RSA check uncached"] / results["gcp-credential, RSA check cached"]
    )
    print(f"the RSA check cache makes a repeated gcp-credential validation {ratio:.0f}x cheaper")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
