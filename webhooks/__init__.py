"""Admission webhooks: AdmissionReview handling, policy interface, policies and the service."""
