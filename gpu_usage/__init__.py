"""The node agent (`gpu-admission gpu-usage`): what each container really uses of its GPU, from
NVML per process, mapped to containers through /proc and to pods through the node's own pods;
and `gpu-admission usage`, the shares and GPU-hours it implies, from Prometheus."""
