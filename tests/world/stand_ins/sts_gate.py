"""AWS STS in front of moto, with what moto leaves out: checking the web identity token.

`AssumeRoleWithWebIdentity` arrives unsigned (as the SDKs send it); the gate fetches the
cluster's OIDC discovery and JWKS, verifies the token's signature, issuer and audience, and the
role's trust (which ServiceAccount may assume which role), then passes the call on to moto's STS,
signed with an IAM user's keys (moto, with authentication on, wants every call signed), so moto
issues real temporary credentials for the role. Refusals are STS's own error documents.
Everything the gate decided is in `exchanges`.
"""

from __future__ import annotations

import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.world.stand_ins.jwt_check import TokenRejected, fetch_jwks, verify

ACCESS_DENIED = """<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>
  <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>
</ErrorResponse>"""


@dataclass
class StsGate:
    moto: str  # moto's endpoint (STS is served there too)
    issuer: str
    ca_context: ssl.SSLContext
    keys: tuple[str, str]  # an IAM user's keys for signing the call on to moto
    audience: str = "sts.amazonaws.com"
    trust: dict[str, str] = field(default_factory=dict)  # role ARN -> allowed `sub`
    exchanges: list[dict[str, Any]] = field(default_factory=list)
    endpoint: str = ""
    host: str = "127.0.0.1"  # or the pod network's address, for loaders on the real node

    def __post_init__(self) -> None:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, content_type, answer = gate.handle(body)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://{self.host}:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, body: bytes) -> tuple[int, str, bytes]:
        form = urllib.parse.parse_qs(body.decode())
        action = (form.get("Action") or [""])[0]
        if action != "AssumeRoleWithWebIdentity":
            return self._refuse(
                400, "InvalidAction", f"the gate serves only web identity, not {action}"
            )
        role = (form.get("RoleArn") or [""])[0]
        token = (form.get("WebIdentityToken") or [""])[0]
        try:
            claims = verify(
                token, fetch_jwks(self.issuer, self.ca_context), self.issuer, self.audience
            )
        except TokenRejected as exc:
            self.exchanges.append({"role": role, "outcome": f"invalid token: {exc}"})
            return self._refuse(400, "InvalidIdentityToken", f"Couldn't verify the token: {exc}")
        record = {"role": role, "sub": claims.get("sub"), "aud": claims.get("aud")}
        if self.trust.get(role) != claims.get("sub"):
            self.exchanges.append({**record, "outcome": "not trusted"})
            return self._refuse(
                403, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity"
            )
        self.exchanges.append({**record, "outcome": "assumed"})
        return self._forward(body)

    def _forward(self, body: bytes) -> tuple[int, str, bytes]:
        headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}
        request = AWSRequest(method="POST", url=f"{self.moto}/", data=body, headers=headers)
        SigV4Auth(Credentials(*self.keys), "sts", "us-east-1").add_auth(request)
        call = urllib.request.Request(
            f"{self.moto}/", data=body, headers=dict(request.headers.items()), method="POST"
        )
        try:
            with urllib.request.urlopen(call) as response:
                return response.status, response.headers["Content-Type"], response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers["Content-Type"], error.read()

    @staticmethod
    def _refuse(status: int, code: str, message: str) -> tuple[int, str, bytes]:
        return status, "text/xml", ACCESS_DENIED.format(code=code, message=message).encode()
