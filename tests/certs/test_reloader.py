"""CertReloader.run: renewing managed certificates on schedule, reloading external ones."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID
from kubernetes.client.exceptions import ApiException

from certs.issue import (
    CertBundle,
    KeyType,
    ServingSpec,
    api_server_host,
    generate_key,
    issue_bundle,
    renew_bundle,
)
from certs.pem import names_host
from certs.reloader import CertPaths, CertReloader
from certs.store import ALL_KEYS, FileStore, bundle_to_items

SPEC = ServingSpec(service="gpu-admission", namespace="gpu-system")
POLL = 0.02
TIMEOUT = 30.0


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Wait, bounded, for a state the background task reaches on its own schedule."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT
    while not predicate():
        if loop.time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(POLL)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class CountingStore(FileStore):
    loads = 0

    def load(self) -> CertBundle | None:
        self.loads += 1
        return super().load()


@pytest.fixture
async def stop() -> AsyncIterator[asyncio.Event]:
    event = asyncio.Event()
    yield event
    event.set()


async def test_managed_certificates_are_issued_then_renewed_at_two_thirds(
    tmp_path: Path, stop: asyncio.Event
) -> None:
    store = CountingStore(tmp_path)
    reloader = CertReloader()
    clock = Clock(datetime.now(UTC))
    published: list[tuple[int, int | None]] = []

    async def before_swap(bundle: CertBundle) -> None:
        published.append((bundle.serial, reloader.serial))

    task = asyncio.create_task(
        reloader.run(
            store, SPEC, poll_interval=POLL, before_swap=before_swap, stop=stop, clock=clock
        )
    )
    await eventually(lambda: reloader.loaded, "the first certificate to be issued and loaded")
    first = store.load()
    assert first is not None and reloader.serial == first.serial

    clock.now = first.renew_at() - timedelta(minutes=1)
    # Not due yet: several polls later the first certificate is still served.
    polls = store.loads
    await eventually(lambda: store.loads >= polls + 3, "three more polls")
    assert reloader.serial == first.serial and len(published) == 1

    clock.now = first.renew_at()
    await eventually(lambda: reloader.serial != first.serial, "the renewed certificate")
    renewed = store.load()
    assert renewed is not None and reloader.serial == renewed.serial
    assert renewed.ca_cert_pem == first.ca_cert_pem
    assert renewed.not_before == clock.now - timedelta(minutes=5)
    # The CA was published before each certificate was served, never after.
    assert published == [(first.serial, None), (renewed.serial, first.serial)]
    stop.set()
    await asyncio.wait_for(task, TIMEOUT)


def write_mounted_secret(directory: Path, version: str, items: dict[str, bytes]) -> None:
    """Lay files out as the kubelet does for a Secret volume: a versioned directory, a `..data`
    symlink swapped atomically to it, and top-level symlinks through `..data`."""
    versioned = directory / f"..{version}"
    versioned.mkdir()
    for name, value in items.items():
        (versioned / name).write_bytes(value)
    link = directory / "..data_tmp"
    link.symlink_to(versioned.name)
    os.replace(link, directory / "..data")
    for name in items:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


async def test_externally_managed_files_are_reloaded_when_the_mounted_secret_changes(
    tmp_path: Path, stop: asyncio.Event, caplog: pytest.LogCaptureFixture
) -> None:
    first = issue_bundle(SPEC)
    external = {"ca.crt": first.ca_cert_pem, "tls.crt": first.cert_pem, "tls.key": first.key_pem}
    write_mounted_secret(tmp_path, "v1", external)
    reloader = CertReloader()
    task = asyncio.create_task(reloader.run(FileStore(tmp_path), poll_interval=POLL, stop=stop))
    await eventually(lambda: reloader.serial == first.serial, "the mounted certificate")
    assert reloader.current is not None and not reloader.current.has_ca_key

    second = renew_bundle(first, SPEC)
    write_mounted_secret(
        tmp_path, "v2", {**external, "tls.crt": second.cert_pem, "tls.key": second.key_pem}
    )
    await eventually(lambda: reloader.serial == second.serial, "the rotated certificate")

    # A pair that does not fit together is refused; the loaded certificate keeps serving.
    third = renew_bundle(second, SPEC)
    with caplog.at_level(logging.WARNING, logger="certs.reloader"):
        write_mounted_secret(
            tmp_path, "v3", {**external, "tls.crt": third.cert_pem, "tls.key": second.key_pem}
        )
        await eventually(
            lambda: any("does not belong" in r.getMessage() for r in caplog.records),
            "the mismatched pair to be reported",
        )
    assert reloader.serial == second.serial

    write_mounted_secret(
        tmp_path, "v4", {**external, "tls.crt": third.cert_pem, "tls.key": third.key_pem}
    )
    await eventually(lambda: reloader.serial == third.serial, "the repaired certificate")
    stop.set()
    await asyncio.wait_for(task, TIMEOUT)


async def test_a_failed_ca_publish_keeps_the_old_certificate_serving(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    first = store.save(issue_bundle(SPEC))
    reloader = CertReloader()
    reloader.reload(first)
    store.save(renew_bundle(first, SPEC))

    async def failing_publish(bundle: CertBundle) -> None:
        raise ApiException(status=503, reason="Service Unavailable")

    with pytest.raises(ApiException):
        await reloader.check_once(store, SPEC, before_swap=failing_publish)
    assert reloader.serial == first.serial


async def test_renewal_due_without_a_ca_key_is_reported_and_the_stored_pair_served(
    tmp_path: Path, stop: asyncio.Event, caplog: pytest.LogCaptureFixture
) -> None:
    bundle = issue_bundle(SPEC)
    items = bundle_to_items(bundle)
    del items["ca.key"]
    for name, value in items.items():
        (tmp_path / name).write_bytes(value)
    reloader = CertReloader()
    clock = Clock(bundle.renew_at() + timedelta(seconds=1))
    with caplog.at_level(logging.WARNING, logger="certs.reloader"):
        task = asyncio.create_task(
            reloader.run(FileStore(tmp_path), SPEC, poll_interval=POLL, stop=stop, clock=clock)
        )
        await eventually(
            lambda: any("CA key is not available" in r.getMessage() for r in caplog.records),
            "the renewal failure to be reported",
        )
    # The stored certificate is still served, and the files are untouched.
    assert reloader.serial == bundle.serial
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n in ALL_KEYS if n in items)
    stop.set()
    await asyncio.wait_for(task, TIMEOUT)


def test_reload_from_paths(tmp_path: Path) -> None:
    bundle = issue_bundle(SPEC)
    FileStore(tmp_path).save(bundle)
    reloader = CertReloader()
    assert reloader.reload(CertPaths(tmp_path / "tls.crt", tmp_path / "tls.key"))
    assert reloader.loaded and reloader.serial == bundle.serial


def test_a_certificate_for_another_namespace_is_named_as_failing_every_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cert-manager Certificate whose dnsNames kept `gpu-admission` after the install moved to
    another namespace: served (nothing else can be), and the log says why every call fails."""
    FileStore(tmp_path).save(issue_bundle(SPEC))  # issued for gpu-admission.gpu-system.svc
    paths = CertPaths(tmp_path / "tls.crt", tmp_path / "tls.key")
    with caplog.at_level(logging.INFO, logger="certs.reloader"):
        assert CertReloader(api_server_host("gpu-admission", "gpu-system")).reload(paths)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="certs.reloader"):
        assert CertReloader(api_server_host("gpu-admission", "ml-platform")).reload(paths)
    [error] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "but not gpu-admission.ml-platform.svc" in error
    assert "gpu-admission.gpu-system.svc" in error  # what it names instead
    assert "docs/install.md#another-namespace" in error


@pytest.mark.parametrize(
    ("names", "host", "accepted"),
    [
        (["gpu-admission.ml.svc"], "gpu-admission.ml.svc", True),
        (["GPU-Admission.ml.svc."], "gpu-admission.ml.svc", True),
        (["*.ml.svc"], "gpu-admission.ml.svc", True),
        (["*.svc"], "gpu-admission.ml.svc", False),  # a wildcard covers one label
        (["gpu-admission.ml"], "gpu-admission.ml.svc", False),
        ([], "gpu-admission.ml.svc", False),
    ],
)
def test_names_host_as_a_tls_client_checks(names: list[str], host: str, accepted: bool) -> None:
    key = generate_key(KeyType.ECDSA_P256)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])  # counts for nothing
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(datetime.now(UTC))
        .not_valid_after(datetime.now(UTC) + timedelta(days=1))
    )
    if names:
        san = x509.SubjectAlternativeName([x509.DNSName(n) for n in names])
        builder = builder.add_extension(san, critical=False)
    assert names_host(builder.sign(key, hashes.SHA256()), host) is accepted
