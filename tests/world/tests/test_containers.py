"""The container runners' own pieces: podman arguments as a kubelet would give them, and mount
targets resolved inside the image when it is entered with chroot."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import IO

from tests.world.containers.engine import BindMount, ContainerRun, Podman, _in_root
from tests.world.kubelet.image_run import ImageContainerProcess
from tests.world.kubelet.run import Termination


def test_symbolic_links_resolve_inside_the_image_never_on_the_host(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "run").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to("/run")  # as Debian's /var/run
    (root / "data").symlink_to("srv/data")  # relative
    assert _in_root(root, "/var/run/gpu-admission/certs") == root / "run/gpu-admission/certs"
    assert _in_root(root, "/data/x") == root / "srv/data/x"
    assert _in_root(root, "/../../etc") == root / "etc"


def test_podman_gets_the_pod_specs_user_groups_mounts_and_read_only_root(tmp_path: Path) -> None:
    run = ContainerRun(
        "gpu-admission:0.1.0",
        command=["gpu-admission", "load"],
        args=["--source", "s3://b"],
        env={"A": "1"},
        user=65532,
        group=65532,
        supplemental_groups=[65532],
        read_only_root=True,
        mounts=[BindMount(tmp_path, "/data"), BindMount(tmp_path, "/etc/x", read_only=True)],
        name="n",
    )
    argv = Podman().argv(run)
    assert argv[argv.index("--user") + 1] == "65532:65532"
    assert argv[argv.index("--group-add") + 1] == "65532"
    assert "--read-only" in argv and "--read-only-tmpfs=false" in argv
    assert f"type=bind,source={tmp_path},destination=/etc/x,ro=true" in argv
    assert argv[argv.index("--entrypoint") + 1] == '["gpu-admission", "load"]'
    assert argv[-3:] == ["gpu-admission:0.1.0", "--source", "s3://b"]


class EngineStillCreating:
    """An engine whose first removal comes while the container is still being created, so it
    finds nothing to remove (as `podman rm` does then); the run ends only on a later one."""

    kind = "an engine still creating its container"

    def __init__(self) -> None:
        self.removals = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, run: ContainerRun, output: IO[bytes]) -> subprocess.Popen[bytes]:
        self.process = subprocess.Popen(["sleep", "3600"], stdout=output)
        return self.process

    def kill(self, run: ContainerRun) -> None:
        self.removals += 1
        if self.removals > 1 and self.process is not None:
            self.process.kill()


def test_a_container_killed_while_it_is_created_does_not_outlive_its_pod(tmp_path: Path) -> None:
    engine = EngineStillCreating()
    container = ImageContainerProcess(engine, "gpu-admission:test")
    ended: list[Termination] = []
    running = threading.Thread(
        target=lambda: ended.append(
            container.run(
                {"metadata": {"name": "p"}},
                {"name": "main", "command": ["serve"]},
                {},
                [],
                tmp_path / "termination",
                "/dev/termination-log",
                False,
                tmp_path / "log",
            )
        )
    )
    running.start()
    while engine.process is None and running.is_alive():  # the engine process has started
        running.join(0.01)
    try:
        container.kill()
        running.join(30)
        assert ended and ended[0].exit_code == 137, "the container outlived its pod"
        assert engine.removals >= 2
    finally:
        if engine.process is not None:
            engine.process.kill()
