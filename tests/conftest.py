"""Shared pytest configuration: the Kubernetes API emulator's fixtures are available to every test."""

import importlib.util

# TEMP-GUARD: the emulator plugin lands separately; drop this guard once it is in.
if importlib.util.find_spec("tests.kubeapi.pytest_plugin") is not None:
    pytest_plugins = ["tests.kubeapi.pytest_plugin"]
