"""The policies, one module each. Each module exports `policies(config) -> list[...]`."""
