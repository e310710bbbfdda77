"""What the service knows about the cluster: read-only views fed by informers."""
