"""Running a pod's container from the project's image, as a kubelet hands it to its runtime.

The pod spec decides: `command` replaces the image's ENTRYPOINT and `args` its CMD (both `$(VAR)`
expanded), the environment goes on top of the image's own, the user is the container's
`runAsUser`/`runAsGroup` or else the pod's (or else the image's USER), `fsGroup` and
`supplementalGroups` become supplemental groups, `readOnlyRootFilesystem` makes the root
read-only, and every volume is bind-mounted where its volumeMount says, with the termination
message file at `terminationMessagePath`. Its exit code and that file become the container's
terminated state, as in `run.ContainerProcess` (whose interface this shares).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.world.containers.engine import BindMount, ContainerRun, Engine
from tests.world.kubelet.env import expand
from tests.world.kubelet.run import MESSAGE_MAX_BYTES, Mount, Termination, tail_of_log

# podman's own failures: the container never ran (kubelet: StartError / CreateContainerError).
ENGINE_EXIT_CODES = {125, 126, 127}
# How long a kill keeps removing a container that is still being created, and how often.
KILL_SECONDS = 60.0
KILL_RETRY_SECONDS = 0.5


def security(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, Any]:
    """The effective user, group, supplemental groups and read-only root, as the kubelet
    computes them: the container's securityContext wins over the pod's."""
    pod_context = (pod.get("spec") or {}).get("securityContext") or {}
    context = container.get("securityContext") or {}
    groups = list(pod_context.get("supplementalGroups") or [])
    if pod_context.get("fsGroup") is not None:
        groups.insert(0, pod_context["fsGroup"])
    return {
        "user": context.get("runAsUser", pod_context.get("runAsUser")),
        "group": context.get("runAsGroup", pod_context.get("runAsGroup")),
        "supplemental_groups": groups,
        "read_only_root": bool(context.get("readOnlyRootFilesystem")),
    }


class ImageContainerProcess:
    """One container run from an image; ``kill`` may be called from another thread."""

    def __init__(self, engine: Engine, image: str) -> None:
        self._engine = engine
        self._image = image
        self._run: ContainerRun | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._killed = threading.Event()
        self._lock = threading.Lock()

    def kill(self) -> None:
        """Remove the container, and again until its `run` has ended: a removal that comes
        while the engine is still creating the container finds nothing to remove, and the
        container would then run on after its pod (a webhook's `serve` never exits)."""
        with self._lock:
            self._killed.set()
            run, process = self._run, self._process
        if run is None:
            return
        deadline = time.monotonic() + KILL_SECONDS
        while True:
            self._engine.kill(run)
            if process is None or time.monotonic() > deadline:
                return
            try:
                process.wait(timeout=KILL_RETRY_SECONDS)
                return
            except subprocess.TimeoutExpired:
                continue

    def run(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        env: dict[str, str],
        mounts: list[Mount],
        termination_file: Path,
        termination_path: str,
        fallback_to_logs: bool,
        log_path: Path,
    ) -> Termination:
        termination_file.write_bytes(b"")
        # As the kubelet makes it: chmod 0666, whatever the umask (makeMounts in
        # pkg/kubelet/kuberuntime/kuberuntime_container.go), so any user can write it.
        termination_file.chmod(0o666)
        command = container.get("command")
        args = container.get("args")
        run = ContainerRun(
            self._image,
            command=[expand(str(part), env) for part in command] if command else None,
            args=[expand(str(part), env) for part in args] if args else None,
            env=env,
            mounts=[
                *(BindMount(m.source, m.target, m.read_only) for m in mounts),
                BindMount(termination_file, termination_path),
            ],
            hostname=(pod.get("metadata") or {}).get("name"),
            **security(pod, container),
        )
        with self._lock:
            if self._killed.is_set():
                return Termination(137, "Error", "")
            self._run = run
            with log_path.open("ab") as log:
                process = self._engine.start(run, log)
            self._process = process
        exit_code = process.wait()
        if exit_code < 0:
            exit_code = 128 - exit_code
        log = log_path.read_bytes()
        if exit_code in ENGINE_EXIT_CODES and not termination_file.read_bytes():
            return Termination(128, "StartError", tail_of_log(log))
        message = termination_file.read_bytes()[:MESSAGE_MAX_BYTES].decode(errors="replace")
        if not message and fallback_to_logs and exit_code != 0:
            message = tail_of_log(log)
        return Termination(exit_code, "Completed" if exit_code == 0 else "Error", message)


class Images:
    """The images this node runs as containers (the project's own, built here); a pod whose
    image is not among them runs its command as a host process, as before."""

    def __init__(self, engine: Engine, image: str) -> None:
        self.engine = engine
        self.image = image
        name = image.removeprefix("localhost/")
        self._names = {name, f"localhost/{name}", f"docker.io/library/{name}"}

    def runs(self, reference: str) -> bool:
        return reference in self._names
