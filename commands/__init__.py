"""The entry points: the `gpu-admission` command and what each sub-command runs.

The top layer: it imports the webhooks, the controllers and the certificates, which import the
foundation (`gpu_admission`); nothing below imports this package. `cli` starts `load` without
importing the service, so this package's `__init__` imports nothing.
"""
