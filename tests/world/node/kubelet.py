"""The real kubelet's configuration: a `KubeletConfiguration` (kubelet.config.k8s.io/v1beta1),
its kubeconfig and its flags, as `../shared/kube/README.md` ("A real node") checked here.

What these machines need and why: cgroupfs (no systemd), no swap check, `oomScoreAdj: 0` (a
negative one is refused), low eviction thresholds (a shared disk must not evict the tests' pods),
image GC off (imported images cannot be pulled back), webhook authentication and authorization
with the cluster CA (the API server's client certificate for logs and exec), no cluster DNS (a
pod's DNS server is an address it would dial).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.world.node.pki import Pair


def kubelet_configuration(
    *,
    address: str,
    port: int,
    healthz_port: int,
    runtime_socket: Path,
    client_ca: Path,
    serving: Pair,
    logs_dir: Path,
) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        # These machines mount cgroup v1 (Docker's hybrid layout); kubelet 1.36 refuses it
        # unless told otherwise.
        "failCgroupV1": False,
        "failSwapOn": False,
        "oomScoreAdj": 0,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving.cert),
        "tlsPrivateKeyFile": str(serving.key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "podLogsDir": str(logs_dir),
        # Status reported often, so the tests' waits on Ready and pod phases end soon.
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
    }


def kubeconfig(server: str, ca: Path, client: Pair) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {
                "name": "node",
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "node"}}],
        "current-context": "test",
    }


def write_yaml(path: Path, document: dict[str, object]) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path
