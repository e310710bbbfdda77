"""The loader wrapper against Azure Blob (Azurite, with a real account key and real SAS
signatures) and against an HTTPS server whose certificate comes from a private CA: the way in the
Secret holds decides rclone's configuration, errors become permanent or transient causes, a
single file's SHA-256 is checked, and a directory listing is split into shards."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_admission.datasets.source import parse_data_source
from loaders.rclone import PERMANENT_EXIT_CODE
from loaders.report import classify
from loaders.sources import rclone_env
from tests.loaders.test_rclone import BIN, load
from tests.world.stand_ins.azurite import ACCOUNT, KEY, Azurite, azurite_or_skip
from tests.world.stand_ins.objectstores import dataset_files, tree
from tests.world.stand_ins.web_files import WebFiles, web_files

pytestmark = pytest.mark.e2e

FILES = dataset_files(files=30, large_bytes=1024 * 1024)
WEIGHTS = hashlib.sha512(b"weights").digest() * 4096  # 256 KiB
WEIGHTS_SHA256 = hashlib.sha256(WEIGHTS).hexdigest()


@pytest.fixture(scope="module")
def az() -> Iterator[Azurite]:
    with azurite_or_skip() as store:
        store.put("models", FILES, prefix="llama/7b/")
        yield store


@pytest.fixture(scope="module")
def web() -> Iterator[WebFiles]:
    with web_files() as server:
        server.put(FILES, prefix="sets/coco/")
        server.put({"model.safetensors": WEIGHTS}, prefix="models/v1/")
        yield server


def az_env(store: Azurite, **secret: str) -> dict[str, str]:
    """The loader pod's environment as the Job gives it: the Secret's keys by reference (an
    absent optional key arrives as an empty value), the endpoint from the configuration."""
    env = {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "RCLONE_CONFIG_SRC_TYPE": "azureblob",
        "RCLONE_AZUREBLOB_ENDPOINT": store.endpoint,
        "RCLONE_CONFIG_SRC_ACCOUNT": secret.pop("AZURE_STORAGE_ACCOUNT", ACCOUNT),
        "RCLONE_CONFIG_SRC_KEY": secret.pop("AZURE_STORAGE_KEY", ""),
        "AZURE_STORAGE_SAS_TOKEN": secret.pop("AZURE_STORAGE_SAS_TOKEN", ""),
        "AZURE_CLIENT_ID": "",
        "AZURE_TENANT_ID": "",
        "AZURE_FEDERATED_TOKEN_FILE": "/var/run/secrets/azure/tokens/azure-identity-token",
        "RCLONE_LOW_LEVEL_RETRIES": "2",
        "RCLONE_RETRIES": "1",
    }
    return env


def web_env(server: WebFiles) -> dict[str, str]:
    return {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "SSL_CERT_FILE": str(server.ca_path),  # what trusted_ca_config_map gives loader pods
        "RCLONE_LOW_LEVEL_RETRIES": "2",
        "RCLONE_RETRIES": "2",
        "RCLONE_RETRIES_SLEEP": "0.1s",
    }


# -- the environment each way in gets -----------------------------------------------------------


def test_the_way_in_the_secret_holds_configures_rclone() -> None:
    source = parse_data_source("az://models/llama")
    base = {"RCLONE_CONFIG_SRC_ACCOUNT": ACCOUNT, "RCLONE_CONFIG_SRC_KEY": ""}
    keyed = rclone_env(source, base | {"RCLONE_CONFIG_SRC_KEY": KEY})
    assert keyed["RCLONE_CONFIG_SRC_KEY"] == KEY and "RCLONE_CONFIG_SRC_SAS_URL" not in keyed
    sas = rclone_env(source, base | {"AZURE_STORAGE_SAS_TOKEN": "?sv=1&sig=abc"})
    assert sas["RCLONE_CONFIG_SRC_SAS_URL"] == (
        f"https://{ACCOUNT}.blob.core.windows.net/models?sv=1&sig=abc"
    )
    assert "AZURE_STORAGE_SAS_TOKEN" not in sas and "RCLONE_CONFIG_SRC_KEY" not in sas
    keyless = rclone_env(
        source,
        base | {"AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t", "AZURE_FEDERATED_TOKEN_FILE": "/f"},
    )
    assert keyless["RCLONE_CONFIG_SRC_ENV_AUTH"] == "true"
    assert keyless["AZURE_FEDERATED_TOKEN_FILE"] == "/f"
    web = rclone_env(parse_data_source("https://h.example/m/w.bin"), {})
    assert web["RCLONE_CONFIG_SRC_TYPE"] == "http"
    assert web["RCLONE_CONFIG_SRC_URL"] == "https://h.example/m/"


# -- Azure Blob ---------------------------------------------------------------------------------


def test_az_copy_with_the_account_key(az: Azurite, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    code, summary, _ = load("az://models/llama/7b", dest, az_env(az, AZURE_STORAGE_KEY=KEY))
    assert code == 0, summary
    assert tree(dest) == FILES
    assert summary["files"] == len(FILES) and summary["phase"] == "Succeeded"


def test_az_copy_with_a_sas_token(az: Azurite, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    env = az_env(az, AZURE_STORAGE_SAS_TOKEN=az.sas_token("models"))
    code, summary, _ = load("az://models/llama/7b", dest, env)
    assert code == 0, summary
    assert tree(dest) == FILES


def test_a_wrong_key_is_permanent_and_never_echoed(az: Azurite, tmp_path: Path) -> None:
    wrong = base64.b64encode(b"w" * 64).decode()
    code, summary, log = load(
        "az://models/llama/7b", tmp_path / "d", az_env(az, AZURE_STORAGE_KEY=wrong)
    )
    assert code == PERMANENT_EXIT_CODE
    assert summary["cause"].startswith("the storage service rejected the credentials")
    assert wrong not in summary["cause"] and wrong not in log


def test_a_sas_signed_with_another_key_is_permanent_and_never_echoed(
    az: Azurite, tmp_path: Path
) -> None:
    forged = az.sas_token("models", key=base64.b64encode(b"f" * 64).decode())
    env = az_env(az, AZURE_STORAGE_SAS_TOKEN=forged)
    code, summary, log = load("az://models/llama/7b", tmp_path / "d", env)
    assert code == PERMANENT_EXIT_CODE
    assert summary["permanent"] is True
    signature = forged.split("sig=")[1]
    assert signature not in log and signature not in summary["cause"]


def test_a_missing_container_is_permanent_and_named(az: Azurite, tmp_path: Path) -> None:
    code, summary, _ = load(
        "az://no-such-models/x", tmp_path / "d", az_env(az, AZURE_STORAGE_KEY=KEY)
    )
    assert code == PERMANENT_EXIT_CODE
    assert summary["cause"].startswith("the source was not found")


def test_an_unreachable_blob_service_is_transient(tmp_path: Path) -> None:
    env = {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "RCLONE_AZUREBLOB_ENDPOINT": "http://127.0.0.1:9/acct",
        "RCLONE_CONFIG_SRC_ACCOUNT": ACCOUNT,
        "RCLONE_CONFIG_SRC_KEY": KEY,
        "RCLONE_LOW_LEVEL_RETRIES": "1",
        "RCLONE_RETRIES": "1",
    }
    code, summary, _ = load("az://models/x", tmp_path / "d", env)
    assert code not in (0, PERMANENT_EXIT_CODE)
    assert summary["permanent"] is False


def test_az_sharded_load_puts_every_blob_in_exactly_one_shard(az: Azurite, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    listings, copied = set(), 0
    for index in range(3):
        code, summary, _ = load(
            "az://models/llama/7b",
            dest,
            az_env(az, AZURE_STORAGE_KEY=KEY),
            shard_index=index,
            shard_count=3,
        )
        assert code == 0, summary
        listings.add(summary["listing"])
        copied += summary["files"]
        assert summary["listedFiles"] == len(FILES)
    assert len(listings) == 1 and copied == len(FILES)
    assert tree(dest) == FILES


# -- HTTPS --------------------------------------------------------------------------------------


def test_one_file_over_https_with_its_digest(web: WebFiles, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    code, summary, _ = load(
        web.url("models/v1/model.safetensors"), dest, web_env(web), sha256=WEIGHTS_SHA256.upper()
    )
    assert code == 0, summary
    assert tree(dest) == {"model.safetensors": WEIGHTS}
    assert summary["files"] == 1 and summary["bytes"] == len(WEIGHTS)


def test_a_digest_that_differs_is_permanent_names_both_and_removes_the_file(
    web: WebFiles, tmp_path: Path
) -> None:
    dest = tmp_path / "data"
    expected = "0" * 64
    code, summary, _ = load(
        web.url("models/v1/model.safetensors"), dest, web_env(web), sha256=expected
    )
    assert code == PERMANENT_EXIT_CODE
    assert summary["permanent"] is True and summary["phase"] == "Failed"
    assert WEIGHTS_SHA256 in summary["cause"] and expected in summary["cause"]
    assert not (dest / "model.safetensors").exists()


def test_a_directory_listing_over_https(web: WebFiles, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    code, summary, _ = load(web.url("sets/coco/"), dest, web_env(web))
    assert code == 0, summary
    assert tree(dest) == FILES


def test_a_sharded_https_directory(web: WebFiles, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    copied = 0
    for index in range(2):
        code, summary, _ = load(
            web.url("sets/coco/"), dest, web_env(web), shard_index=index, shard_count=2
        )
        assert code == 0, summary
        copied += summary["files"]
    assert copied == len(FILES) and tree(dest) == FILES


def test_a_file_the_server_will_not_serve_fails_the_directory_load(
    web: WebFiles, tmp_path: Path
) -> None:
    # rclone's default per-file HEAD would drop this file from the listing and exit 0.
    web.put(FILES, prefix="sets/partly/")
    broken = "part-1/shard-1/file-0001.bin"
    web.fail(f"/sets/partly/{broken}", 503)
    dest = tmp_path / "data"
    code, summary, _ = load(web.url("sets/partly/"), dest, web_env(web))
    assert code not in (0, PERMANENT_EXIT_CODE), summary
    assert summary["phase"] == "Failed" and summary["permanent"] is False
    assert not (dest / broken).exists()


def test_an_untrusted_certificate_fails(web: WebFiles, tmp_path: Path) -> None:
    env = web_env(web)
    del env["SSL_CERT_FILE"]
    code, summary, _ = load(web.url("models/v1/model.safetensors"), tmp_path / "d", env)
    assert code == PERMANENT_EXIT_CODE  # the same certificate fails the same way every time
    assert summary["cause"].startswith("the server's TLS certificate is not trusted")
    assert "dataset.trusted_ca_config_map" in summary["cause"]


def test_a_missing_file_is_permanent(web: WebFiles, tmp_path: Path) -> None:
    code, summary, _ = load(web.url("models/v1/nope.bin"), tmp_path / "d", web_env(web))
    assert code == PERMANENT_EXIT_CODE
    assert summary["cause"].startswith("the source was not found")


def test_throttling_is_retried_and_then_succeeds(web: WebFiles, tmp_path: Path) -> None:
    web.fail("/models/v1/model.safetensors", 503, times=1, Retry_After="0")
    dest = tmp_path / "data"
    code, summary, _ = load(web.url("models/v1/model.safetensors"), dest, web_env(web))
    assert code == 0, summary
    assert tree(dest) == {"model.safetensors": WEIGHTS}


def test_an_outage_that_lasts_is_transient(web: WebFiles, tmp_path: Path) -> None:
    web.fail("/sets/down/", 503)
    web.put({"f.bin": b"x"}, prefix="sets/down/")
    code, summary, _ = load(web.url("sets/down/f.bin"), tmp_path / "d", web_env(web))
    assert code not in (0, PERMANENT_EXIT_CODE)
    assert summary["permanent"] is False
    assert "throttling requests or briefly unavailable" in summary["cause"]


def test_workload_identity_failures_are_permanent_unless_entra_was_unreachable() -> None:
    refused = (
        'Failed to create file system for "src:models": DefaultAzureCredential: failed to '
        "acquire a token.\n\tWorkloadIdentityCredential authentication failed.\n\t\t"
        "AADSTS700213: No matching federated identity record found for presented assertion"
    )
    cause, permanent = classify([refused], 1, {"subject": "system:serviceaccount:ml:default"})
    assert permanent
    assert cause.startswith("Azure workload identity got no token")
    assert "system:serviceaccount:ml:default" in cause and "(rclone: AADSTS700213" in cause
    unreachable = (
        "DefaultAzureCredential: failed to acquire a token.\n\tWorkloadIdentityCredential "
        "authentication failed. dial tcp 10.0.0.1:443: connect: connection refused"
    )
    cause, permanent = classify([unreachable], 1)
    assert not permanent and cause.startswith("the identity service could not be reached")
