"""The one base class for every pure-core model: frozen, strict about unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable pydantic model; equality and hashing by value."""

    model_config = ConfigDict(frozen=True, extra="forbid")
