"""The one base class for every pure-core model: frozen, strict about unknown fields."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable pydantic model; equality and hashing by value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    _defaults: ClassVar[dict[type, dict[str, Any]]] = {}

    @classmethod
    def trusted(cls, **values: Any) -> Self:
        """An instance built without validation, for the transition's hot path, from values
        the core made itself (``model_construct`` costs several times more). Fields not
        given take their declared defaults; a field with a default factory must be given."""
        defaults = Frozen._defaults.get(cls)
        if defaults is None:
            # Every field in declared order (one without a default as PydanticUndefined):
            # ``update`` keeps a key's place, so the instance serializes its fields in the
            # same order as a validated one, and a logged action reads the same either way.
            defaults = Frozen._defaults[cls] = {
                name: field.default for name, field in cls.model_fields.items()
            }
        fields = defaults.copy()
        fields.update(values)
        new = object.__new__(cls)
        object.__setattr__(new, "__dict__", fields)
        object.__setattr__(new, "__pydantic_fields_set__", set(values))
        object.__setattr__(new, "__pydantic_extra__", None)
        object.__setattr__(new, "__pydantic_private__", None)
        return new

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
