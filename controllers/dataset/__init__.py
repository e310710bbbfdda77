"""The dataset loader controller (see controller.py); `DatasetController` is its entry point.

It is imported on first use, not with the package: `audit --sources` reads the source checks
(source_version_audit.py), and the command line is built by every process, the webhook service's
too, which must not carry the controller's modules (about 7 MiB resident) for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from controllers.dataset.controller import DatasetController

__all__ = ["DatasetController"]


def __getattr__(name: str) -> Any:
    if name == "DatasetController":
        from controllers.dataset.controller import DatasetController

        return DatasetController
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
