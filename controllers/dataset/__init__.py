"""The dataset loader controller (see controller.py); `DatasetController` is its entry point."""

from controllers.dataset.controller import DatasetController

__all__ = ["DatasetController"]
