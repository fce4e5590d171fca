"""The one base class for every pure-core model: frozen, strict about unknown fields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict

# The slots every model instance has, set through their descriptors (``trusted`` and
# ``replace`` are hot: a looked-up ``object.__setattr__`` per slot was a third of
# ``trusted``'s time, and the parsers build most of their events with it). ``__dict__``
# too: BaseModel's slots include it, and its descriptor spares a generic attribute set.
_new_object = object.__new__
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__


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
        new = _new_object(cls)
        _set_dict(new, fields)
        _set_fields_set(new, set(values))
        _set_extra(new, None)
        _set_private(new, None)
        return new

    @classmethod
    def builder(cls, *names: str) -> Callable[..., Self]:
        """``trusted`` made once for one set of fields: a function taking the values of
        ``names`` (in that order, or by name) and building the same instance ``trusted``
        would, in about half its time (no keyword dict, no class-attribute lookup, no copy
        of the defaults, one shared fields set): what a parser builds for nearly every line
        it reads.

        Every field not named must have a plain default (``TypeError`` otherwise, where
        ``trusted`` would leave it unset)."""
        fields = cls.model_fields
        unknown = [name for name in names if name not in fields]
        if unknown or len(set(names)) != len(names):
            raise TypeError(f"{cls.__name__}.builder{names}: unknown or repeated fields")
        namespace: dict[str, Any] = {
            "_new": _new_object,
            "_cls": cls,
            "_set_dict": _set_dict,
            "_set_fields_set": _set_fields_set,
            "_set_extra": _set_extra,
            "_set_private": _set_private,
        }
        items = []
        for i, (name, field) in enumerate(fields.items()):
            if name in names:
                items.append(f"{name!r}: {name}")
                continue
            if field.is_required() or field.default_factory is not None:
                raise TypeError(f"{cls.__name__}.builder: field {name!r} must be given")
            namespace[f"_d{i}"] = field.default
            items.append(f"{name!r}: _d{i}")
        # One fields set for all the instances, as ``replace`` shares them: a frozen model
        # never changes its set.
        namespace["_fields_set"] = _shared_fields_set(set(names))
        # Generated source, as dataclasses do, so the dict is a literal (field names are
        # identifiers, never starting with "_" in pydantic: no clash with the helpers).
        source = (
            f"def build({', '.join(names)}):\n"
            "    new = _new(_cls)\n"
            f"    _set_dict(new, {{{', '.join(items)}}})\n"
            "    _set_fields_set(new, _fields_set)\n"
            "    _set_extra(new, None)\n"
            "    _set_private(new, None)\n"
            "    return new\n"
        )
        exec(compile(source, f"<{cls.__name__}.builder>", "exec"), namespace)
        build: Callable[..., Self] = namespace["build"]
        build.__qualname__ = f"{cls.__name__}.builder({', '.join(names)})"
        return build

    def replace(self, **update: Any) -> Self:
        """A copy with some fields replaced, without validation.

        The transition builds several new states per action, so this is its hot path:
        pydantic's ``model_copy`` goes through ``copy.copy`` machinery and costs about 4x
        more. Callers pass values of the declared types (the core builds them itself)."""
        new = _new_object(type(self))
        values = self.__dict__.copy()
        values.update(update)
        _set_dict(new, values)
        fields_set = self.__pydantic_fields_set__
        if not fields_set.issuperset(update):
            fields_set = _shared_fields_set(fields_set | update.keys())
        # Shared with ``self`` when no new field was set (the usual case), else one of the
        # few sets every model shares: a set is 200+ bytes in every state kept. A frozen
        # model never changes its set, and pydantic's ``model_copy`` copies it first.
        _set_fields_set(new, fields_set)
        _set_extra(new, None)
        _set_private(new, None)
        return new


# The distinct fields-set sets ``replace`` has made, one object each (a few dozen).
_FIELDS_SETS: dict[frozenset[str], set[str]] = {}


def _shared_fields_set(fields: set[str]) -> set[str]:
    return _FIELDS_SETS.setdefault(frozenset(fields), fields)
