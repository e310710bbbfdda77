"""gpu-admission's foundation: config, names, the data-source grammar, cluster caches, metrics.

Every other package (`webhooks`, `controllers`, `certs`, and the entry points in `commands`)
imports this one; it imports none of them.
"""

__version__ = "0.1.0"
