"""A pod network that never leaves this machine: a host-only Linux bridge and the CNI `bridge`
plugin, as `../shared/kube/README.md` ("A pod network of the test world's own") checked here.

Pods get addresses of their own on `SUBNET`, so two replicas of one server each bind their port.
The bridge carries the subnet's first address (`HOST`): the API server and the stand-ins pods
talk to listen there. Pods get no default route (`isGateway: false`, no `routes`) and no
masquerading, so a packet for any address off the subnet has nowhere to go: nothing leaves.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

BRIDGE = "gpuadm0"
SUBNET = "10.77.0.0/24"
HOST = "10.77.0.1"
NETWORK_NAME = "gpu-admission-test"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def bridge_up() -> None:
    """The bridge with `HOST`, made afresh (one left by an interrupted run is replaced)."""
    bridge_down()
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{HOST}/24", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def bridge_down() -> None:
    _ip("link", "del", BRIDGE, check=False)


def write_conflist(conf_dir: Path, ipam_dir: Path) -> Path:
    """The CNI configuration containerd reads. Leases live in `ipam_dir`, this run's own, so an
    earlier run's leases never exhaust the range."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "cniVersion": "1.0.0",
        "name": NETWORK_NAME,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": SUBNET, "rangeStart": "10.77.0.10"}]],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }
    # Sorting first among the conflists: containerd uses the first.
    path = conf_dir / "10-gpu-admission-test.conflist"
    path.write_text(json.dumps(config, indent=2))
    return path
