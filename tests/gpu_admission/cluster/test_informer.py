"""The generic informer against the real kube-apiserver: list, watch, relist, reconnect, bridge.

Its ConfigMaps are served straight from etcd (no watch cache; `tests/world/control_plane.py`), so
compacting etcd really makes a stale watch 410 Gone; the fault proxy in front fails and cuts
requests on demand."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpu_admission.cluster.informer import EventType, Informer
from tests.gpu_admission.cluster.informer_helpers import (
    FAST_BACKOFF,
    WAIT,
    EventRecorder,
    eventually,
)

LABEL = "informer-test"
SELECTOR = f"{LABEL}=yes"
CONFIGMAPS = r"^/api/v1/namespaces/default/configmaps$"


def data_of(obj: dict[str, Any]) -> tuple[str, dict[str, str]]:
    return obj["metadata"]["name"], dict(obj.get("data") or {})


def make_informer(
    api: client.CoreV1Api, recorder: EventRecorder | None = None, **kwargs: Any
) -> Informer[tuple[str, dict[str, str]]]:
    options: dict[str, Any] = {
        "namespace": "default",
        "label_selector": SELECTOR,
        "transform": data_of,
        "backoff": FAST_BACKOFF,
        "handlers": [recorder] if recorder else [],
    }
    options.update(kwargs)
    return Informer("configmaps", api.list_namespaced_config_map, **options)


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def running() -> Iterator[list[Informer[Any]]]:
    """Informers a test starts; stopped and joined afterwards whatever happens."""
    started: list[Informer[Any]] = []
    yield started
    for informer in started:
        informer.stop()
    for informer in started:
        assert informer.join(WAIT), f"informer {informer.name} did not stop"


def create(core: client.CoreV1Api, name: str, labelled: bool = True, **data: str) -> None:
    labels = {LABEL: "yes"} if labelled else {}
    body = {"metadata": {"name": name, "labels": labels}, "data": data}
    core.create_namespaced_config_map("default", body)


def set_data(core: client.CoreV1Api, name: str, **data: str) -> None:
    core.patch_namespaced_config_map(name, "default", {"data": data})


def names(informer: Informer[tuple[str, dict[str, str]]]) -> set[str]:
    return {name for name, _ in informer.values()}


def test_list_then_watch_reflects_creates_updates_and_deletes(core, running):
    create(core, "a", v="1")
    create(core, "b", v="1")
    create(core, "unrelated", labelled=False, v="1")
    recorder = EventRecorder()
    informer = make_informer(core, recorder)
    assert not informer.synced
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    assert names(informer) == {"a", "b"}
    assert informer.get("default/a") == ("a", {"v": "1"})

    create(core, "c", v="1")
    set_data(core, "a", v="2")
    core.delete_namespaced_config_map("b", "default")
    recorder.wait_event(EventType.DELETED, lambda r: r[0] == "b")

    assert names(informer) == {"a", "c"}
    assert informer.get("default/a") == ("a", {"v": "2"})
    assert len(informer) == 2
    kinds = [(kind, (new or old)[0]) for kind, old, new in recorder.events]
    assert kinds == [
        (EventType.ADDED, "a"),
        (EventType.ADDED, "b"),
        (EventType.ADDED, "c"),
        (EventType.MODIFIED, "a"),
        (EventType.DELETED, "b"),
    ]
    modified = next(e for e in recorder.events if e[0] == EventType.MODIFIED)
    assert modified[1:] == (("a", {"v": "1"}), ("a", {"v": "2"}))


def test_an_object_leaving_the_selector_is_removed(core, running):
    create(core, "a", v="1")
    recorder = EventRecorder()
    informer = make_informer(core, recorder)
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    core.patch_namespaced_config_map("a", "default", {"metadata": {"labels": {LABEL: "no"}}})
    recorder.wait_event(EventType.DELETED, lambda r: r[0] == "a")
    assert informer.get("default/a") is None


def test_lists_in_pages(core, running, kube_api):
    for i in range(12):
        create(core, f"cm-{i:02}", v=str(i))
    kube_api.faults.reset_counts()
    informer = make_informer(core, page_size=5)
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    assert names(informer) == {f"cm-{i:02}" for i in range(12)}
    # Three pages of at most 5 (one request each), then the watch.
    eventually(lambda: kube_api.faults.request_count("GET", CONFIGMAPS) >= 4)


def test_relists_after_410_and_notices_what_changed_meanwhile(core, running, kube_api):
    for name in ("a", "b", "c"):
        create(core, name, v="1")
    recorder = EventRecorder()
    informer = make_informer(core, recorder)
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    stale_version = informer.resource_version

    # Keep the informer away while things change and the history it would resume from is gone.
    # Its watch may pass the proxy before the fault and open after a first drop: drop until
    # the informer has failed, so no watch of it is open while things change.
    kube_api.faults.fail("GET", CONFIGMAPS, code=500, times=None)

    def offline() -> bool:
        kube_api.faults.drop_watches()
        return informer.last_sync_error is not None

    eventually(offline)
    core.delete_namespaced_config_map("b", "default")
    set_data(core, "c", v="2")
    create(core, "d", v="1")
    kube_api.faults.compact()
    kube_api.faults.clear()

    recorder.wait_event(EventType.DELETED, lambda r: r[0] == "b")
    recorder.wait_event(EventType.ADDED, lambda r: r[0] == "d")
    recorder.wait_event(EventType.MODIFIED, lambda r: r == ("c", {"v": "2"}))
    assert names(informer) == {"a", "c", "d"}
    assert int(informer.resource_version or 0) > int(stale_version or 0)
    # Unchanged objects raise no event on relist.
    assert [k for k, _old, new in recorder.events if new and new[0] == "a"] == [EventType.ADDED]

    # And it watches again after the relist.
    create(core, "e", v="1")
    recorder.wait_event(EventType.ADDED, lambda r: r[0] == "e")


def test_reconnects_after_the_watch_stream_is_dropped(core, running, kube_api):
    recorder = EventRecorder()
    informer = make_informer(core, recorder)
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    for i in range(3):
        kube_api.faults.drop_watches()
        create(core, f"after-drop-{i}", v="1")
        recorder.wait_event(EventType.ADDED, lambda r, i=i: r[0] == f"after-drop-{i}")
    assert names(informer) == {"after-drop-0", "after-drop-1", "after-drop-2"}


@pytest.mark.parametrize("code", [500, 429])
def test_retries_through_server_errors(core, running, kube_api, caplog, code):
    caplog.set_level(logging.WARNING, logger="gpu_admission.cluster.informer")
    recorder = EventRecorder()
    informer = make_informer(core, recorder)
    running.append(informer)
    # More failures than urllib3's own Retry-After retries (3), so the informer sees them.
    kube_api.faults.fail("GET", CONFIGMAPS, code=code, times=6, retry_after=0)
    informer.start()
    assert informer.wait_synced(WAIT)
    assert str(code) in caplog.text

    kube_api.faults.fail("GET", CONFIGMAPS, code=code, times=2, retry_after=0)
    kube_api.faults.drop_watches()
    create(core, "after-errors", v="1")
    recorder.wait_event(EventType.ADDED, lambda r: r[0] == "after-errors")
    eventually(lambda: informer.last_sync_error is None)


def test_reports_list_errors_until_the_first_list_succeeds(core, running, kube_api):
    kube_api.faults.fail("GET", CONFIGMAPS, code=500, times=None)
    informer = make_informer(core)
    running.append(informer)
    informer.start()
    eventually(lambda: informer.last_sync_error is not None)
    assert not informer.wait_synced(0.1)
    assert "HTTP 500" in (informer.last_sync_error or "")
    assert "injected fault" in (informer.last_sync_error or "")
    kube_api.faults.clear()
    assert informer.wait_synced(WAIT)
    assert informer.last_sync_error is None


def test_bookmarks_advance_the_resource_version_without_events(core, running):
    # Bookmarks come from the API server's watch cache (Secrets have one), about two seconds
    # before a watch's timeout: a short timeout makes one come soon.
    recorder = EventRecorder()
    informer: Informer[str] = Informer(
        "secrets",
        core.list_namespaced_secret,
        namespace="default",
        label_selector=SELECTOR,
        transform=lambda obj: obj["metadata"]["name"],
        backoff=FAST_BACKOFF,
        handlers=[recorder],
        watch_timeout_seconds=4,
    )
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    # An object the selector hides still moves the server's resourceVersion on.
    hidden = core.create_namespaced_secret("default", {"metadata": {"name": "hidden"}})
    eventually(lambda: int(informer.resource_version or 0) >= int(hidden.metadata.resource_version))
    assert recorder.events == []


def test_transform_none_drops_the_object(core, running):
    create(core, "keep", v="1")
    create(core, "drop", v="1")
    recorder = EventRecorder()

    def keep_only_keep(obj: dict[str, Any]) -> tuple[str, dict[str, str]] | None:
        return data_of(obj) if obj["metadata"]["name"].startswith("keep") else None

    informer = make_informer(core, recorder, transform=keep_only_keep)
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    create(core, "drop-2", v="1")
    create(core, "keep-2", v="1")
    recorder.wait_event(EventType.ADDED, lambda r: r[0] == "keep-2")
    assert names(informer) == {"keep", "keep-2"}


def test_a_failing_handler_does_not_stop_the_informer(core, running):
    def broken(_kind: EventType, _old: Any, _new: Any) -> None:
        raise RuntimeError("handler bug")

    recorder = EventRecorder()
    informer = make_informer(core, handlers=[broken, recorder])
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    create(core, "one", v="1")
    create(core, "two", v="1")
    recorder.wait_event(EventType.ADDED, lambda r: r[0] == "two")


def test_cluster_scoped_objects_are_keyed_by_name(core, running):
    core.create_node({"metadata": {"name": "gpu-node-1", "labels": {"gpu": "yes"}}})
    informer: Informer[str] = Informer(
        "nodes", core.list_node, transform=lambda o: o["metadata"]["name"], backoff=FAST_BACKOFF
    )
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    assert informer.get("gpu-node-1") == "gpu-node-1"


def test_stop_ends_an_open_watch_promptly(core):
    informer = make_informer(core, watch_timeout_seconds=3600)
    informer.start()
    assert informer.wait_synced(WAIT)
    informer.stop()
    assert informer.join(WAIT)


async def test_wait_for_wakes_when_the_key_arrives(core, running):
    informer = make_informer(core)
    running.append(informer)
    informer.start()
    assert await asyncio.to_thread(informer.wait_synced, WAIT)
    assert await informer.wait_for("default/late", 0.01) is None

    waiting = asyncio.ensure_future(informer.wait_for("default/late", WAIT))
    await asyncio.sleep(0)  # let the waiter register before the object exists
    assert not waiting.done()
    await asyncio.to_thread(create, core, "late", v="1")
    assert await waiting == ("late", {"v": "1"})
    # Present already: answered from the store at once.
    assert await informer.wait_for("default/late", 0) == ("late", {"v": "1"})


async def test_many_waiters_for_the_same_key_all_wake(core, running):
    informer = make_informer(core)
    running.append(informer)
    informer.start()
    assert await asyncio.to_thread(informer.wait_synced, WAIT)
    waiters = [asyncio.ensure_future(informer.wait_for("default/shared", WAIT)) for _ in range(5)]
    other = asyncio.ensure_future(informer.wait_for("default/never", 0.05))
    await asyncio.sleep(0)
    await asyncio.to_thread(create, core, "shared", v="1")
    assert await asyncio.gather(*waiters) == [("shared", {"v": "1"})] * 5
    assert await other is None


def test_an_optional_informer_counts_an_unserved_resource_as_empty_and_looks_again(
    kube_api, kube_client, running
) -> None:
    kube_api.unserved_groups.add("resource.k8s.io")
    dra = client.ResourceV1Api(kube_client)
    informer: Informer[str] = Informer(
        "deviceclasses",
        dra.list_device_class,
        transform=lambda obj: obj["metadata"]["name"],
        optional=True,
        not_served_recheck_seconds=0.05,
        backoff=FAST_BACKOFF,
    )
    running.append(informer)
    informer.start()
    assert informer.wait_synced(WAIT)
    assert not informer.served and informer.values() == []
    assert informer.last_sync_error is None  # not an error: the cluster has no such API
    kube_api.unserved_groups.clear()
    dra.create_device_class({"metadata": {"name": "gpu.nvidia.com"}, "spec": {}})
    eventually(lambda: informer.values() == ["gpu.nvidia.com"])
    assert informer.served


def test_a_required_informer_reports_an_unserved_resource(kube_api, kube_client, running) -> None:
    kube_api.unserved_groups.add("resource.k8s.io")
    informer: Informer[str] = Informer(
        "deviceclasses",
        client.ResourceV1Api(kube_client).list_device_class,
        transform=lambda obj: obj["metadata"]["name"],
        backoff=FAST_BACKOFF,
    )
    running.append(informer)
    informer.start()
    eventually(lambda: (informer.last_sync_error or "").startswith("HTTP 404"))
    assert not informer.synced
