"""Certificates for the webhook service: issue, store, rotate, reload live, publish the caBundle."""
