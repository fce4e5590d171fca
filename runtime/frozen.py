"""The one base class for every pure-core model: frozen, strict about unknown fields."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable pydantic model; equality and hashing by value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def replace(self, **update: Any) -> Self:
        """A copy with some fields replaced, without validation.

        The transition builds several new states per action, so this is its hot path:
        pydantic's ``model_copy`` goes through ``copy.copy`` machinery and costs about 4x
        more. Callers pass values of the declared types (the core builds them itself)."""
        new = object.__new__(type(self))
        values = self.__dict__.copy()
        values.update(update)
        object.__setattr__(new, "__dict__", values)
        object.__setattr__(
            new, "__pydantic_fields_set__", self.__pydantic_fields_set__ | update.keys()
        )
        object.__setattr__(new, "__pydantic_extra__", None)
        object.__setattr__(new, "__pydantic_private__", None)
        return new
