"""Storing certificates in a directory: round trip, permissions, and refusing bad pairs."""

from __future__ import annotations

import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from certs.issue import CertBundle, ServingSpec, issue_bundle, renew_bundle
from certs.pem import CertificateError
from certs.store import FileStore

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SPEC = ServingSpec(service="gpu-admission", namespace="gpu-system")


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    return issue_bundle(SPEC, NOW)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_round_trip(tmp_path: Path, bundle: CertBundle) -> None:
    store = FileStore(tmp_path / "certs")
    store.save(bundle)
    assert store.load() == bundle


def test_keys_are_owner_only_and_no_temp_files_remain(tmp_path: Path, bundle: CertBundle) -> None:
    directory = tmp_path / "certs"
    FileStore(directory).save(bundle)
    assert sorted(p.name for p in directory.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert mode(directory / "ca.key") == 0o600
    assert mode(directory / "tls.key") == 0o600
    assert mode(directory / "tls.crt") == 0o644
    assert mode(directory / "ca.crt") == 0o644
    assert mode(directory) == 0o700


def test_overwrite_replaces_files_and_keeps_permissions(tmp_path: Path, bundle: CertBundle) -> None:
    store = FileStore(tmp_path)
    store.save(bundle)
    (tmp_path / "tls.key").chmod(0o644)  # someone loosened it; the rewrite must not inherit that
    renewed = renew_bundle(bundle, SPEC, now=bundle.renew_at())
    store.save(renewed)
    assert store.load() == renewed
    assert mode(tmp_path / "tls.key") == 0o600


def test_empty_directory_loads_as_nothing(tmp_path: Path) -> None:
    assert FileStore(tmp_path).load() is None
    assert FileStore(tmp_path / "absent").load() is None


def test_retired_cas_survive_the_round_trip_in_ca_crt(tmp_path: Path, bundle: CertBundle) -> None:
    rotated = renew_bundle(bundle, SPEC, now=bundle.ca_renew_at())
    store = FileStore(tmp_path)
    store.save(rotated)
    assert (tmp_path / "ca.crt").read_bytes() == rotated.ca_cert_pem + bundle.ca_cert_pem
    loaded = store.load()
    assert loaded == rotated
    assert loaded is not None and loaded.retired_ca_pem == bundle.ca_cert_pem


def test_a_plain_tls_pair_without_ca_files_loads(tmp_path: Path, bundle: CertBundle) -> None:
    (tmp_path / "tls.crt").write_bytes(bundle.cert_pem)
    (tmp_path / "tls.key").write_bytes(bundle.key_pem)
    loaded = FileStore(tmp_path).load()
    assert loaded is not None
    assert loaded.serial == bundle.serial
    assert not loaded.has_ca_key and loaded.ca_bundle_pem == b""


def test_mismatched_serving_key_names_the_file(tmp_path: Path, bundle: CertBundle) -> None:
    FileStore(tmp_path).save(bundle)
    other = issue_bundle(SPEC, NOW)
    (tmp_path / "tls.key").write_bytes(other.key_pem)
    with pytest.raises(CertificateError) as caught:
        FileStore(tmp_path).load()
    message = str(caught.value)
    assert str(tmp_path / "tls.key") in message
    assert str(tmp_path / "tls.crt") in message
    assert "does not belong" in message
    assert "PRIVATE KEY" not in message


def test_mismatched_ca_key_names_the_file(tmp_path: Path, bundle: CertBundle) -> None:
    FileStore(tmp_path).save(bundle)
    (tmp_path / "ca.key").write_bytes(bundle.key_pem)
    with pytest.raises(CertificateError, match=r"ca\.key does not belong"):
        FileStore(tmp_path).load()


def test_half_a_pair_names_the_missing_file(tmp_path: Path, bundle: CertBundle) -> None:
    FileStore(tmp_path).save(bundle)
    (tmp_path / "tls.key").unlink()
    with pytest.raises(CertificateError, match=r"tls\.key is missing or empty"):
        FileStore(tmp_path).load()


def test_ca_files_without_a_serving_pair_are_refused(tmp_path: Path, bundle: CertBundle) -> None:
    FileStore(tmp_path).save(bundle)
    (tmp_path / "tls.key").unlink()
    (tmp_path / "tls.crt").unlink()
    with pytest.raises(CertificateError, match=r"ca\.crt exists but"):
        FileStore(tmp_path).load()


@pytest.mark.parametrize("name", ["tls.crt", "tls.key", "ca.crt"])
def test_unreadable_pem_names_the_file(tmp_path: Path, bundle: CertBundle, name: str) -> None:
    FileStore(tmp_path).save(bundle)
    (tmp_path / name).write_bytes(b"not pem at all\n")
    with pytest.raises(CertificateError, match=str(tmp_path / name)):
        FileStore(tmp_path).load()


def test_fingerprint_follows_content(tmp_path: Path, bundle: CertBundle) -> None:
    store = FileStore(tmp_path)
    store.save(bundle)
    first = store.fingerprint()
    assert store.fingerprint() == first
    store.save(renew_bundle(bundle, SPEC, now=bundle.renew_at()))
    assert store.fingerprint() != first
