"""The controllers: the dataset loader controller, its work queue and leader election.

They run in a process of their own (`gpu-admission controller`, a second Deployment of the same
image), never in the webhook service; only the replica holding the Lease reconciles.
"""
