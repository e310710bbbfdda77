"""`gpu-admission certs issue` and the start-up step that fills an empty --cert-dir."""

from __future__ import annotations

import argparse
import ipaddress
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa

from certs.cli import add_certs_parser, ensure_certificates, issue_command
from certs.pem import CertificateError
from certs.store import FileStore


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu-admission")
    add_certs_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_issue_through_the_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    args = parse(
        [
            "certs",
            "issue",
            "--out",
            str(out),
            "--service",
            "gpu-admission",
            "--namespace",
            "gpu-system",
            "--ip",
            "10.96.0.20",
            "--ip",
            "::1",
            "--dns",
            "webhook.example.com",
        ]
    )
    assert args.func(args) == 0
    bundle = FileStore(out).load()
    assert bundle is not None and bundle.has_ca_key
    san = bundle.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gpu-admission.gpu-system.svc" in san.get_values_for_type(x509.DNSName)
    assert "webhook.example.com" in san.get_values_for_type(x509.DNSName)
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.96.0.20"),
        ipaddress.ip_address("::1"),
    ]
    printed = capsys.readouterr().out
    assert str(out) in printed and "gpu-admission.gpu-system.svc" in printed


def test_key_type_and_days(tmp_path: Path) -> None:
    assert issue_command(tmp_path, "svc", "ns", [], [], "rsa-3072", 30) == 0
    bundle = FileStore(tmp_path).load()
    assert bundle is not None
    public = bundle.certificate.public_key()
    assert isinstance(public, rsa.RSAPublicKey) and public.key_size == 3072
    assert bundle.not_after - bundle.not_before == timedelta(days=30)


def test_days_longer_than_the_default_ca_life_are_honoured(tmp_path: Path) -> None:
    assert issue_command(tmp_path, "svc", "ns", [], [], "ecdsa-p256", 3650) == 0
    bundle = FileStore(tmp_path).load()
    assert bundle is not None and bundle.not_after - bundle.not_before == timedelta(days=3650)


def test_existing_files_are_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert issue_command(tmp_path, "svc", "ns", [], [], "ecdsa-p256", 365) == 0
    before = (tmp_path / "tls.crt").read_bytes()
    assert issue_command(tmp_path, "svc", "ns", [], [], "ecdsa-p256", 365) == 1
    assert "already holds" in capsys.readouterr().err
    assert (tmp_path / "tls.crt").read_bytes() == before


def test_bad_ip_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert issue_command(tmp_path, "svc", "ns", ["10.0.0.300"], [], "ecdsa-p256", 365) == 1
    assert "'10.0.0.300' is not an IP address" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "argv",
    [
        ["certs", "issue", "--service", "s", "--namespace", "n"],  # no --out
        ["certs", "issue", "--out", "d", "--service", "s", "--namespace", "n", "--days", "0"],
        ["certs", "issue", "--out", "d", "--service", "s", "--namespace", "n", "--key-type", "dsa"],
    ],
)
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse(argv)
    assert caught.value.code == 2


def test_ensure_certificates_issues_into_an_empty_dir_then_loads(tmp_path: Path) -> None:
    cert_dir = tmp_path / "certs"
    issued = ensure_certificates(cert_dir, "gpu-admission", "gpu-system", ips=["127.0.0.1"])
    assert sorted(p.name for p in cert_dir.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert ensure_certificates(cert_dir, "gpu-admission", "gpu-system") == issued


def test_ensure_certificates_refuses_a_broken_dir(tmp_path: Path) -> None:
    ensure_certificates(tmp_path, "gpu-admission", "gpu-system")
    (tmp_path / "tls.key").write_bytes((tmp_path / "ca.key").read_bytes())
    with pytest.raises(CertificateError, match=str(tmp_path / "tls.key")):
        ensure_certificates(tmp_path, "gpu-admission", "gpu-system")
