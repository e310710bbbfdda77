"""RawWriter against the real kube-apiserver (through the fault proxy, which plays the 429s that
priority and fairness gives a client over its share)."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, Configuration
from kubernetes.client.exceptions import ApiException

from controllers.writes.raw import (
    STRATEGIC_MERGE,
    RawWriter,
    proxy_of,
    retry_after_seconds,
    tls_context,
)
from gpu_admission.cluster.api_connections import Proxy
from gpu_admission.process import event_loop
from tests.world.namespaces import namespace_ready

NS = "raw-writes"
CONFIGMAPS = rf"/api/v1/namespaces/{NS}/configmaps"


def config_map(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}}


class Clock:
    """Sleeps taken, not slept: the waits are the figure under test."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
async def writer(kube_api, kube_client) -> AsyncIterator[tuple[RawWriter, Clock]]:
    namespace_ready(kube_client, NS)
    clock = Clock()
    raw = RawWriter(kube_client, max_retries=3, clock=clock, sleep=clock.sleep)
    yield raw, clock
    await raw.close()


async def test_a_write_is_the_real_servers_answer(writer, kube_client) -> None:
    raw, _ = writer
    made = json.loads(await raw.request("POST", CONFIGMAPS, config_map("plain")))
    assert made["metadata"]["resourceVersion"]
    patch = {"metadata": {"labels": {"patched": "yes"}}}
    await raw.request("PATCH", f"{CONFIGMAPS}/plain", patch, STRATEGIC_MERGE)
    stored = client.CoreV1Api(kube_client).read_namespaced_config_map("plain", NS)
    assert stored.metadata.labels == {"patched": "yes"} and stored.data == {"a": "1"}


async def test_a_429_is_waited_out_and_slows_every_writer(writer, kube_api, caplog) -> None:
    raw, clock = writer
    kube_api.faults.fail("POST", rf"{CONFIGMAPS}$", code=429, times=2, retry_after=2)
    await raw.request("POST", CONFIGMAPS, config_map("throttled"))
    assert kube_api.faults.request_count("POST", rf"{CONFIGMAPS}$") == 3
    assert raw.throttled == 2 and clock.slept == [2.0, 2.0]
    said = [r.getMessage() for r in caplog.records if "HTTP 429" in r.getMessage()]
    assert len(said) == 2  # once per throttled spell: each wait here ends before the next 429
    # A later write of any kind waits until the last Retry-After has passed: here it has.
    await raw.request("POST", CONFIGMAPS, config_map("after"))
    assert clock.slept == [2.0, 2.0]


async def test_past_its_retries_a_429_is_raised_and_nothing_is_written(writer, kube_api) -> None:
    raw, _ = writer
    kube_api.faults.fail("POST", rf"{CONFIGMAPS}$", code=429, times=None, retry_after=1)
    with pytest.raises(ApiException) as raised:
        await raw.request("POST", CONFIGMAPS, config_map("never"))
    kube_api.faults.clear()
    assert raised.value.status == 429 and raised.value.headers["Retry-After"] == "1"
    assert kube_api.faults.request_count("POST", rf"{CONFIGMAPS}$") == 4  # 1 + 3 retries
    with pytest.raises(ApiException) as missing:
        await raw.request("PATCH", f"{CONFIGMAPS}/never", {"data": {}}, STRATEGIC_MERGE)
    assert missing.value.status == 404


async def test_a_refusal_carries_the_servers_reason(writer) -> None:
    raw, _ = writer
    bad = config_map("Not_A_Name")
    with pytest.raises(ApiException) as raised:
        await raw.request("POST", CONFIGMAPS, bad)
    assert raised.value.status == 422
    assert "Not_A_Name" in json.loads(raised.value.body)["message"]


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("3", 3.0), (None, 1.0), ("soon", 1.0), ("-4", 0.0), ("86400", 30.0), ("nan", 1.0)],
)
def test_retry_after_is_read_as_bounded_seconds(header: str | None, seconds: float) -> None:
    assert retry_after_seconds(header) == seconds


def _configuration(**values: object) -> Configuration:
    configuration = Configuration(host="https://10.0.0.1:6443")
    for key, value in values.items():
        setattr(configuration, key, value)
    return configuration


def test_the_writer_verifies_as_the_client_does() -> None:
    unverified = tls_context(_configuration(verify_ssl=False))
    assert unverified.verify_mode == ssl.CERT_NONE and unverified.check_hostname is False
    context = tls_context(_configuration(assert_hostname=False))
    assert isinstance(context, ssl.SSLContext) and context.check_hostname is False
    assert tls_context(_configuration()).verify_mode == ssl.CERT_REQUIRED


async def test_the_credentials_are_made_again_once_a_second(writer, kube_client) -> None:
    raw, clock = writer
    made: list[str] = []
    serialize = kube_client.param_serialize

    def counting(**kwargs):  # type: ignore[no-untyped-def]
        made.append(kwargs["resource_path"])
        return serialize(**kwargs)

    kube_client.param_serialize = counting
    for name in ("c1", "c2", "c3"):
        await raw.request("POST", CONFIGMAPS, config_map(name))
    assert len(made) == 1  # a burst of writes asks the ApiClient once
    clock.now += 1.0
    await raw.request("POST", CONFIGMAPS, config_map("c4"))
    assert len(made) == 2  # a rotated token is picked up within a second


def test_the_proxy_is_the_clients_and_its_password_is_never_echoed() -> None:
    assert proxy_of(_configuration()) is None
    assert proxy_of(_configuration(proxy="http://proxy.example:3128")) == Proxy(
        "proxy.example", 3128, {}
    )
    bypassed = _configuration(proxy="http://proxy.example:3128", no_proxy="10.0.0.0/8")
    assert proxy_of(bypassed) is None
    with_user = proxy_of(_configuration(proxy="http://ops:s%40cret@proxy.example"))
    assert with_user == Proxy(
        "proxy.example", 80, {"Proxy-Authorization": "Basic b3BzOnNAY3JldA=="}
    )
    given = {"Proxy-Authorization": "Bearer t"}
    assert proxy_of(_configuration(proxy="http://p:1", proxy_headers=given)) == Proxy("p", 1, given)
    for refused in ("https://ops:s3cret@proxy.example:3128", "socks5://ops:s3cret@proxy:1080"):
        with pytest.raises(ValueError, match="http:// proxies only") as raised:
            proxy_of(_configuration(proxy=refused))
        assert "s3cret" not in str(raised.value) and "ops" not in str(raised.value)


def test_a_token_with_a_line_break_is_refused_without_echoing_it() -> None:
    api = ApiClient(_configuration(api_key={"BearerToken": "Bearer s3cret\n"}))

    async def main() -> str:
        writer = RawWriter(api)
        with pytest.raises(ValueError) as raised:
            await writer.request("POST", "/api/v1/namespaces/x/events", {})
        await writer.close()
        return str(raised.value)

    error = event_loop.run(main())
    assert "authorization header has a line break" in error and "s3cret" not in error
