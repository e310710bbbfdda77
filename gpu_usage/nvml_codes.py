"""NVML's return codes (nvml.h's nvmlReturn_t), by number, so the played binding in the tests
needs only these, and the code an error of the binding carries."""

from __future__ import annotations

UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18


def code_of(error: BaseException) -> int | None:
    """The NVML code of the binding's NVMLError (its `.value`); None for anything else."""
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None
