"""Mount plans: which modules a session loads, parsed from a dict, YAML or TOML.

The shape is upstream Amplifier's::

    session:
      orchestrator: loop-basic            # or {module, source, config}
      context: {module: context-simple, config: {max_tokens: 100000}}
    orchestrator: {config: {max_iterations: 10}}   # config for the string form
    providers: [{module: provider-openai, config: {model: gpt-4o}}]
    tools: [{module: tool-filesystem}]
    hooks: [{module: hooks-logging}]
    agents: {...}                          # passed through, not interpreted

Every error is one line naming the field: ``providers[0].module: required``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import attrs
import yaml

from ..errors import ConfigError

__all__ = ("ModuleSpec", "MountPlan")

_SECTIONS = ("providers", "tools", "hooks")


@attrs.frozen(kw_only=True)
class ModuleSpec:
    """One module to load: its id, where its code is (optional) and its config."""

    module: str
    source: str | None = None
    config: dict[str, Any] = attrs.field(factory=dict)
    instance_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plan entry as a dict (defaults left out)."""
        entry: dict[str, Any] = {"module": self.module}
        if self.source is not None:
            entry["source"] = self.source
        if self.config:
            entry["config"] = self.config
        if self.instance_id is not None:
            entry["instance_id"] = self.instance_id
        return entry


@attrs.frozen(kw_only=True)
class MountPlan:
    """A parsed, validated mount plan. ``raw`` is the plan as given (a dict)."""

    orchestrator: ModuleSpec
    context: ModuleSpec
    providers: tuple[ModuleSpec, ...] = ()
    tools: tuple[ModuleSpec, ...] = ()
    hooks: tuple[ModuleSpec, ...] = ()
    agents: dict[str, Any] = attrs.field(factory=dict)
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_dict(cls, data: Any) -> MountPlan:
        """Validate and parse a plan dict; raises ConfigError naming the field."""
        if not isinstance(data, Mapping):
            _fail("<plan>", f"expected a table, got {_kind(data)}")
        session = data.get("session")
        if not isinstance(session, Mapping):
            _fail(
                "session",
                "required" if session is None else f"expected a table, got {_kind(session)}",
            )
        agents = data.get("agents") or {}
        if not isinstance(agents, Mapping):
            _fail("agents", f"expected a table, got {_kind(agents)}")
        return cls(
            orchestrator=_single(data, session, "orchestrator"),
            context=_single(data, session, "context"),
            providers=_entries(data, "providers"),
            tools=_entries(data, "tools"),
            hooks=_entries(data, "hooks"),
            agents=dict(agents),
            raw=dict(data),
        )

    @classmethod
    def from_text(cls, text: str, *, suffix: str = ".yaml", origin: str = "<plan>") -> MountPlan:
        """Parse YAML (``.yaml``, ``.yml``) or TOML (``.toml``) text."""
        try:
            if suffix == ".toml":
                data: Any = tomllib.loads(text)
            else:
                data = yaml.safe_load(text)
        except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
            detail = " ".join(str(exc).split())
            msg = f"{origin}: not valid {'TOML' if suffix == '.toml' else 'YAML'}: {detail}"
            raise ConfigError(msg) from exc
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str | Path) -> MountPlan:
        """Read and parse a plan file (blocking: call it from a worker thread in async code)."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in (".yaml", ".yml", ".toml"):
            msg = f"{path}: unknown plan format {suffix or '(none)'!r}; use .yaml, .yml or .toml"
            raise ConfigError(msg)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            msg = f"{path}: cannot read: {exc.strerror or exc}"
            raise ConfigError(msg) from exc
        return cls.from_text(text, suffix=suffix, origin=str(path))

    @property
    def session_settings(self) -> dict[str, Any]:
        """The ``session`` table without the module entries (limits, metadata, …)."""
        session = self.raw.get("session", {})
        return {k: v for k, v in session.items() if k not in _SESSION_MODULE_KEYS}

    def to_dict(self) -> dict[str, Any]:
        """The plan in upstream's dict shape (table form for orchestrator and context)."""
        plan: dict[str, Any] = {
            "session": {
                **self.session_settings,
                "orchestrator": self.orchestrator.to_dict(),
                "context": self.context.to_dict(),
            }
        }
        for section in _SECTIONS:
            specs: tuple[ModuleSpec, ...] = getattr(self, section)
            if specs:
                plan[section] = [spec.to_dict() for spec in specs]
        if self.agents:
            plan["agents"] = self.agents
        return plan

    def all_modules(self) -> list[tuple[str, ModuleSpec]]:
        """Every module with its kind, in load order."""
        found = [("orchestrator", self.orchestrator), ("context", self.context)]
        for kind, section in (("provider", "providers"), ("tool", "tools"), ("hook", "hooks")):
            found.extend((kind, spec) for spec in getattr(self, section))
        return found


_SESSION_MODULE_KEYS = ("orchestrator", "orchestrator_source", "context", "context_source")


def _fail(field: str, problem: str) -> NoReturn:
    raise ConfigError(f"{field}: {problem}")


def _kind(value: Any) -> str:
    names: dict[type, str] = {dict: "a table", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def _single(data: Mapping[str, Any], session: Mapping[str, Any], key: str) -> ModuleSpec:
    value = session.get(key)
    field = f"session.{key}"
    if value is None:
        _fail(field, "required")
    if isinstance(value, str):
        top = data.get(key) or {}
        if not isinstance(top, Mapping):
            _fail(key, f"expected a table, got {_kind(top)}")
        entry = {
            "module": value,
            "source": session.get(f"{key}_source"),
            "config": top.get("config"),
        }
        return _spec(entry, field, id_field=field)
    if isinstance(value, Mapping):
        return _spec(value, field)
    return _fail(
        field, f"expected a module id or a {{module, source, config}} table, got {_kind(value)}"
    )


def _entries(data: Mapping[str, Any], section: str) -> tuple[ModuleSpec, ...]:
    value = data.get(section)
    if value is None:
        return ()
    if not isinstance(value, list):
        _fail(section, f"expected a list, got {_kind(value)}")
    specs = tuple(_spec(entry, f"{section}[{i}]") for i, entry in enumerate(value))
    if section == "providers":
        _check_instances(section, specs)
    return specs


def _spec(entry: Any, field: str, *, id_field: str | None = None) -> ModuleSpec:
    if isinstance(entry, str):
        entry = {"module": entry}
    if not isinstance(entry, Mapping):
        _fail(field, f"expected a table, got {_kind(entry)}")
    module = entry.get("module")
    id_field = id_field or f"{field}.module"
    if module is None or module == "":
        _fail(id_field, "required")
    if not isinstance(module, str):
        _fail(id_field, f"expected a module id string, got {_kind(module)}")
    source = entry.get("source")
    if source is not None and not isinstance(source, str):
        _fail(f"{field}.source", f"expected a string, got {_kind(source)}")
    config = entry.get("config")
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        _fail(f"{field}.config", f"expected a table, got {_kind(config)}")
    instance_id = entry.get("instance_id")
    if instance_id is not None and not isinstance(instance_id, str):
        _fail(f"{field}.instance_id", f"expected a string, got {_kind(instance_id)}")
    return ModuleSpec(module=module, source=source, config=dict(config), instance_id=instance_id)


def _check_instances(section: str, specs: tuple[ModuleSpec, ...]) -> None:
    # Two providers of one module need instance ids, or the second would replace the first.
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        key = spec.instance_id or spec.module
        if key in seen:
            used_by = f"{section}[{seen[key]}]"
            msg = f"{section}[{i}].instance_id: required, {key!r} is already used by {used_by}"
            raise ConfigError(msg)
        seen[key] = i
