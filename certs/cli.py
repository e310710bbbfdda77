"""`gpu-admission certs issue`, and the certificate start-up step of `serve --cert-dir`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

# Only the choices at import: the parser is built by every process, and the code that makes
# certificates imports cryptography (7.5 MiB resident), which the controller never uses.
from certs.defaults import DEFAULT_CA_VALIDITY, DEFAULT_SERVING_VALIDITY, KeyType

if TYPE_CHECKING:
    from certs.issue import CertBundle


def ensure_certificates(
    cert_dir: Path,
    service: str,
    namespace: str,
    dns: Sequence[str] = (),
    ips: Sequence[str] = (),
    key_type: KeyType | str = KeyType.ECDSA_P256,
    validity: timedelta = DEFAULT_SERVING_VALIDITY,
    ca_validity: timedelta = DEFAULT_CA_VALIDITY,
) -> CertBundle:
    """Load the certificates in `cert_dir`; with none there, issue a CA and serving cert first.

    Existing files are used as they are (renewal is CertReloader.run's job); files that do not
    fit together raise CertificateError naming the file.
    """
    from certs.issue import ServingSpec, issue_bundle
    from certs.store import FileStore

    store = FileStore(cert_dir)
    existing = store.load()
    if existing is not None:
        return existing
    spec = ServingSpec(
        service=service,
        namespace=namespace,
        dns=tuple(dns),
        ips=tuple(ips),
        key_type=KeyType(key_type),
        validity=validity,
        ca_validity=ca_validity,
    )
    return store.save(issue_bundle(spec))


def issue_command(
    out: Path,
    service: str,
    namespace: str,
    ips: list[str],
    dns: list[str],
    key_type: str,
    days: int,
) -> int:
    """Write a new CA and serving certificate to `out`. Exit 0 on success, 1 on failure."""
    from certs.issue import ServingSpec, issue_bundle
    from certs.pem import CertificateError
    from certs.store import ALL_KEYS, FileStore

    present = [name for name in ALL_KEYS if (out / name).exists()]
    if present:
        print(
            f"error: {out} already holds {', '.join(present)}; choose an empty directory or "
            "remove the files to issue new certificates",
            file=sys.stderr,
        )
        return 1
    try:
        spec = ServingSpec(
            service=service,
            namespace=namespace,
            dns=tuple(dns),
            ips=tuple(ips),
            key_type=KeyType(key_type),
            validity=timedelta(days=days),
            # A CA shorter-lived than the certificate it signs would cut the certificate short.
            ca_validity=max(DEFAULT_CA_VALIDITY, timedelta(days=days)),
        )
        bundle = FileStore(out).save(issue_bundle(spec))
    except (ValueError, CertificateError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    names = ", ".join([*spec.dns_names, *spec.ips])
    print(f"wrote {', '.join(ALL_KEYS)} to {out}")
    print(f"serving certificate for {names}, valid until {bundle.not_after:%Y-%m-%d %H:%M} UTC")
    print(f"caBundle for the webhook configurations: base64 of {out / 'ca.crt'}")
    return 0


def _positive_days(text: str) -> int:
    days = int(text)
    if days < 1:
        raise argparse.ArgumentTypeError("must be at least 1 day")
    return days


def add_certs_parser(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `certs issue`; `args.func(args)` runs it and returns the exit code."""
    certs = subparsers.add_parser("certs", help="manage the webhook's TLS certificates")
    certs_sub = certs.add_subparsers(dest="certs_command", required=True)
    issue = certs_sub.add_parser(
        "issue",
        help="issue a CA and a serving certificate into a directory",
        description="Issue a private CA and a serving certificate for <service>.<namespace>.svc "
        "and write ca.crt, ca.key, tls.crt and tls.key to --out.",
    )
    issue.add_argument("--out", type=Path, required=True, help="directory to write the files to")
    issue.add_argument("--service", required=True, help="name of the webhook's Service")
    issue.add_argument("--namespace", required=True, help="namespace of the webhook's Service")
    issue.add_argument(
        "--ip", action="append", default=[], dest="ips", help="extra IP SAN (repeatable)"
    )
    issue.add_argument(
        "--dns", action="append", default=[], dest="dns", help="extra DNS SAN (repeatable)"
    )
    issue.add_argument(
        "--key-type",
        choices=[k.value for k in KeyType],
        default=KeyType.ECDSA_P256.value,
        help="serving and CA key type (default: %(default)s)",
    )
    issue.add_argument(
        "--days",
        type=_positive_days,
        default=DEFAULT_SERVING_VALIDITY.days,
        help="serving certificate validity in days (default: %(default)s)",
    )
    issue.set_defaults(
        func=lambda args: issue_command(
            args.out, args.service, args.namespace, args.ips, args.dns, args.key_type, args.days
        )
    )
