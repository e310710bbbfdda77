"""Which policies a request meets and how their answers combine: the webhooks and their policies
(`registry.py`), the chain that runs them by mode (`chain.py`), and workloads judged by every pod
policy through their templates (`workload_checks.py`)."""
