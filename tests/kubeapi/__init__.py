"""Kubernetes API emulator used by the tests (documentation grows with the package)."""
