"""The one base class for every pure-core model: frozen, strict about unknown fields."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticUndefined


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
            defaults = Frozen._defaults[cls] = {
                name: field.default
                for name, field in cls.model_fields.items()
                if field.default is not PydanticUndefined
            }
        new = object.__new__(cls)
        object.__setattr__(new, "__dict__", {**defaults, **values})
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
        fields_set = self.__pydantic_fields_set__
        if not update.keys() <= fields_set:
            fields_set = _shared_fields_set(fields_set | update.keys())
        # Shared with ``self`` when no new field was set (the usual case), else one of the
        # few sets every model shares: a set is 200+ bytes in every state kept. A frozen
        # model never changes its set, and pydantic's ``model_copy`` copies it first.
        object.__setattr__(new, "__pydantic_fields_set__", fields_set)
        object.__setattr__(new, "__pydantic_extra__", None)
        object.__setattr__(new, "__pydantic_private__", None)
        return new


# The distinct fields-set sets ``replace`` has made, one object each (a few dozen).
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}


def _shared_fields_set(fields: set[str]) -> set[str]:
    return _FIELDS_SETS.setdefault(frozenset(fields), fields)
