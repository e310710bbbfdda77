"""gpu-admission's foundation, in rooms of one job each (docs/DESIGN.md, the map), lowest first:

- `names.py`: every name users type or read (annotations, labels, gates, Secret types).
- `config/`: the configuration: its model and sections, where it is read from (files, layers,
  environment), each policy's mode, and the generated reference.
- `process/`: each process's own machinery: logging, metrics, probes, the event loop and its lag,
  the heap, stop signals, saying a repeating failure once.
- `keyless.py`: what a keyless Google credential file needs from the pod.
- `datasets/`: a dataset PVC's source, its load, its digest, its shards and its progress.
- `gpus/`: GPU facts about workloads: GPUs a scheduler gives, GPU daemons the policy would blind.
- `admission/`: facts about the admission objects: a finding, and the install's self-check.
- `cluster/`: what the processes know of the cluster: informers, views, the API's connections.

A room imports only rooms below it in this list (`lint-imports` holds it, pyproject.toml); every
other package (`webhooks`, `controllers`, `certs`, `loaders`, `gpu_usage`, and the entry points in
`commands`) imports this one, and it imports none of them.
"""

__version__ = "0.1.0"
