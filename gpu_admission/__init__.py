"""gpu-admission: admission webhooks and a dataset loader for Kubernetes GPU clusters."""

__version__ = "0.1.0"
