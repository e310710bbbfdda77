"""What a sweep says when NVML, or one GPU, cannot be read: the exceptions that stop a sweep,
each GPU's fault (short for a metric's label, whole for people), and the words for each cause.
Each message says what is wrong and what to do."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_usage.nvml_codes import (
    DRIVER_NOT_LOADED,
    GPU_IS_LOST,
    LIB_RM_VERSION_MISMATCH,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    code_of,
)

# What a Fault covers: the whole GPU (nothing of it read), or only its utilization.
ALL = "all"
UTILIZATION = "utilization"


class NvmlUnavailable(Exception):
    """NVML cannot be read on this node; the message says why and what to do."""


class DriverChanged(NvmlUnavailable):
    """The driver is not the one whose library this process loaded: only a new process reads it
    (the kubelet restarts the agent's container, with the library of the driver now loaded)."""


@dataclass(frozen=True)
class Fault:
    """Why one GPU was not read: `reason` short, for a metric's label; `message` for people."""

    reason: str  # gpu_lost, no_permission, old_driver, nvml_error, hung
    message: str
    # ALL: the GPU was not read, its containers have no series; UTILIZATION: its processes and
    # memory were read, only the duty cycle of its containers is missing.
    figure: str = ALL


def unavailable_message(error: BaseException) -> str:
    code = code_of(error)
    if code == LIBRARY_NOT_FOUND or isinstance(error, (OSError, ImportError)):
        return (
            "NVML (libnvidia-ml.so.1) was not found: this node has no NVIDIA driver, or the "
            "agent's container does not get it. Run the agent on GPU nodes only, with the "
            "NVIDIA container runtime (runtimeClassName: nvidia where it is not the default)"
        )
    if code == DRIVER_NOT_LOADED:
        return "the NVIDIA driver is not loaded on this node (nvidia-smi says the same): load it"
    if code == LIB_RM_VERSION_MISMATCH:
        return (
            "the NVIDIA driver is not the one whose library this agent loaded (a driver "
            "upgrade): restarting to load the new one"
        )
    return f"NVML could not be initialised: {error}"


# The first init's LIB_RM_VERSION_MISMATCH: the same words at each try, so said once.
MISMATCH_AT_START = (
    "the NVIDIA driver's kernel module and its library (libnvidia-ml.so.1) are of different "
    'versions (LIB_RM_VERSION_MISMATCH; `nvidia-smi` on the node says "Driver/library version '
    'mismatch"): the driver was upgraded without its kernel module being reloaded. Reboot the '
    "node, or reload the NVIDIA kernel modules"
)


def hung_fault(seconds: float) -> Fault:
    return Fault(
        "hung",
        f"an NVML call on this GPU has not returned for {seconds:.0f} s (fallen off the bus, or "
        "in a reset?): the other GPUs are read meanwhile; `nvidia-smi` on the node says more, "
        "and a GPU that stays so needs the node drained and the GPU checked",
    )


def fault_of(error: BaseException, figure: str = ALL) -> Fault:
    code = code_of(error)
    if code == GPU_IS_LOST:
        return Fault(
            "gpu_lost",
            "the GPU is lost (fallen off the bus, or being reset): `nvidia-smi` on the node "
            "says the same; drain the node and have the GPU checked",
            figure,
        )
    if code == NO_PERMISSION:
        return Fault(
            "no_permission",
            "NVML refuses the agent this device (no permission); on a MIG GPU, read as a "
            "non-root user, that may need the MIG monitor capability (docs/gpu-usage.md, MIG)",
            figure,
        )
    if code is None:  # NVMLLibraryMismatchError: the binding's process calls need R510+
        return Fault(
            "old_driver",
            f"the driver is older than this NVML binding's process calls need ({error}): "
            "upgrade the driver to R510 or later",
            figure,
        )
    return Fault("nvml_error", f"NVML answered {error}", figure)
