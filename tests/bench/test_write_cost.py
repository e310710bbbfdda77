"""The write-cost benchmark runs each of its HTTP paths against the real kube-apiserver
(a few requests), and every request it counts was really made: the Events are there."""

from __future__ import annotations

from kubernetes import client

from bench.write_cost import NS, PATHS, measure, report


def test_each_path_posts_its_events_and_is_reported_against_the_bare_socket(
    kube_client: client.ApiClient,
) -> None:
    before = len(client.CoreV1Api(kube_client).list_namespaced_event(NS).items)
    per_request = measure(kube_client, requests=10, concurrency=2, rounds=1)
    assert set(per_request) == set(PATHS) and all(len(v) == 1 for v in per_request.values())
    figures = report(per_request)
    assert figures["bare TLS socket (baseline)"]["over_baseline"] == 1.0
    assert all(f["median_us"] > 0 for f in figures.values())
    # Each path: 2 requests opening its connections, then the 10 it counts.
    after = len(client.CoreV1Api(kube_client).list_namespaced_event(NS).items)
    assert after - before == len(PATHS) * (2 + 10)
