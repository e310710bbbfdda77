"""The byte units the agent and the usage report speak in: NVML counts bytes, people read MiB."""

MIB = 1024**2
GIB = 1024**3
