"""Google's Security Token Service, as a test stand-in: the token exchange a workload identity
federation file names as its `token_url` (RFC 8693, as sts.googleapis.com/v1/token takes it).

It checks the subject token as a provider with default audiences does: signed by the cluster's
published keys, from its issuer, for `https:` + the provider named in the request's `audience`.
Then it answers with an access token (fake-gcs-server accepts any), or with Google's error form.
"""

from __future__ import annotations

import ssl
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.world.stand_ins.jwt_check import TokenRejected, fetch_jwks, verify
from tests.world.stand_ins.tls_server import send_json, start_https

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"


@dataclass
class GoogleSts:
    issuer: str
    ca_context: ssl.SSLContext
    workdir: Path  # where its CA goes: clients trust it as they trust Google's (SSL_CERT_FILE)
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    token_url: str = ""
    ca_path: Path = Path()
    host: str = "127.0.0.1"  # or the pod network's address, for loaders on the real node

    def __post_init__(self) -> None:
        sts = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                send_json(self, *sts.exchange(urllib.parse.parse_qs(body.decode())))

            def log_message(self, *_args: Any) -> None:
                pass

        # HTTPS, as the real one (the gcp-credential validation wants an https token_url).
        self._server, ca_pem = start_https("sts", Handler, self.host)
        self.ca_path = self.workdir / "google-sts-ca.crt"
        self.ca_path.write_bytes(ca_pem)
        self.token_url = f"https://{self.host}:{self._server.server_address[1]}/v1/token"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def exchange(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        def one(name: str) -> str:
            return (form.get(name) or [""])[0]

        if one("grant_type") != TOKEN_EXCHANGE:
            return 400, {"error": "unsupported_grant_type"}
        provider = one("audience")
        try:
            jwks = fetch_jwks(self.issuer, self.ca_context)
            claims = verify(one("subject_token"), jwks, self.issuer, "https:" + provider)
        except TokenRejected as exc:
            self.exchanges.append({"provider": provider, "outcome": f"rejected: {exc}"})
            return 400, {"error": "invalid_grant", "error_description": str(exc)}
        self.exchanges.append(
            {"provider": provider, "sub": claims.get("sub"), "aud": claims.get("aud")}
        )
        return 200, {
            "access_token": "ya29.test-access-token",
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 3600,
        }
