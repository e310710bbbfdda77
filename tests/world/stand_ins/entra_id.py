"""Microsoft Entra ID's token endpoint as a test stand-in: what Azure workload identity
(azidentity's WorkloadIdentityCredential, through MSAL) calls to trade a projected ServiceAccount
token for an access token to Azure Storage.

- `GET /{tenant}/v2.0/.well-known/openid-configuration`: the tenant discovery MSAL does first
  (authorization and token endpoints, issuer).
- `POST /{tenant}/oauth2/v2.0/token` with `grant_type=client_credentials`, `client_id`,
  `client_assertion` (the ServiceAccount token) and
  `client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer`.

It checks the assertion as a federated identity credential does: signed by the cluster's keys,
from its issuer, audience `api://AzureADTokenExchange`, and the subject the client id's
federated credential names; otherwise it answers with Entra's error form (`AADSTS...`). The
access token is a JWT for `https://storage.azure.com` from `https://sts.windows.net/{tenant}/`,
which Azurite in OAuth mode accepts (it checks issuer, audience and lifetime, not the signature).
Instance discovery is not served: clients are told to skip it (`disable_instance_discovery`),
as they are for private clouds.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.world.stand_ins.jwt_check import TokenRejected, fetch_jwks, verify
from tests.world.stand_ins.tls_server import send_json, start_https

AUDIENCE = "api://AzureADTokenExchange"
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
STORAGE_SCOPE = "https://storage.azure.com/.default"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass
class EntraId:
    issuer: str  # the cluster's service-account issuer
    ca_context: ssl.SSLContext  # to fetch the cluster's keys
    workdir: Path
    federated: dict[str, str] = field(default_factory=dict)  # client id -> allowed subject
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    authority_host: str = ""
    ca_path: Path = Path()
    host: str = "127.0.0.1"  # or the pod network's address, for loaders on the real node

    def __post_init__(self) -> None:
        entra = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                # MSAL adds query parameters (client info); the path alone routes.
                parts = urllib.parse.urlsplit(self.path).path.strip("/").split("/")
                if len(parts) == 4 and parts[1:] == ["v2.0", ".well-known", "openid-configuration"]:
                    send_json(self, 200, entra.discovery(parts[0]))
                else:
                    send_json(self, 404, {"error": "not_found"})

            def do_POST(self) -> None:
                parts = urllib.parse.urlsplit(self.path).path.strip("/").split("/")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if len(parts) == 4 and parts[1:] == ["oauth2", "v2.0", "token"]:
                    form = urllib.parse.parse_qs(body.decode())
                    send_json(self, *entra.token(parts[0], form))
                else:
                    send_json(self, 404, {"error": "not_found"})

            def log_message(self, *_args: Any) -> None:
                pass

        self._server, ca_pem = start_https("entra", Handler, self.host)
        self.ca_path = self.workdir / "entra-ca.crt"
        self.ca_path.write_bytes(ca_pem)
        self.authority_host = f"https://{self.host}:{self._server.server_address[1]}/"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def discovery(self, tenant: str) -> dict[str, Any]:
        base = self.authority_host.rstrip("/")
        return {
            "authorization_endpoint": f"{base}/{tenant}/oauth2/v2.0/authorize",
            "token_endpoint": f"{base}/{tenant}/oauth2/v2.0/token",
            "issuer": f"{base}/{tenant}/v2.0",
        }

    def token(self, tenant: str, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        def one(name: str) -> str:
            return (form.get(name) or [""])[0]

        client = one("client_id")
        if one("grant_type") != "client_credentials" or one("client_assertion_type") != JWT_BEARER:
            return 400, _error("invalid_request", 900144, "client assertion grant expected")
        try:
            jwks = fetch_jwks(self.issuer, self.ca_context)
            claims = verify(one("client_assertion"), jwks, self.issuer, AUDIENCE)
        except TokenRejected as exc:
            self.exchanges.append({"client": client, "outcome": f"rejected: {exc}"})
            return 401, _error("invalid_client", 700211, f"the assertion is not valid: {exc}")
        subject = claims.get("sub")
        if self.federated.get(client) != subject:
            self.exchanges.append(
                {"client": client, "outcome": f"no federated credential for {subject}"}
            )
            return 400, _error(
                "invalid_client",
                700213,
                f"No matching federated identity record found for presented assertion subject "
                f"'{subject}'",
            )
        self.exchanges.append(
            {"client": client, "tenant": tenant, "sub": subject, "aud": claims["aud"]}
        )
        now = int(time.time())
        access = {
            "aud": "https://storage.azure.com",
            "iss": f"https://sts.windows.net/{tenant}/",
            "iat": now,
            "nbf": now - 60,
            "exp": now + 3600,
            "appid": client,
            "tid": tenant,
        }
        token = (
            ".".join(
                _b64(json.dumps(part).encode()) for part in ({"typ": "JWT", "alg": "RS256"}, access)
            )
            + "."
            + _b64(b"stand-in")
        )
        return 200, {
            "token_type": "Bearer",
            "expires_in": 3599,
            "ext_expires_in": 3599,
            "access_token": token,
        }


def _error(error: str, code: int, description: str) -> dict[str, Any]:
    return {
        "error": error,
        "error_description": f"AADSTS{code}: {description}",
        "error_codes": [code],
    }
