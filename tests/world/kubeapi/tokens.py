"""ServiceAccount tokens as kube-apiserver 1.36 issues them: the TokenRequest subresource
(`POST .../serviceaccounts/NAME/token`) and the issuer's OIDC discovery documents
(`/.well-known/openid-configuration`, `/openid/v1/jwks`) that cloud identity providers read.

Tokens are RS256 JWTs signed by a key made at start, with the claims of
pkg/serviceaccount/claims.go: `iss`, `sub` (`system:serviceaccount:<ns>:<name>`), `aud`, `exp`,
`iat`, `nbf`, `jti` and `kubernetes.io` (namespace, serviceaccount, and the pod a token is bound
to). TokenRequest validation follows pkg/apis/authentication/validation: at least 10 minutes, at
most 2^32 seconds; no audiences means the API server's own (its issuer).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from .errors import cause, invalid

MIN_SECONDS = 600
MAX_SECONDS = 2**32
DEFAULT_SECONDS = 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int_b64(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class TokenIssuer:
    def __init__(self, issuer: str = "https://kubernetes.default.svc.cluster.local") -> None:
        self.issuer = issuer
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.key_id = _b64(hashlib.sha256(public).digest())

    # -- discovery ------------------------------------------------------------------------------

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/openid/v1/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
        }

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        key = {
            "use": "sig",
            "kty": "RSA",
            "kid": self.key_id,
            "alg": "RS256",
            "n": _int_b64(numbers.n),
            "e": _int_b64(numbers.e),
        }
        return {"keys": [key]}

    # -- TokenRequest ---------------------------------------------------------------------------

    def request_token(
        self, account: dict[str, Any], body: dict[str, Any], pod: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The TokenRequest answered: `body` with `status.token` and `expirationTimestamp`."""
        spec = body.get("spec") or {}
        seconds = spec.get("expirationSeconds", DEFAULT_SECONDS)
        name = (account.get("metadata") or {}).get("name", "")
        if not isinstance(seconds, int) or seconds < MIN_SECONDS:
            message = f"Invalid value: {seconds}: may not specify a duration less than 10 minutes"
            raise invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                [cause("FieldValueInvalid", "spec.expirationSeconds", message)],
            )
        if seconds > MAX_SECONDS:
            message = (
                f"Invalid value: {seconds}: may not specify a duration larger than 2^32 seconds"
            )
            raise invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                [cause("FieldValueInvalid", "spec.expirationSeconds", message)],
            )
        audiences = list(spec.get("audiences") or [self.issuer])
        now = int(time.time())
        meta = account.get("metadata") or {}
        private: dict[str, Any] = {
            "namespace": meta.get("namespace", ""),
            "serviceaccount": {"name": name, "uid": meta.get("uid", "")},
        }
        if pod is not None:
            pod_meta = pod.get("metadata") or {}
            private["pod"] = {"name": pod_meta.get("name", ""), "uid": pod_meta.get("uid", "")}
        claims = {
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": self.issuer,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": private,
            "nbf": now,
            "sub": f"system:serviceaccount:{meta.get('namespace', '')}:{name}",
        }
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + seconds))
        answer = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": meta.get("namespace", "")},
            "spec": {**spec, "audiences": audiences, "expirationSeconds": seconds},
            "status": {"token": self.sign(claims), "expirationTimestamp": expires},
        }
        return answer

    def sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": "RS256", "kid": self.key_id}
        signing_input = (
            _b64(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64(json.dumps(claims, separators=(",", ":")).encode())
        )
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"
