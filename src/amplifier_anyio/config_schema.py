"""Declarative config schemas: the keys a module accepts and the types their values take.

A module declares its schema beside its ``mount`` as a module-level ``CONFIG_SCHEMA``:

```python
CONFIG_SCHEMA = ConfigSchema(
    "tool-bash",
    {
        "timeout": Setting((int, float), "seconds a command may run"),
        "working_dir": Setting((str,), "where commands run"),
    },
)
```

or derives it from the attrs class that parses its config
(``ConfigSchema.from_attrs("loop-basic", LoopBasicConfig)``). The schema is what
``amplifier-anyio validate --strict`` and ``AmplifierSession(plan, strict=True)`` check
before anything is mounted: unknown keys (errors in strict mode, warnings otherwise) and
values of the wrong type. Ranges and meaning stay the module's own parse (a
[`ConfigError`][amplifier_anyio.ConfigError] from ``mount``), which validation runs too.
"""

from __future__ import annotations

import sys
import types
import typing
from collections import abc
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs

__all__ = ("ConfigSchema", "Setting", "ConfigProblem", "schema_of")

_JSON_NAMES = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a mapping",
}


def _frozen_map(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(mapping))


def _frozen_set(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


def _type_tuple(kinds: Iterable[type]) -> tuple[type, ...]:
    return tuple(kinds)


@attrs.frozen
class Setting:
    """One accepted key: the Python types its value may have after YAML / TOML parsing.

    ``float`` accepts an int too; ``int`` and ``float`` never accept a bool. ``None`` is
    always accepted (it means "the default"), unless ``nullable`` is false.
    """

    types: tuple[type, ...] = attrs.field(converter=_type_tuple)
    description: str = ""
    nullable: bool = True

    def accepts(self, value: object) -> bool:
        """Whether ``value`` has one of the setting's types."""
        if value is None:
            return self.nullable
        if isinstance(value, bool):
            return bool in self.types
        if isinstance(value, int) and float in self.types:
            return True
        return isinstance(value, self.types)

    def describe(self) -> str:
        """The expected types in words: ``an integer or a string``."""
        names = [_JSON_NAMES.get(t, t.__name__) for t in self.types]
        return " or ".join(names) or "nothing"


@attrs.frozen
class ConfigProblem:
    """One finding: ``unknown`` key (an error only in strict mode) or wrong ``type``."""

    module: str
    key: str
    kind: Literal["unknown", "type"]
    message: str

    def __str__(self) -> str:
        return f"{self.module}.{self.key}: {self.message}"


@attrs.frozen
class ConfigSchema:
    """The config keys a module accepts. ``aliases`` map another accepted spelling to a
    key (upstream's names); ``extra`` names keys accepted with any value and unchecked."""

    module: str
    settings: Mapping[str, Setting] = attrs.field(converter=_frozen_map)
    aliases: Mapping[str, str] = attrs.field(factory=dict, converter=_frozen_map)
    extra: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen_set)

    def check(self, config: Mapping[str, Any] | None) -> list[ConfigProblem]:
        """Every unknown key and every value of the wrong type, in the config's order."""
        problems: list[ConfigProblem] = []
        for key, value in (config or {}).items():
            name = self.aliases.get(key, key)
            setting = self.settings.get(name)
            if setting is None:
                if key not in self.extra:
                    problems.append(ConfigProblem(self.module, key, "unknown", self._unknown(key)))
            elif not setting.accepts(value):
                message = f"expected {setting.describe()}, got {value!r}"
                problems.append(ConfigProblem(self.module, key, "type", message))
        return problems

    def _unknown(self, key: str) -> str:
        known = ", ".join(sorted({*self.settings, *self.aliases, *self.extra}))
        return f"unknown key (known: {known})" if known else "unknown key (takes no config)"

    @classmethod
    def from_attrs(
        cls,
        module: str,
        config_class: type,
        *,
        aliases: Mapping[str, str] | None = None,
        extra: frozenset[str] | set[str] = frozenset(),
    ) -> ConfigSchema:
        """A schema whose keys are the fields of an attrs config class, typed by their
        annotations (``float | None``, ``Literal[...]``, ``list[str]``, …)."""
        # No global namespace given: each class of the MRO resolves its annotations in
        # its own module (a subclass elsewhere must not hide its bases' names).
        hints = typing.get_type_hints(config_class, include_extras=False)
        settings = {
            field.name: Setting(_python_types(hints[field.name]), _doc(field))
            for field in attrs.fields(config_class)
            if field.init
        }
        return cls(module, settings, aliases or {}, extra)


def schema_of(mount: Callable[..., Any]) -> ConfigSchema | None:
    """The schema a module declares: ``mount.config_schema``, else ``CONFIG_SCHEMA`` in the
    module that defines ``mount``; None when it declares none."""
    schema = getattr(mount, "config_schema", None)
    if schema is None:
        schema = getattr(sys.modules.get(getattr(mount, "__module__", "")), "CONFIG_SCHEMA", None)
    return schema if isinstance(schema, ConfigSchema) else None


def _doc(field: attrs.Attribute[Any]) -> str:
    return str(field.metadata.get("doc", ""))


def _python_types(annotation: Any) -> tuple[type, ...]:
    """The runtime types a parsed config value may have for an annotation."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return (object,)
    if origin in (typing.Union, types.UnionType):
        found: list[type] = []
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                found.extend(t for t in _python_types(arg) if t not in found)
        return tuple(found)
    if origin is Literal:
        return tuple(dict.fromkeys(type(v) for v in typing.get_args(annotation)))
    if origin is not None:
        annotation = origin
    if annotation in (tuple, list, set, frozenset) or _is_sequence(annotation):
        return (list,)
    if annotation is dict or _is_mapping(annotation):
        return (dict,)
    return (annotation,) if isinstance(annotation, type) else (object,)


def _is_sequence(annotation: Any) -> bool:
    return annotation in (abc.Sequence, abc.Collection, abc.Iterable)


def _is_mapping(annotation: Any) -> bool:
    return annotation in (abc.Mapping, abc.MutableMapping)
