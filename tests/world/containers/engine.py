"""Running the project's image as a cluster runs it, on this machine.

`ContainerRun` says what a kubelet would hand the runtime: the image, the command and args (the
pod's `command` replaces the image's ENTRYPOINT, `args` its CMD), the environment on top of the
image's own, the user, group and supplemental groups, a read-only root, and bind mounts for the
volumes (the kubelet prepares each volume as a host directory) and the termination message file.

Two ways to run one:
- `Podman`: a real container (runc, through `runc-wrapper`, which drops the two things these
  machines refuse: a negative oom_score_adj and raised rlimits), host network so the container
  reaches the test world's servers on 127.0.0.1.
- `Chroot`: where no engine can run a container at all, the image's filesystem (exported once)
  entered with `unshare` and `chroot` under the same user, groups, mounts and read-only root.

`engine()` picks the first that can run the image (`GPU_ADMISSION_TEST_ENGINE=podman|chroot`
forces one) and says which in its `kind`; tests print it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from gpu_admission import __version__
from tests import ROOT

WRAPPER = Path(__file__).resolve().with_name("runc-wrapper")
IMAGE = f"gpu-admission:{__version__}"
PODMAN = ["podman", "--runtime", str(WRAPPER), "--cgroup-manager", "cgroupfs"]
BUILD_SCRIPT = ROOT / "tools" / "image" / "build.sh"
BUILD_LOCK = Path(tempfile.gettempdir()) / "gpu-admission-image-build.lock"


@dataclass(frozen=True)
class BindMount:
    source: Path
    target: str
    read_only: bool = False


@dataclass
class ContainerRun:
    image: str
    command: list[str] | None = None  # replaces ENTRYPOINT (and then the image's CMD too)
    args: list[str] | None = None  # replaces CMD
    env: dict[str, str] = field(default_factory=dict)
    user: int | None = None  # None: the image's USER
    group: int | None = None  # None: the user's primary group in the image's /etc/passwd
    supplemental_groups: list[int] = field(default_factory=list)
    read_only_root: bool = False
    mounts: list[BindMount] = field(default_factory=list)
    hostname: str | None = None
    name: str = field(default_factory=lambda: f"gpu-admission-test-{uuid.uuid4().hex[:12]}")


@dataclass(frozen=True)
class ImageConfig:
    """What the image's config says: its user, entrypoint, command, environment, labels."""

    user: str
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    labels: dict[str, str]
    size: int

    @classmethod
    def inspect(cls, image: str) -> ImageConfig:
        out = subprocess.run(
            [builder(), "image", "inspect", image], capture_output=True, text=True, check=True
        ).stdout
        [found] = json.loads(out)
        config = found.get("Config") or {}
        env = dict(item.split("=", 1) for item in config.get("Env") or [])
        return cls(
            user=config.get("User", ""),
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
            env=env,
            labels=dict(config.get("Labels") or {}),
            size=int(found.get("Size", 0)),
        )


class Engine(Protocol):
    kind: str

    def start(self, run: ContainerRun, output: IO[bytes]) -> subprocess.Popen[bytes]: ...

    def kill(self, run: ContainerRun) -> None: ...


class Podman:
    kind = "podman (runc through tests/world/containers/runc-wrapper)"

    def argv(self, run: ContainerRun) -> list[str]:
        argv = [*PODMAN, "run", "--rm", "--name", run.name, "--network", "host"]
        argv += ["--pull", "never", "--log-driver", "none"]
        if run.hostname:
            argv += ["--hostname", run.hostname]
        if run.user is not None:
            argv += ["--user", str(run.user) + (f":{run.group}" if run.group is not None else "")]
        for group in run.supplemental_groups:
            argv += ["--group-add", str(group)]
        if run.read_only_root:
            # Kubernetes mounts no tmpfs anywhere by itself: /tmp is read-only too unless a
            # volume is mounted there.
            argv += ["--read-only", "--read-only-tmpfs=false"]
        for mount in run.mounts:
            spec = f"type=bind,source={mount.source},destination={mount.target}"
            argv += ["--mount", spec + (",ro=true" if mount.read_only else "")]
        for key, value in run.env.items():
            argv += ["--env", f"{key}={value}"]
        if run.command is not None:
            argv += ["--entrypoint", json.dumps(run.command)]
        argv.append(run.image)
        if run.args is not None:
            argv += run.args
        return argv

    def start(self, run: ContainerRun, output: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv(run),
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def kill(self, run: ContainerRun) -> None:
        subprocess.run(
            [*PODMAN, "rm", "--force", "--time", "0", run.name],
            capture_output=True,
            check=False,
        )


_CHROOT_SCRIPT = """set -e
root=$1; shift
mount --bind "$root" "$root"
{mounts}
mount -o remount,bind,ro "$root"
exec chroot {userspec} "$root" /usr/bin/env -i "$@"
"""


class Chroot:
    """The image's exported filesystem, entered without a container runtime."""

    kind = "unshare + chroot into the image's exported filesystem"

    def __init__(self, image: str) -> None:
        self._root = _exported_root(image)
        self._config = ImageConfig.inspect(image)
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def start(self, run: ContainerRun, output: IO[bytes]) -> subprocess.Popen[bytes]:
        # Mount points missing from the image are made in the exported copy (it is this
        # session's own), before the root is made read-only.
        root = self._root
        lines = []
        for mount in run.mounts:
            # Symbolic links resolve inside the image (its /var/run points at /run), never on
            # the host.
            target = _quote(str(_in_root(root, mount.target)))
            maker = "touch" if mount.source.is_file() else "mkdir -p"
            lines.append(f"[ -e {target} ] || {maker} {target}")
            lines.append(f"mount --bind {_quote(str(mount.source))} {target}")
            if mount.read_only:
                lines.append(f"mount -o remount,bind,ro {target}")
        user = run.user if run.user is not None else int(self._config.user.split(":")[0] or 0)
        group = run.group if run.group is not None else user
        groups = ",".join(str(g) for g in [group, *run.supplemental_groups])
        userspec = f"--userspec={user}:{group} --groups={groups}"
        script = _CHROOT_SCRIPT.format(mounts="\n".join(lines), userspec=userspec)
        if not run.read_only_root:
            script = script.replace('mount -o remount,bind,ro "$root"\n', "")
        env = {**self._config.env, **run.env}
        entry = run.command if run.command is not None else self._config.entrypoint
        args = run.args if run.args is not None else ([] if run.command else self._config.cmd)
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
        argv += [str(root), *(f"{k}={v}" for k, v in env.items()), *entry, *args]
        process = subprocess.Popen(
            argv,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        with self._lock:
            self._processes[run.name] = process
        return process

    def kill(self, run: ContainerRun) -> None:
        with self._lock:
            process = self._processes.pop(run.name, None)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)


def _in_root(root: Path, target: str, hops: int = 40) -> Path:
    """Where `target` lies under `root` when symbolic links resolve as inside the image."""
    resolved = root
    parts = list(Path(target).parts[1:])
    while parts:
        part = parts.pop(0)
        if part in (".", ""):
            continue
        if part == "..":
            resolved = resolved.parent if resolved != root else root
            continue
        candidate = resolved / part
        if candidate.is_symlink():
            hops -= 1
            if hops < 0:
                raise OSError(f"too many symbolic links under {target}")
            link = Path(candidate.readlink())
            if link.is_absolute():
                resolved = root
            parts = list(link.parts[1:] if link.is_absolute() else link.parts) + parts
            continue
        resolved = candidate
    return resolved


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@functools.cache
def _exported_root(image: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix="gpu-admission-image-root-"))
    root.chmod(0o755)  # mkdtemp's 0700 would keep the image's user out of its own root
    created = subprocess.run(
        [builder(), "create", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        export = subprocess.Popen([builder(), "export", created], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(root)], stdin=export.stdout, check=True)
        export.wait()
    finally:
        subprocess.run([builder(), "rm", created], capture_output=True, check=False)
    return root


@functools.cache
def builder() -> str:
    """The engine `make image` builds with (tools/image/engine.sh's choice): docker when its
    daemon answers, else podman. The image lives in that engine's store."""
    if os.environ.get("ENGINE"):
        return os.environ["ENGINE"]
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0
    ):
        return "docker"
    return "podman"


@dataclass(frozen=True)
class Unavailable:
    reason: str


@functools.cache
def build_image() -> str | Unavailable:
    """`make image`'s script, once per test session (layers are cached: seconds when nothing
    changed). The tag, or why there is none."""
    if shutil.which("podman") is None and shutil.which("docker") is None:
        return Unavailable("no container engine (apt-get install podman debootstrap runc)")
    # One build at a time on this machine: test workers in parallel share the engine's cache,
    # and the second build is then the cache's.
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "IMAGE": IMAGE},
        )
    if done.returncode != 0:
        return Unavailable(f"the image did not build: {done.stderr.strip()[-2000:]}")
    return IMAGE


@functools.cache
def engine() -> Engine | Unavailable:
    """The first way that runs the image here, or why there is none."""
    image = build_image()
    if isinstance(image, Unavailable):
        return image
    forced = os.environ.get("GPU_ADMISSION_TEST_ENGINE", "")
    candidates: list[Any] = []
    if forced in ("", "podman"):
        candidates.append(Podman())
    if forced in ("", "chroot"):
        candidates.append(functools.partial(Chroot, image))
    reasons = []
    for candidate in candidates:
        runner = candidate() if isinstance(candidate, functools.partial) else candidate
        probe = ContainerRun(image, args=["--version"], read_only_root=True)
        with tempfile.TemporaryFile() as output:
            process = runner.start(probe, output)
            code = process.wait(timeout=120)
            output.seek(0)
            said = output.read().decode(errors="replace")
        if code == 0 and __version__ in said:
            return runner
        reasons.append(f"{runner.kind}: exit {code}: {said.strip()[-500:]}")
    return Unavailable("no way to run the image here: " + "; ".join(reasons))
