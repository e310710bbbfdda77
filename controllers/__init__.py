"""Controllers that run inside the gpu-admission process (under leader election)."""
