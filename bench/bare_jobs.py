"""The bare-client baseline for the controller's burst: the same number of loader Jobs, of the
shape the controller makes (`build_loader_job`), created by plain client threads as fast as the
API server takes them, in the same run and against the same API server. What the controller
adds on top of this (watching, deciding, recording) is its own cost."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

SOURCE = "s3://bench-data/{i}"


def loader_job(name: str, uid: str, source: str, namespace: str, config: Any) -> dict[str, Any]:
    """The Job the controller makes for a fresh dataset PVC of `source`, with no credentials."""
    from controllers.dataset.jobspec import LoaderJobInputs, build_loader_job
    from gpu_admission.datasets.load import DatasetContent, DatasetLoad
    from gpu_admission.datasets.source import parse_data_source

    inputs = LoaderJobInputs(
        job_name=DatasetLoad(name, uid, DatasetContent(source)).job,
        namespace=namespace,
        pvc_name=name,
        pvc_uid=uid,
        source=parse_data_source(source),
    )
    return build_loader_job(inputs, config)


def loader_jobs(count: int, namespace: str, config: Any) -> list[dict[str, Any]]:
    """`count` loader Job bodies as the controller would make them for fresh dataset PVCs, the
    data-load label set to `bare` (same size) so that the running controller ignores them."""
    label = config.names.data_load_label
    bodies = []
    for i in range(count):
        body = loader_job(f"bare-{i:05d}", str(uuid.uuid4()), SOURCE.format(i=i), namespace, config)
        for meta in (body["metadata"], body["spec"]["template"]["metadata"]):
            meta["labels"][label] = "bare"
        bodies.append(body)
    return bodies


def in_threads(work: Callable[[int], None], threads: int) -> tuple[float, float]:
    """Run `work(index)` on `threads` threads released together; (start, end) on the monotonic
    clock, from their release to the last one's return. The first failure is raised."""
    failures: list[BaseException] = []
    go = threading.Barrier(threads + 1)

    def run(index: int) -> None:
        go.wait()
        try:
            work(index)
        except BaseException as exc:  # handed to the caller
            failures.append(exc)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    go.wait()
    started = time.monotonic()
    for worker in workers:
        worker.join()
    ended = time.monotonic()
    if failures:
        raise failures[0]
    return started, ended


def job_burst(kubeconfig: str, namespace: str, bodies: list[dict[str, Any]], threads: int) -> float:
    """Create the Jobs from `threads` threads (one API client and connection each, opened before
    the clock starts); the seconds from the first create to the last one's answer."""
    from kubernetes import client, config

    clients: list[Any] = [
        client.BatchV1Api(config.new_client_from_config(kubeconfig)) for _ in range(threads)
    ]
    for batch in clients:
        batch.list_namespaced_job(namespace, limit=1, _preload_content=False)

    def create(index: int) -> None:
        for body in bodies[index::threads]:
            clients[index].create_namespaced_job(namespace, body, _preload_content=False).data  # noqa: B018

    try:
        started, ended = in_threads(create, threads)
    finally:
        for batch in clients:
            batch.api_client.close()
    return ended - started
