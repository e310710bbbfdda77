"""The install checks itself: the leader watches the admission objects and compares them with
what the configuration implies (`checker.py`), and says what it finds (`report.py`)."""

from controllers.install_check.checker import InstallChecker

__all__ = ["InstallChecker"]
