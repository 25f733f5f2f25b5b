"""Mount plans: which modules a session loads, parsed from a dict, YAML or TOML.

The shape is upstream Amplifier's:

```yaml
session:
  orchestrator: loop-basic            # or {module, source, config}
  context: {module: context-simple, config: {max_tokens: 100000}}
  executor: {module: process, config: {}}   # where tool calls run (default: local)
  cassette: {path: run.jsonl, mode: auto, tools: false}   # record / replay (testing)
  providers_policy: {fallback: [backup], on: [429, 5xx, timeout], hedge_after: 2.0}
orchestrator: {config: {max_iterations: 10}}   # config for the string form
providers: [{module: provider-openai, config: {model: gpt-4o}}]
tools: [{module: tool-filesystem}]      # or {module, config, executor: local}
hooks: [{module: hooks-logging}]
agents: {...}                          # passed through untouched (also `all`, a list)
instruction: You are terse.            # the system instruction (optional)
```

``${VAR}`` and ``${VAR:default}`` in any string value (``agents`` and ``instruction``
aside) are replaced from the environment when the plan is parsed; an unset variable
without a default is an error naming the field. ``instruction:`` is the session's system
instruction. Upstream bundles and profiles (``includes:``, ``agents: {include: …}``,
``profile: {extends: …}``, ``.md`` files) are resolved into this shape by
``session/_bundles.py`` before they are parsed here.

Every error is one line naming the field: ``providers[0].module: required``.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import attrs

from ..errors import (
    ConfigError,
    LLMError,
    LLMTimeoutError,
    NetworkError,
    ProviderUnavailableError,
    StreamError,
)

__all__ = (
    "ModuleSpec",
    "MountPlan",
    "CassetteSpec",
    "DurableSpec",
    "ActivitySpec",
    "CASSETTE_MODES",
    "ProvidersPolicy",
    "FAILOVER_CONDITIONS",
    "expand_variables",
    "parse_document",
)

_SECTIONS = ("providers", "tools", "hooks")


@attrs.frozen(kw_only=True)
class ModuleSpec:
    """One module to load: its id, where its code is (optional) and its config.

    ``optional``: a failure to load it is a warning (and a ``module:load_failed`` event)
    instead of a failed session start.
    """

    module: str
    source: str | None = None
    config: dict[str, Any] = attrs.field(factory=dict)
    instance_id: str | None = None
    optional: bool = False
    executor: ModuleSpec | None = None
    """A tool entry's own executor (``executor: local`` keeps a cheap tool local)."""
    problem: str | None = attrs.field(default=None, eq=False)
    """Why an ``optional`` entry cannot load as written (an unset ``${VAR}``): the
    session reports it as that entry's load failure instead of refusing the plan."""

    def to_dict(self) -> dict[str, Any]:
        """The plan entry as a dict (defaults left out)."""
        entry: dict[str, Any] = {"module": self.module}
        if self.source is not None:
            entry["source"] = self.source
        if self.config:
            entry["config"] = self.config
        if self.instance_id is not None:
            entry["instance_id"] = self.instance_id
        if self.optional:
            entry["optional"] = True
        if self.executor is not None:
            entry["executor"] = self.executor.to_dict()
        return entry


CASSETTE_MODES = ("record", "replay", "auto", "new_episodes")
"""What ``session.cassette.mode`` may be (see `amplifier_anyio.runtime` (the cassette))."""


@attrs.frozen(kw_only=True)
class CassetteSpec:
    """``session.cassette``: record the session's provider calls to ``path`` (JSON lines)
    or answer them from it (DESIGN §16, ``docs/testing.md``).

    ``mode``: ``record`` (a fresh file), ``replay`` (no provider request at all),
    ``auto`` (replay when the file exists, else record) or ``new_episodes`` (replay what
    was recorded, record calls past the end). ``tools``: record tool results too, and
    replay them without running the tools. A relative ``path`` is taken from the working
    directory.
    """

    path: str
    mode: str = "auto"
    tools: bool = False

    @classmethod
    def from_value(cls, value: Any, field: str = "session.cassette") -> CassetteSpec:
        """Parse a ``{path, mode, tools}`` table (or a bare path: mode auto); a bad value
        is a ConfigError naming the key (``session.cassette.mode: ...``)."""
        if isinstance(value, str | os.PathLike):
            value = {"path": os.fspath(value)}
        if not isinstance(value, Mapping):
            _fail(field, f"expected a {{path, mode, tools}} table, got {_kind(value)}")
        unknown = sorted(str(k) for k in value if k not in ("path", "mode", "tools"))
        if unknown:
            _fail(f"{field}.{unknown[0]}", "unknown key (expected path, mode, tools)")
        path = value.get("path")
        if path is None or path == "":
            _fail(f"{field}.path", "required")
        if not isinstance(path, str | os.PathLike):
            _fail(f"{field}.path", f"expected a file path, got {_kind(path)}")
        mode = value.get("mode", "auto")
        if mode not in CASSETTE_MODES:
            _fail(f"{field}.mode", f"expected one of {', '.join(CASSETTE_MODES)}, got {mode!r}")
        tools = value.get("tools", False)
        if not isinstance(tools, bool):
            _fail(f"{field}.tools", f"expected true or false, got {_kind(tools)}")
        return cls(path=os.fspath(path), mode=mode, tools=tools)

    def to_dict(self) -> dict[str, Any]:
        """The plan's ``session.cassette`` table."""
        return {"path": self.path, "mode": self.mode, "tools": self.tools}


DURABLE_ENGINES = ("temporal",)
"""What ``session.durable.engine`` may be."""


def _seconds(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        _fail(field, f"expected a number of seconds > 0, got {value!r}")
    return float(value)


MAX_WORKFLOW_TASK_TIMEOUT = 120.0
"""Temporal's cap on a workflow task timeout (seconds)."""


def _task_timeout(value: Any, field: str) -> float:
    seconds = _seconds(value, field)
    if seconds > MAX_WORKFLOW_TASK_TIMEOUT:
        cap = f"{MAX_WORKFLOW_TASK_TIMEOUT:g}"
        _fail(field, f"expected at most {cap} s (Temporal's cap), got {value!r}")
    return seconds


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(field, f"expected an integer >= 1, got {value!r}")
    return value


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        _fail(field, f"expected a non-empty string, got {_kind(value)}")
    return value


def _table(value: Any, field: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _fail(field, f"expected a table, got {_kind(value)}")
    unknown = sorted(str(k) for k in value if k not in keys)
    if unknown:
        _fail(f"{field}.{unknown[0]}", f"unknown key (expected {', '.join(keys)})")
    return value


@attrs.frozen(kw_only=True)
class ActivitySpec:
    """How one kind of durable activity runs (seconds; attempts in total)."""

    start_to_close_timeout: float = 300.0
    heartbeat_timeout: float = 10.0
    maximum_attempts: int = 1

    @classmethod
    def from_value(cls, value: Any, field: str, default: ActivitySpec) -> ActivitySpec:
        """Parse a ``{start_to_close_timeout, heartbeat_timeout, maximum_attempts}`` table."""
        keys = ("start_to_close_timeout", "heartbeat_timeout", "maximum_attempts")
        table = _table(value, field, keys)
        return cls(
            start_to_close_timeout=_seconds(
                table.get("start_to_close_timeout", default.start_to_close_timeout),
                f"{field}.start_to_close_timeout",
            ),
            heartbeat_timeout=_seconds(
                table.get("heartbeat_timeout", default.heartbeat_timeout),
                f"{field}.heartbeat_timeout",
            ),
            maximum_attempts=_count(
                table.get("maximum_attempts", default.maximum_attempts),
                f"{field}.maximum_attempts",
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The table this spec was parsed from (every key)."""
        return {
            "start_to_close_timeout": self.start_to_close_timeout,
            "heartbeat_timeout": self.heartbeat_timeout,
            "maximum_attempts": self.maximum_attempts,
        }


_PROVIDER_ACTIVITY = ActivitySpec(maximum_attempts=3)
_TOOL_ACTIVITY = ActivitySpec(maximum_attempts=3)


@attrs.frozen(kw_only=True)
class DurableSpec:
    """``session.durable``: the session runs on Temporal (DESIGN §17, docs/durable-sessions.md).

    ``provider`` and ``tools`` govern the activities: a provider call is retried up to
    ``provider.maximum_attempts`` times; a tool call runs once unless its tool declares
    ``idempotent = True``, which gets ``tools.maximum_attempts``. ``sticky_timeout`` is how
    long a session's workflow tasks wait for the worker that last ran them before another
    worker takes them (what bounds failover after a worker dies), and
    ``continue_as_new_after_turns`` starts a fresh history every N turns, messages kept.
    ``workflow_task_timeout`` is how long a workflow task a worker took may run before
    the server gives it to another worker (what bounds failover when a worker dies holding
    one; Temporal caps it at 120 s).
    """

    engine: str = "temporal"
    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "amplifier"
    provider: ActivitySpec = _PROVIDER_ACTIVITY
    tools: ActivitySpec = _TOOL_ACTIVITY
    sticky_timeout: float = 1.0
    continue_as_new_after_turns: int = 100
    workflow_task_timeout: float = 10.0

    @classmethod
    def from_value(cls, value: Any, field: str = "session.durable") -> DurableSpec:
        """Parse the table; a bad value is a one-line ConfigError naming the key."""
        keys = (
            "engine",
            "address",
            "namespace",
            "task_queue",
            "provider",
            "tools",
            "sticky_timeout",
            "continue_as_new_after_turns",
            "workflow_task_timeout",
        )
        table = _table(value, field, keys)
        engine = table.get("engine", "temporal")
        if engine not in DURABLE_ENGINES:
            _fail(
                f"{field}.engine", f"expected one of {', '.join(DURABLE_ENGINES)}, got {engine!r}"
            )
        default = cls()
        return cls(
            engine=engine,
            address=_text(table.get("address", default.address), f"{field}.address"),
            namespace=_text(table.get("namespace", default.namespace), f"{field}.namespace"),
            task_queue=_text(table.get("task_queue", default.task_queue), f"{field}.task_queue"),
            provider=ActivitySpec.from_value(
                table.get("provider"), f"{field}.provider", _PROVIDER_ACTIVITY
            ),
            tools=ActivitySpec.from_value(table.get("tools"), f"{field}.tools", _TOOL_ACTIVITY),
            sticky_timeout=_seconds(
                table.get("sticky_timeout", default.sticky_timeout), f"{field}.sticky_timeout"
            ),
            continue_as_new_after_turns=_count(
                table.get("continue_as_new_after_turns", default.continue_as_new_after_turns),
                f"{field}.continue_as_new_after_turns",
            ),
            workflow_task_timeout=_task_timeout(
                table.get("workflow_task_timeout", default.workflow_task_timeout),
                f"{field}.workflow_task_timeout",
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The plan's ``session.durable`` table (every key)."""
        return {
            "engine": self.engine,
            "address": self.address,
            "namespace": self.namespace,
            "task_queue": self.task_queue,
            "provider": self.provider.to_dict(),
            "tools": self.tools.to_dict(),
            "sticky_timeout": self.sticky_timeout,
            "continue_as_new_after_turns": self.continue_as_new_after_turns,
            "workflow_task_timeout": self.workflow_task_timeout,
        }


FAILOVER_CONDITIONS = ("5xx", "timeout", "stream_cut", "network")
"""The named conditions of ``session.providers_policy.on``; an HTTP status (``429``,
``404``…) may be given too."""
_DEFAULT_ON: tuple[str | int, ...] = (429, *FAILOVER_CONDITIONS)


@attrs.frozen(kw_only=True)
class ProvidersPolicy:
    """``session.providers_policy``: what a provider call does when the provider fails or
    is slow (``docs/providers.md``).

    ``fallback``: the providers (mount names) tried after the turn's provider, in order.
    ``on``: the failures that move to the next one — HTTP statuses (``429``), ``5xx``,
    ``timeout``, ``stream_cut`` (a stream that broke, before or after its first token) and
    ``network`` (no connection); the default is all of them. ``hedge_after``: seconds
    after which, if the provider has produced nothing yet, the next one is asked too; the
    first to answer wins and the other is cancelled. None: no hedging.
    """

    fallback: tuple[str, ...] = ()
    on: tuple[str | int, ...] = _DEFAULT_ON
    hedge_after: float | None = None

    @classmethod
    def from_value(cls, value: Any, field: str = "session.providers_policy") -> ProvidersPolicy:
        """Parse the table; a bad value is a ConfigError naming the key."""
        if not isinstance(value, Mapping):
            _fail(field, f"expected a {{fallback, on, hedge_after}} table, got {_kind(value)}")
        unknown = sorted(str(k) for k in value if k not in ("fallback", "on", "hedge_after"))
        if unknown:
            _fail(f"{field}.{unknown[0]}", "unknown key (expected fallback, on, hedge_after)")
        fallback = value.get("fallback", [])
        if isinstance(fallback, str):
            fallback = [fallback]
        if not isinstance(fallback, list) or not all(isinstance(f, str) and f for f in fallback):
            _fail(f"{field}.fallback", "expected a list of provider names")
        return cls(
            fallback=tuple(fallback),
            on=_conditions(value.get("on", list(_DEFAULT_ON)), f"{field}.on"),
            hedge_after=_hedge_after(value.get("hedge_after"), f"{field}.hedge_after"),
        )

    def reason(self, exc: BaseException, *, partial: bool) -> str | None:
        """The condition of ``on`` that ``exc`` meets (``partial``: the stream had already
        produced tokens), or None: the failure is the call's."""
        if not isinstance(exc, LLMError):
            return None
        status = exc.status_code
        candidates: list[str | int] = []
        if partial or (isinstance(exc, StreamError) and status is None):
            candidates.append("stream_cut")
        if isinstance(exc, LLMTimeoutError) or status == 408:
            candidates.append("timeout")
        if isinstance(exc, NetworkError):
            candidates.append("network")
        if status is not None:
            candidates.append(status)
            if status >= 500:
                candidates.append("5xx")
        elif isinstance(exc, ProviderUnavailableError):
            candidates.append("5xx")
        return next((str(c) for c in candidates if c in self.on), None)


def _conditions(value: Any, field: str) -> tuple[str | int, ...]:
    items = value if isinstance(value, list) else [value]
    conditions: list[str | int] = []
    for index, item in enumerate(items):
        condition = int(item) if isinstance(item, str) and item.isdigit() else item
        status = isinstance(condition, int) and not isinstance(condition, bool)
        if (status and 400 <= condition <= 599) or condition in FAILOVER_CONDITIONS:
            conditions.append(condition)
        else:
            known = ", ".join(FAILOVER_CONDITIONS)
            problem = f"expected an HTTP status 400-599 or one of {known}, got {item!r}"
            _fail(f"{field}[{index}]", problem)
    return tuple(conditions)


def _hedge_after(value: Any, field: str) -> float | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        _fail(field, f"expected a number of seconds > 0, got {value!r}")
    return float(value)


@attrs.frozen(kw_only=True)
class MountPlan:
    """A parsed, validated mount plan. ``raw`` is the plan as given (a dict)."""

    orchestrator: ModuleSpec
    context: ModuleSpec
    providers: tuple[ModuleSpec, ...] = ()
    tools: tuple[ModuleSpec, ...] = ()
    hooks: tuple[ModuleSpec, ...] = ()
    agents: Any = attrs.field(factory=dict)
    """The plan's ``agents`` as written (a table, ``all``, a list): not interpreted."""
    includes: tuple[Any, ...] = ()
    """The plan's ``includes`` entries, not resolved yet: a session or ``validate``
    resolves them (``session/_bundles.py``); a plan read from a file has none left."""
    instruction: str | None = None
    """The system instruction (an upstream ``.md`` bundle's body, its context files
    after it): a session starts its history with it, unless the history has a system
    message already. Never ``${VAR}``-expanded."""
    executor: ModuleSpec | None = None
    """The session's executor (``session.executor``); None: local."""
    cassette: CassetteSpec | None = None
    """The session's cassette (``session.cassette``); None: providers are called."""
    providers_policy: ProvidersPolicy | None = None
    """Failover and hedging (``session.providers_policy``); None: one provider per call."""
    durable: DurableSpec | None = None
    """Where the session runs durably (``session.durable``); None: in this process."""
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_dict(cls, data: Any) -> MountPlan:
        """Validate and parse a plan dict; raises ConfigError naming the field."""
        try:
            return cls._from_dict(data)
        except RecursionError:
            msg = "<plan>: nested too deeply"
            raise ConfigError(msg) from None  # its chain is a thousand frames long

    @classmethod
    def _from_dict(cls, data: Any) -> MountPlan:
        if not isinstance(data, Mapping):
            _fail("<plan>", f"expected a table, got {_kind(data)}")
        session = data.get("session")
        if not isinstance(session, Mapping):
            _fail(
                "session",
                "required" if session is None else f"expected a table, got {_kind(session)}",
            )
        agents = data.get("agents")
        includes = data.get("includes")
        if includes is not None and not isinstance(includes, list):
            includes = [includes]
        instruction = data.get("instruction")
        if instruction is not None and not isinstance(instruction, str):
            _fail("instruction", f"expected a string, got {_kind(instruction)}")
        # Module entries expand one by one (an optional one may defer its problem); the
        # instruction is text for the model, never expanded.
        kept = ("agents", "instruction", *_SECTIONS)
        expanded = {
            **expand_variables({k: v for k, v in data.items() if k not in kept}),
            **{k: data[k] for k in (*_SECTIONS, "instruction") if k in data},
        }
        session = expanded["session"]
        return cls(
            orchestrator=_single(expanded, session, "orchestrator"),
            context=_single(expanded, session, "context"),
            providers=_entries(expanded, "providers"),
            tools=_entries(expanded, "tools"),
            hooks=_entries(expanded, "hooks"),
            agents={} if agents is None else agents,
            includes=tuple(includes or ()),
            instruction=instruction or None,
            executor=_executor(session.get("executor"), "session.executor"),
            cassette=_cassette(session.get("cassette")),
            providers_policy=_policy(session.get("providers_policy")),
            durable=_durable(session.get("durable")),
            raw=_raw(expanded, agents if "agents" in data else None),
        )

    @classmethod
    def from_text(cls, text: str, *, suffix: str = ".yaml", origin: str = "<plan>") -> MountPlan:
        """Parse YAML (``.yaml``, ``.yml``) or TOML (``.toml``) text.

        Whatever the text holds, a bad plan raises ConfigError only: text the parser
        refuses, nesting too deep to parse, aliases that expand without bound, a value
        that refers to itself, or a document that is not a table, each named by
        ``origin`` in one line; a table with a bad field names the field.
        """
        return cls.from_dict(parse_document(text, suffix=suffix, origin=origin))

    @classmethod
    def from_file(cls, path: str | Path) -> MountPlan:
        """Read and parse a plan file (blocking: call it from a worker thread in async code).

        Every problem with the file or its content is a ConfigError naming the file. An
        upstream bundle or profile (a ``.md`` file, ``includes``…) needs its references
        resolved: ``AmplifierSession(path)`` and ``validate`` do it, or
        ``session._bundles.resolve_plan_file``; here its ``includes`` stay unresolved.
        """
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix == ".md":
            msg = (
                f"{path}: an upstream bundle or profile: open it with AmplifierSession(path) "
                "or resolve it with session._bundles.resolve_plan_file"
            )
            raise ConfigError(msg)
        if suffix not in (".yaml", ".yml", ".toml"):
            msg = f"{path}: unknown plan format {suffix or '(none)'!r}; use .yaml, .yml or .toml"
            raise ConfigError(msg)
        try:
            data = path.read_bytes()
        except OSError as exc:
            msg = f"{path}: cannot read: {exc.strerror or exc}"
            raise ConfigError(msg) from exc
        try:
            text = data.decode("utf-8-sig")  # a byte-order mark is not an error
        except UnicodeDecodeError as exc:
            msg = f"{path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"
            raise ConfigError(msg) from None
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
        if self.executor is not None:
            plan["session"]["executor"] = self.executor.to_dict()
        for section in _SECTIONS:
            specs: tuple[ModuleSpec, ...] = getattr(self, section)
            if specs:
                plan[section] = [spec.to_dict() for spec in specs]
        if self.agents:
            plan["agents"] = self.agents
        if self.includes:
            plan["includes"] = list(self.includes)
        if self.instruction is not None:
            plan["instruction"] = self.instruction
        return plan

    def all_modules(self) -> list[tuple[str, ModuleSpec]]:
        """Every module with its kind, in load order."""
        found = [("orchestrator", self.orchestrator), ("context", self.context)]
        for kind, section in (("provider", "providers"), ("tool", "tools"), ("hook", "hooks")):
            found.extend((kind, spec) for spec in getattr(self, section))
        return found


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


def parse_document(text: str, *, suffix: str = ".yaml", origin: str = "<plan>") -> dict[str, Any]:
    """YAML (``.yaml``, ``.yml``) or TOML (``.toml``) text as a table.

    Whatever the text holds, a problem is a ConfigError naming ``origin`` in one line:
    text the parser refuses, nesting too deep to parse, aliases that expand without
    bound, a value that refers to itself, a document that is not a table.
    """
    kind = "TOML" if suffix == ".toml" else "YAML"
    import yaml  # noqa: PLC0415 - PyYAML costs ~10 ms of `import amplifier_anyio`

    try:
        data: Any = tomllib.loads(text) if suffix == ".toml" else yaml.safe_load(text)
    except RecursionError:
        msg = f"{origin}: not valid {kind}: nested too deeply"
        raise ConfigError(msg) from None  # its chain is a thousand frames long
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        msg = f"{origin}: not valid {kind}: {_one_line(exc)}"
        raise ConfigError(msg) from exc
    except Exception as exc:
        # PyYAML's constructors raise ValueError, KeyError, AttributeError… for a tag
        # that does not fit its value (``!!int abc``, ``!!timestamp x``, 2020-13-45),
        # and both parsers refuse integers of more than 4 300 digits.
        detail = f"a value could not be converted ({type(exc).__name__}: {_one_line(exc)})"
        raise ConfigError(f"{origin}: not valid {kind}: {detail}") from exc
    if not isinstance(data, Mapping):
        shape = "empty" if data is None else f"expected a table, got {_kind(data)}"
        raise ConfigError(f"{origin}: {shape}")
    expansion = _expansion_problem(data)
    if expansion is not None:
        raise ConfigError(f"{origin}: {expansion}")
    return dict(data)


def expand_variables(value: Any, field: str = "") -> Any:
    """``value`` with ``${VAR}`` / ``${VAR:default}`` in its strings (nested too) replaced
    from the environment; an unset variable without a default is a ConfigError naming
    the field (``providers[0].config.api_key: environment variable KEY is not set``)."""
    if isinstance(value, str):
        if "${" not in value:
            return value

        def lookup(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            found = os.environ.get(name)
            if found is not None:
                return found
            if default is not None:
                return default
            _fail(field or "<plan>", f"environment variable {name} is not set")

        return _VARIABLE.sub(lookup, value)
    if isinstance(value, Mapping):
        return {
            k: expand_variables(v, f"{field}.{k}" if field else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [expand_variables(v, f"{field}[{i}]") for i, v in enumerate(value)]
    return value


_SESSION_MODULE_KEYS = (
    "orchestrator",
    "orchestrator_source",
    "context",
    "context_source",
    "executor",
)


_MAX_VALUES = 100_000
"""More values than this, counted with every alias expanded, is not a plan but a bomb."""

_MAX_DETAIL = 300  # characters of a parser's message kept in the one-line error


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text.replace('in "<unicode string>", ', "at ")  # PyYAML's name for the text
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"


def _expansion_problem(data: Any) -> str | None:
    """Why ``data`` cannot be used as it is: a cycle, or too many values once expanded.

    YAML aliases share one object between places, so a few lines can stand for billions
    of values (or for a value inside itself) that any later walk over the plan — a
    comparison, a copy, a JSON dump — would expand. Counted here without recursion.
    """
    count = 0
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            on_path.discard(id(node))
            continue
        count += 1
        if count > _MAX_VALUES:
            return f"too large: more than {_MAX_VALUES:,} values once its aliases are expanded"
        if isinstance(node, Mapping):
            children: list[Any] = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        if id(node) in on_path:
            return "refers to itself (an alias inside its own anchor)"
        on_path.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in children)
    return None


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
    specs = tuple(
        _spec(entry, f"{section}[{i}]", executor=section == "tools")
        for i, entry in enumerate(value)
    )
    if section == "providers":
        _check_instances(section, specs)
    return specs


def _executor(value: Any, field: str) -> ModuleSpec | None:
    """An ``executor`` entry: a module id, or a ``{module, config}`` table."""
    if value is None:
        return None
    return _spec(value, field)


def _cassette(value: Any) -> CassetteSpec | None:
    return None if value is None else CassetteSpec.from_value(value)


def _durable(value: Any) -> DurableSpec | None:
    return None if value is None else DurableSpec.from_value(value)


def _policy(value: Any) -> ProvidersPolicy | None:
    return None if value is None else ProvidersPolicy.from_value(value)


def _raw(expanded: dict[str, Any], agents: Any) -> dict[str, Any]:
    """The plan as a dict: values expanded (an entry that cannot be, as written)."""
    raw = dict(expanded)
    for section in _SECTIONS:
        if isinstance(raw.get(section), list):
            raw[section] = [_expanded_or_as_is(e) for e in raw[section]]
    if agents is not None:
        raw["agents"] = agents
    return raw


def _expanded_or_as_is(entry: Any) -> Any:
    try:
        return expand_variables(entry)
    except ConfigError:
        return entry


def _spec(
    entry: Any, field: str, *, id_field: str | None = None, executor: bool = False
) -> ModuleSpec:
    if isinstance(entry, str):
        entry = {"module": entry}
    if not isinstance(entry, Mapping):
        _fail(field, f"expected a table, got {_kind(entry)}")
    problem = None
    try:
        entry = expand_variables(entry, field)
    except ConfigError as exc:
        if entry.get("optional") is not True:
            raise
        problem = str(exc)  # the optional entry fails to load, with this reason
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
    optional = entry.get("optional", False)
    if not isinstance(optional, bool):
        _fail(f"{field}.optional", f"expected true or false, got {_kind(optional)}")
    return ModuleSpec(
        module=module,
        source=source,
        config=dict(config),
        instance_id=instance_id,
        optional=optional,
        executor=_executor(entry.get("executor"), f"{field}.executor") if executor else None,
        problem=problem,
    )


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
