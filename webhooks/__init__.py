"""Admission webhooks, in rooms of one job each (docs/DESIGN.md, the map), lowest first:

- `core/`: what one admission request is, for every path and every policy: the AdmissionReview
  decoded and checked against Kubernetes shapes (`review.py`, `review_shapes.py`), a JSON Patch
  and its words (`patch.py`, `change_words.py`), a pod's API-server defaults, a workload's pod
  templates (`workload_kinds.py`).
- `credentials/`: what a credential Secret of each type must hold.
- `policies/`: the policies, pure, one module each.
- `apiserver_policies/`: what kube-apiserver runs itself, generated from the configuration.
- `dispatch/`: which policies a request meets and how their answers combine: the registry of
  webhooks, the chain, and workloads judged through their pods' policies.
- `service/`: the HTTPS service: the aiohttp application, its answer memo, its draining.
- `offline/`: the offline `review` command: the chain and the API server's policies over files.
- `audit/`: what the policies would do to what a cluster already holds (`gpu-admission audit`,
  the controller's background audit).

A room imports only rooms above it in this list (`lint-imports` holds it, pyproject.toml).
"""
