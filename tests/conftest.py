"""Shared pytest configuration: the API emulator's fixtures are available to every test."""

pytest_plugins = ["tests.kubeapi.pytest_plugin", "tests.e2e_harness"]
