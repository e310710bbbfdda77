"""The offline `gpu-admission review`: files put through the API server's policies and the
webhooks' chain as `kubectl apply -f` would send them, against a cluster state from a file or a
cluster."""
