"""Running one container as a local process in its own mount namespace.

The image is ignored: the command runs from the host. Volumes are bind-mounted at their
mountPath inside a private mount namespace (``unshare -m``), read-only mounts are remounted
``ro``, and the termination-message path is a per-container file, so the process sees the same
files a container would and a write to a read-only mount fails for real. Mount points missing on
the host are created for the run and removed afterwards when no other run still uses them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
LOG_TAIL_LINES = 80
LOG_TAIL_BYTES = 2048
MESSAGE_MAX_BYTES = 4096

_SCRIPT = """set -e
{mounts}
{chdir}
exec "$@"
"""


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool


@dataclass(frozen=True)
class Termination:
    exit_code: int
    reason: str
    message: str


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def mount_script(mounts: list[Mount], working_dir: str | None) -> str:
    lines = []
    for mount in mounts:
        target = _quote(mount.target)
        lines.append(f"mount --bind {_quote(str(mount.source))} {target}")
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    chdir = f"cd {_quote(working_dir)}" if working_dir else ""
    return _SCRIPT.format(mounts="\n".join(lines), chdir=chdir)


class MountPoints:
    """Creates missing mount points on the host and removes them once no run uses them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: Counter[Path] = Counter()

    def acquire(self, target: str, is_file: bool) -> list[Path]:
        created: list[Path] = []
        path = Path(target)
        with self._lock:
            missing = [p for p in [path, *path.parents] if not p.exists()]
            for directory in reversed(missing[1:] if is_file else missing):
                directory.mkdir()
                created.append(directory)
            if is_file and not path.exists():
                path.touch()
                created.append(path)
            for created_path in created:
                self._users[created_path] += 1
            # Existing paths someone else created stay alive while we use them too.
            for p in [path, *path.parents]:
                if p in self._users and p not in created:
                    self._users[p] += 1
                    created.append(p)
        return created

    def release(self, paths: list[Path]) -> None:
        with self._lock:
            for path in sorted(paths, key=lambda p: len(p.parts), reverse=True):
                self._users[path] -= 1
                if self._users[path] > 0:
                    continue
                del self._users[path]
                # Not empty, or already gone: leave it.
                with contextlib.suppress(OSError):
                    path.unlink() if path.is_file() else path.rmdir()


def tail_of_log(log: bytes) -> str:
    """The kubelet's FallbackToLogsOnError message: last 80 lines, at most 2048 bytes."""
    lines = log.splitlines(keepends=True)[-LOG_TAIL_LINES:]
    return b"".join(lines)[-LOG_TAIL_BYTES:].decode(errors="replace")


class ContainerProcess:
    """One container run; ``kill`` may be called from another thread."""

    def __init__(self, mount_points: MountPoints) -> None:
        self._mount_points = mount_points
        self._process: subprocess.Popen[bytes] | None = None
        self._killed = threading.Event()
        self._lock = threading.Lock()

    def kill(self) -> None:
        with self._lock:
            self._killed.set()
            if self._process is not None and self._process.poll() is None:
                # The group may exit between poll() and the signal: nothing left to kill.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._process.pid, signal.SIGKILL)

    def run(
        self,
        command: list[str],
        env: dict[str, str],
        mounts: list[Mount],
        working_dir: str | None,
        termination_file: Path,
        termination_path: str,
        fallback_to_logs: bool,
        log_path: Path,
    ) -> Termination:
        executable = shutil.which(command[0], path=env.get("PATH")) or (
            command[0] if os.path.isabs(command[0]) and os.access(command[0], os.X_OK) else None
        )
        if executable is None:
            message = f'exec: "{command[0]}": executable file not found in $PATH'
            return Termination(128, "StartError", message)
        termination_file.write_bytes(b"")
        all_mounts = [*mounts, Mount(termination_file, termination_path, False)]
        created: list[Path] = []
        try:
            for mount in all_mounts:
                created += self._mount_points.acquire(mount.target, mount.source.is_file())
            script = mount_script(all_mounts, working_dir)
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
            argv += ["container", executable, *command[1:]]
            with self._lock:
                if self._killed.is_set():
                    return Termination(137, "Error", "")
                with log_path.open("ab") as log:
                    self._process = subprocess.Popen(
                        argv,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
            exit_code = self._process.wait()
        finally:
            self._mount_points.release(created)
        if exit_code < 0:
            exit_code = 128 - exit_code  # killed by a signal, as the runtime reports it
        message = termination_file.read_bytes()[:MESSAGE_MAX_BYTES].decode(errors="replace")
        if not message and fallback_to_logs and exit_code != 0:
            message = tail_of_log(log_path.read_bytes())
        return Termination(exit_code, "Completed" if exit_code == 0 else "Error", message)
