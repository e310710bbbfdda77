"""The base of every configuration section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    # Each field's docstring is its description: docs/configuration.md is generated from them.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
