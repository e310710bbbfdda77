"""Checking a ServiceAccount token the way a cloud identity provider does: fetch the issuer's
OIDC discovery document and JWKS, verify the RS256 signature, then the issuer, audience and
expiry. For the test stand-ins of AWS STS and Google STS."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.request
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa


class TokenRejected(Exception):
    """The token is not one the provider trusts; the message says why."""


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def fetch_jwks(issuer: str, context: ssl.SSLContext) -> dict[str, Any]:
    """Discovery first, as providers do; then the key set it names."""
    with urllib.request.urlopen(f"{issuer}/.well-known/openid-configuration", context=context) as r:
        discovery = json.load(r)
    if discovery.get("issuer") != issuer:
        raise TokenRejected(f"discovery names issuer {discovery.get('issuer')!r}, not {issuer!r}")
    with urllib.request.urlopen(discovery["jwks_uri"], context=context) as r:
        return json.load(r)  # type: ignore[no-any-return]


def verify(token: str, jwks: dict[str, Any], issuer: str, audience: str) -> dict[str, Any]:
    """The token's claims, once its signature, issuer, audience and lifetime check out."""
    try:
        header_b64, claims_b64, signature_b64 = token.split(".")
        header = json.loads(_unb64(header_b64))
        claims: dict[str, Any] = json.loads(_unb64(claims_b64))
    except ValueError as exc:
        raise TokenRejected("not a JWT") from exc
    key = next((k for k in jwks.get("keys") or [] if k.get("kid") == header.get("kid")), None)
    if key is None or header.get("alg") != "RS256":
        raise TokenRejected("signed by a key the issuer does not publish")
    public = rsa.RSAPublicNumbers(
        int.from_bytes(_unb64(key["e"]), "big"), int.from_bytes(_unb64(key["n"]), "big")
    ).public_key()
    try:
        public.verify(
            _unb64(signature_b64),
            f"{header_b64}.{claims_b64}".encode(),
            padding.PKCS1v15(),
            hashes.SHA256(),
        )
    except InvalidSignature as exc:
        raise TokenRejected("the signature does not verify") from exc
    if claims.get("iss") != issuer:
        raise TokenRejected(f"issued by {claims.get('iss')!r}, not {issuer!r}")
    audiences = claims.get("aud") or []
    if audience not in (audiences if isinstance(audiences, list) else [audiences]):
        raise TokenRejected(f"audience {audiences!r} does not include {audience!r}")
    if not claims.get("exp", 0) > time.time() >= claims.get("nbf", 0) - 60:
        raise TokenRejected("expired or not yet valid")
    return claims
