"""One tenant of `bench.gpu_share`: a process that uses one framework on GPU 0, driven by lines.

Runs with whatever env the coordinator gives it (none, or a memory-share profile's) and never
imports the project: it stands for a user's training process. Protocol, one line each way:

    tenant:       ready <platform> | error <what>      after the framework is up
    coordinator:  fill                                  allocate chunks until out of memory,
                                                        then give one chunk back (work room)
    tenant:       full <MiB>                            what it holds then
    coordinator:  grow <MiB>                            allocate up to MiB in chunks
    tenant:       ok <MiB> | oom <MiB>                  reached it, or ran out first
    coordinator:  check                                 a small computation on the GPU
    tenant:       alive | dead <what>
    coordinator:  exit

`--framework simulated` stands in for a GPU on any machine (a pool in a shared file; the limit a
framework would read from its env is taken from GPU_MEMORY_FRACTION), so the harness itself can be
checked without one.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

CHUNK_MIB = 256
MIB = 1 << 20


class OutOfMemory(Exception):
    pass


class Backend:
    """Allocate `MiB` on the GPU (keep it referenced), and say which platform computes."""

    platform = "unknown"

    def allocate(self, mib: int) -> Any:
        raise NotImplementedError

    def compute(self) -> None:
        raise NotImplementedError


class TorchBackend(Backend):
    def __init__(self) -> None:
        import torch

        self.torch = torch
        torch.zeros(1, device="cuda")
        self.platform = "gpu" if torch.cuda.is_available() else "cpu"

    def allocate(self, mib: int) -> Any:
        try:
            return self.torch.empty(mib * MIB, dtype=self.torch.uint8, device="cuda")
        except self.torch.cuda.OutOfMemoryError as exc:
            raise OutOfMemory(str(exc).splitlines()[0]) from exc

    def compute(self) -> None:
        x = self.torch.ones((256, 256), device="cuda")
        (x @ x).sum().item()


class JaxBackend(Backend):
    def __init__(self) -> None:
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        device = jax.devices()[0]
        self.platform = "gpu" if device.platform in ("gpu", "cuda") else device.platform
        jnp.zeros(1).block_until_ready()

    def allocate(self, mib: int) -> Any:
        try:
            return self.jnp.zeros((mib * MIB,), dtype=self.jnp.uint8).block_until_ready()
        except Exception as exc:  # jaxlib's XlaRuntimeError: RESOURCE_EXHAUSTED
            if "RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower():
                raise OutOfMemory(str(exc).splitlines()[0]) from exc
            raise

    def compute(self) -> None:
        x = self.jnp.ones((256, 256))
        (x @ x).sum().block_until_ready()


class TensorflowBackend(Backend):
    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self.platform = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
        with tf.device("/GPU:0"):
            tf.zeros([1]).numpy()

    def allocate(self, mib: int) -> Any:
        try:
            with self.tf.device("/GPU:0"):
                return self.tf.zeros([mib * MIB], dtype=self.tf.uint8) + 0
        except self.tf.errors.ResourceExhaustedError as exc:
            raise OutOfMemory(str(exc).splitlines()[0]) from exc

    def compute(self) -> None:
        with self.tf.device("/GPU:0"):
            x = self.tf.ones([256, 256])
            self.tf.reduce_sum(self.tf.matmul(x, x)).numpy()


class SimulatedBackend(Backend):
    """A pretend GPU: a pool of `capacity` MiB in a file all tenants share, and a per-process
    limit from GPU_MEMORY_FRACTION when set (as a framework honouring the profile would)."""

    platform = "gpu"

    def __init__(self, pool: Path, capacity: int) -> None:
        self.pool, self.capacity = pool, capacity
        fraction = os.environ.get("GPU_MEMORY_FRACTION")
        self.limit = int(capacity * float(fraction)) if fraction else capacity
        self.held = 0

    def allocate(self, mib: int) -> Any:
        if self.held + mib > self.limit:
            raise OutOfMemory(f"over this process's limit of {self.limit} MiB")
        with self.pool.open("a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.seek(0)
            used = int(handle.read() or 0)
            if used + mib > self.capacity:
                raise OutOfMemory(f"the device is full ({used} of {self.capacity} MiB used)")
            handle.seek(0)
            handle.truncate()
            handle.write(str(used + mib))
        self.held += mib
        return mib

    def compute(self) -> None:
        pass


BACKENDS: dict[str, Callable[[argparse.Namespace], Backend]] = {
    "pytorch": lambda args: TorchBackend(),
    "jax": lambda args: JaxBackend(),
    "tensorflow": lambda args: TensorflowBackend(),
    "simulated": lambda args: SimulatedBackend(Path(args.pool), args.capacity_mib),
}


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def grow(backend: Backend, held: list[Any], target: int | None) -> tuple[bool, int]:
    """Allocate chunks until `target` MiB (or, with None, until out of memory)."""
    total = 0
    while target is None or total < target:
        step = CHUNK_MIB if target is None else min(CHUNK_MIB, target - total)
        try:
            held.append(backend.allocate(step))
        except OutOfMemory:
            return False, total
        total += step
    return True, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", choices=sorted(BACKENDS), required=True)
    parser.add_argument("--pool", default="", help="simulated: the shared pool file")
    parser.add_argument("--capacity-mib", type=int, default=0, help="simulated: pool size")
    args = parser.parse_args(argv)
    try:
        backend = BACKENDS[args.framework](args)
    except Exception as exc:
        say(f"error {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return 1
    say(f"ready {backend.platform}")
    held: list[Any] = []
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "fill":
            _, total = grow(backend, held, None)
            if held:  # a greedy job that hit its limit backs off a little and carries on
                held.pop()
                total -= CHUNK_MIB
            say(f"full {total}")
        elif command == "grow":
            reached, total = grow(backend, held, int(argument))
            say(f"{'ok' if reached else 'oom'} {total}")
        elif command == "check":
            try:
                backend.compute()
                say("alive")
            except Exception as exc:
                say(f"dead {type(exc).__name__}")
        elif command == "exit":
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
