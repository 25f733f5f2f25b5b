"""Sub-agents (DESIGN §14): the plan's ``agents`` section and the child sessions it spawns.

```yaml
agents:
  researcher:
    description: Finds facts.                 # shown to the model by tool-task
    instruction: You research; answer briefly. # the child's system prompt
    tools: [{module: tool-filesystem}]         # plan sections: an overlay on the parent's
```

A child's plan is the parent's plan with the agent's sections laid over it, by the one
plan merge bundles use too (`kernel._overlay`, as a profile's ``extends`` merges):
``providers`` / ``tools`` / ``hooks`` entries with the same ``instance_id`` / ``id`` /
``module`` are merged (their ``config`` tables deep-merged, the agent's values winning),
other entries are appended; tables are merged key by key; any other value, a list too, is
replaced. An agent's ``agents`` is a filter on the parent's (``all``, ``none`` or a list of
names).

A session whose plan has agents registers upstream's capabilities: ``agents.list``,
``agents.get``, ``session.spawn`` and ``session.resume`` (keyword signatures as upstream's
app layer), so tool-task — ours or upstream's — can delegate. A child runs **inside the
task that spawned it**, under the spawning turn's [`TurnHandle`][amplifier_anyio.TurnHandle]
(`current_turn`): every cancel of the parent reaches it at once, its deadline is at most
the parent's, its budget is charged up the tree (`_budget`), and when the spawning tool call
returns the child session is closed. Its id is ``{parent}-{span}_{agent}`` (upstream's
format), its ``parent_id`` the parent's id, its ``lane`` its own (`Delegation.lane_for`:
``{parent lane}/{agent}@{call id}``, else ``…#{n}``; the root session's lane is ``root``) and
its ``depth`` one more than the parent's; spawning deeper
than ``session.max_agent_depth`` (default 3) raises
[`DelegationError`][amplifier_anyio.errors.DelegationError].

With context-persistent, a child's transcript lives next to its parent's (a sibling
session directory, or a sibling file when the parent's file has its own name) with a
``metadata.json`` naming the parent and the agent; ``session.resume`` continues a child
from its transcript, in this process or a later one. With another context a child is
resumed from the history kept in memory when it ended.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ..errors import ConfigError, DelegationError
from ..events import SESSION_FORK
from ..kernel._budget import Budget
from ..kernel._handle import current_turn
from ..kernel._ids import agent_of_child_id, parent_of_child_id
from ..kernel._mount_plan import MountPlan
from ..kernel._overlay import merge_plan
from ..kernel._tracing import current_tool_call
from ..kernel._turns import TurnStatus
from ..models import unstructure

if TYPE_CHECKING:
    from ..kernel._handle import TurnHandle
    from ..kernel._turns import TurnResult

__all__ = (
    "SessionLimits",
    "Delegation",
    "ChildSetup",
    "agents_of",
    "agent_instruction",
    "merge_overlay",
    "agent_problems",
    "child_transcript_path",
    "read_metadata",
    "ROOT_LANE",
    "DEFAULT_MAX_AGENT_DEPTH",
    "METADATA_FILENAME",
)

logger = logging.getLogger(__name__)

ROOT_LANE = "root"
"""The ``lane`` of a top-level session; a child's is ``{parent lane}/{agent}@{call id}``
(or ``…#{n}``: `Delegation.lane_for`)."""

DEFAULT_MAX_AGENT_DEPTH = 3
"""``session.max_agent_depth`` when the plan does not set it."""

METADATA_FILENAME = "metadata.json"
"""Beside a persisted child's transcript: its id, parent, agent, lane and depth."""

_ANSWERED = (TurnStatus.SUCCESS, TurnStatus.INCOMPLETE)  # a turn that ended with an answer
_SELF = "self"  # upstream's name for "a child with the parent's own plan"
_OWN_KEYS = frozenset(
    {
        "description",
        "instruction",
        "name",
        "meta",
        "system",
        "provider_preferences",
        "model_role",
    }
)
"""An agent's own keys (upstream's agent files add ``name``, ``meta``, ``system``,
``provider_preferences`` and ``model_role``, which are not read here)."""
_SECTIONS = frozenset(
    {"session", "orchestrator", "context", "providers", "tools", "hooks", "agents", "includes"}
)
_OWN_TABLES = ("session", "orchestrator", "context")  # a child's copies (small, changed)
_PERSISTENT = "context-persistent"
_MESSAGES_FILE = "context-messages.jsonl"  # context-persistent's name inside a session dir
_KEEP_TIMEOUT = 5.0  # seconds a cut child's record may take to keep (shielded)
ChildSetup = Callable[[Any], Awaitable[None] | None]
"""A host's callback for each child session, once it is opened and before its turn
(``session.child_setup``): mount in-process modules, register hooks on its events."""


# -- the plan section ----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SessionLimits:
    """The ``session`` settings of §14: the per-turn ``budget`` and ``max_agent_depth``."""

    budget: Budget = attrs.field(factory=Budget)
    max_agent_depth: int = DEFAULT_MAX_AGENT_DEPTH

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], field: str = "session") -> SessionLimits:
        """Read them from a plan's ``session`` table; a bad value is a ConfigError naming
        the key."""
        budget = Budget.from_config(settings.get("budget"), f"{field}.budget")
        depth = settings.get("max_agent_depth", DEFAULT_MAX_AGENT_DEPTH)
        if depth is None:
            depth = DEFAULT_MAX_AGENT_DEPTH
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            msg = f"{field}.max_agent_depth: expected an integer >= 0, got {depth!r}"
            raise ConfigError(msg)
        return cls(budget=budget, max_agent_depth=depth)


def agents_of(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A plan dict's agents, NAME → table (``all``, a list or nothing: none here)."""
    agents = config.get("agents")
    if not isinstance(agents, Mapping):
        return {}
    return {str(name): dict(value) for name, value in agents.items() if isinstance(value, Mapping)}


def agent_instruction(agent: Mapping[str, Any]) -> str | None:
    """An agent's system prompt: ``instruction``, else upstream's ``system.instruction``."""
    instruction = agent.get("instruction")
    if instruction is None and isinstance(agent.get("system"), Mapping):
        instruction = agent["system"].get("instruction")
    return instruction if isinstance(instruction, str) and instruction.strip() else None


def _copy_tree(value: Any) -> Any:
    """``value`` with its tables and lists copied, its other values shared: a plan may hold
    live objects a host put there (a tracer provider), which a child must share, not copy."""
    if isinstance(value, Mapping):
        return {key: _copy_tree(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_tree(item) for item in value]
    return value


def _entry(item: Any) -> dict[str, Any] | None:
    if isinstance(item, str):
        return {"module": item}
    return dict(item) if isinstance(item, Mapping) else None


def merge_overlay(parent: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """The child plan: ``parent`` with the agent's plan sections laid over it by the plan
    merge bundles use too (`kernel._overlay`, lists replaced: a profile's ``extends``); the
    agent's ``agents`` filters the parent's. Neither input is changed."""
    sections = {k: v for k, v in overlay.items() if k not in _OWN_KEYS}
    agent_filter = sections.pop("agents", None)
    # Tables the spawner may change are copied; the rest is shared with the parent (as
    # upstream's shallow merge does): a big provider script is not copied per child.
    base: dict[str, Any] = dict(parent)
    if agent_instruction(overlay) is not None:
        base.pop("instruction", None)  # the agent's system prompt, not the root's
    for key in _OWN_TABLES:
        if isinstance(base.get(key), Mapping):
            base[key] = _copy_tree(base[key])
    merged = merge_plan(base, _copy_tree(sections), lists="replace")
    if agent_filter == "none":
        merged["agents"] = {}
    elif isinstance(agent_filter, list):
        parent_agents = merged.get("agents")
        if isinstance(parent_agents, Mapping):
            merged["agents"] = {k: v for k, v in parent_agents.items() if k in agent_filter}
    return merged


def _kind(value: Any) -> str:
    names: dict[type, str] = {dict: "a table", list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


def agent_problems(plan: MountPlan, *, strict: bool = False) -> tuple[list[str], list[str]]:
    """``(errors, warnings)`` of a plan's agents section, each line naming the agent
    (``agents.coder.description: expected a string, got a list``).

    An agent must be a table; ``description`` and ``instruction`` strings; its ``agents``
    ``all``, ``none`` or a list of names; and the child plan it makes (the overlay merged
    into the parent's) must be a valid plan with valid §14 limits. Unknown keys are
    warnings (errors when ``strict``). ``agents: all`` or a list (upstream's agent files)
    is a warning: no agent files are read.
    """
    errors: list[str] = []
    warnings: list[str] = []
    agents = plan.raw.get("agents")
    if agents is None or agents == {}:
        return errors, warnings
    if not isinstance(agents, Mapping):
        line = f"agents: {agents!r} names agent files, which are not supported; no agents"
        (errors if strict else warnings).append(line)
        return errors, warnings
    for name, agent in agents.items():
        where = f"agents.{name}"
        if not isinstance(agent, Mapping):
            errors.append(f"{where}: expected a table, got {_kind(agent)}")
            continue
        for key in ("description", "instruction"):
            value = agent.get(key)
            if value is not None and not isinstance(value, str):
                errors.append(f"{where}.{key}: expected a string, got {_kind(value)}")
        agent_filter = agent.get("agents")
        ok_filter = agent_filter in (None, "all", "none") or (
            isinstance(agent_filter, list) and all(isinstance(n, str) for n in agent_filter)
        )
        if not ok_filter:
            errors.append(f"{where}.agents: expected all, none or a list of agent names")
        unknown = [k for k in agent if k not in _OWN_KEYS and k not in _SECTIONS]
        (errors if strict else warnings).extend(f"{where}: unknown key {k!r}" for k in unknown)
        try:
            child = MountPlan.from_dict(merge_overlay(plan.raw, agent))
            SessionLimits.from_settings(child.session_settings)
        except ConfigError as exc:
            errors.append(f"{where}: {exc}")
    return errors, warnings


# -- where a child's transcript lives ------------------------------------------------------


def _context_config(config: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The context module id and its (mutable) config table of a plan dict."""
    session = config.get("session")
    if not isinstance(session, dict):
        return None, None
    context = session.get("context")
    if isinstance(context, str):
        table = config.setdefault("context", {})
        if not isinstance(table, dict):
            return context, None
        return context, table.setdefault("config", {})
    if isinstance(context, dict):
        module = context.get("module")
        conf = context.setdefault("config", {})
        return (module if isinstance(module, str) else None), conf if isinstance(
            conf, dict
        ) else None
    return None, None


def _sibling(parent: Path, child_id: str) -> Path:
    """A child's transcript next to its parent's: a sibling session directory, or a
    sibling file when the parent's file has its own name."""
    if parent.name == _MESSAGES_FILE:
        return parent.parent.parent / child_id / _MESSAGES_FILE
    return parent.with_name(f"{child_id}{parent.suffix or '.jsonl'}")


def child_transcript_path(config: dict[str, Any], child_id: str) -> Path | None:
    """Give a child plan (``config``, changed in place) a transcript of its own next to
    the parent's when its context is context-persistent; the child's transcript path
    (None: another context, nothing persisted)."""
    module, conf = _context_config(config)
    if module != _PERSISTENT or conf is None:
        return None
    key = "path" if "path" in conf else "transcript_path" if "transcript_path" in conf else None
    parent_path = conf.get(key) if key is not None else None
    if parent_path:
        child = _sibling(Path(str(parent_path)).expanduser(), child_id)
        assert key is not None
        conf[key] = str(child)
        return child
    from ..contexts.persistent import default_path  # noqa: PLC0415 - kernel below contexts

    return default_path(child_id)


def metadata_path(transcript: Path) -> Path:
    """Where a persisted session's ``metadata.json`` is (beside its transcript)."""
    if transcript.name == _MESSAGES_FILE:
        return transcript.with_name(METADATA_FILENAME)
    return transcript.with_name(f"{transcript.stem}.{METADATA_FILENAME}")


def read_metadata(transcript: Path) -> dict[str, Any] | None:
    """The metadata of a persisted session (blocking; read-only), or None."""
    try:
        data = json.loads(metadata_path(transcript).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_metadata(transcript: Path, metadata: dict[str, Any]) -> None:
    path = metadata_path(transcript)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(metadata, indent=2, ensure_ascii=False), encoding="utf-8")
    temp.replace(path)


# -- inheritance filters (upstream's tool-task config) ---------------------------------------


def _filtered(config: dict[str, Any], section: str, policy: Any, own: set[str]) -> None:
    if not isinstance(policy, Mapping) or not isinstance(config.get(section), list):
        return
    exclude = policy.get(f"exclude_{section}")
    keep = policy.get(f"inherit_{section}")

    def kept(entry: Any) -> bool:
        module = entry.get("module") if isinstance(entry, Mapping) else entry
        if module in own:
            return True  # the agent asked for it itself
        if isinstance(exclude, list):
            return module not in exclude
        if isinstance(keep, list):
            return module in keep
        return True

    config[section] = [entry for entry in config[section] if kept(entry)]


def _modules_of(agent: Mapping[str, Any], section: str) -> set[str]:
    found = set()
    for item in agent.get(section) or ():
        entry = _entry(item)
        if entry is not None and isinstance(entry.get("module"), str):
            found.add(entry["module"])
    return found


def _sanitized(messages: Any) -> list[dict[str, Any]]:
    """User and assistant text only: a child has none of the parent's tool calls."""
    found: list[dict[str, Any]] = []
    for message in messages or ():
        if not isinstance(message, Mapping) or message.get("role") not in ("user", "assistant"):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(
                str(block.get("text", ""))
                for block in content
                if isinstance(block, Mapping) and block.get("type") == "text"
            )
        if isinstance(content, str) and content.strip():
            found.append({"role": message["role"], "content": content})
    return found


# -- spawning ------------------------------------------------------------------------------


@attrs.define(eq=False)
class _Child:
    agent: str
    transcript: Path | None
    messages: list[dict[str, Any]] | None = None  # kept when nothing persists them


class Delegation:
    """The spawner of one session: its agents, its children, and the capabilities
    ``agents.list``, ``agents.get``, ``session.spawn``, ``session.resume``."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._children: dict[str, _Child] = {}
        self._named: set[str] = set()  # ids new_child_id handed out
        self._lanes: dict[str, int] = {}  # lanes handed out, by their stem: how many
        self._answers: dict[str, dict[str, Any]] = {}  # each child's last answer

    def register(self) -> None:
        """Offer the four capabilities on the session's coordinator."""
        coordinator = self.session.coordinator
        coordinator.register_capability("agents.list", self.list_agents)
        coordinator.register_capability("agents.get", self.get_agent)
        coordinator.register_capability("session.spawn", self.spawn)
        coordinator.register_capability("session.resume", self.resume)
        coordinator.register_capability("session.new_child_id", self.new_child_id)
        coordinator.register_capability("session.child_answer", self.child_answer)

    @property
    def agents(self) -> dict[str, dict[str, Any]]:
        """The session's agents, NAME → table (``coordinator.config["agents"]``)."""
        return agents_of(self.session.config)

    def list_agents(self) -> list[dict[str, Any]]:
        """``[{name, description}]``, sorted by name (capability ``agents.list``)."""
        return [
            {"name": name, "description": str(agent.get("description") or "No description")}
            for name, agent in sorted(self.agents.items())
        ]

    def get_agent(self, name: str) -> dict[str, Any] | None:
        """A copy of one agent's table, or None (capability ``agents.get``)."""
        agent = self.agents.get(name)
        return _copy_tree(agent) if agent is not None else None

    async def spawn(
        self,
        *,
        agent_name: str,
        instruction: str,
        parent_session: Any = None,
        agent_configs: Mapping[str, Any] | None = None,
        sub_session_id: str | None = None,
        tool_inheritance: Mapping[str, Any] | None = None,
        hook_inheritance: Mapping[str, Any] | None = None,
        orchestrator_config: Mapping[str, Any] | None = None,
        parent_messages: list[dict[str, Any]] | None = None,
        provider_preferences: Any = None,
        self_delegation_depth: int = 0,
        session_metadata: Mapping[str, Any] | None = None,
        use_subprocess: bool = False,
    ) -> dict[str, Any]:
        """Run ``instruction`` in a new child session of agent ``agent_name`` (capability
        ``session.spawn``); returns ``{output, session_id, status, turn_count, usage,
        cost_usd, finish_reason}`` (``cost_usd``: the child's dollars, its own sub-agents
        included, from the providers' ``pricing``).

        The child runs in the caller's task under the caller's turn. A child turn that
        failed raises its error (upstream's ``execute``); a cancelled one returns status
        ``cancelled``; the host's own cancellation propagates. ``provider_preferences``
        and ``self_delegation_depth`` are accepted and ignored (the depth is structural
        here); ``use_subprocess`` is not supported (the child runs in this process).
        """
        parent = parent_session if parent_session is not None else self.session
        configs = agent_configs if agent_configs is not None else agent_configs_of(parent)
        agent = _agent_named(configs, agent_name)
        self._check_depth(parent, agent_name)
        if use_subprocess:
            logger.warning(
                "agent %r: use_subprocess is not supported; it runs in-process", agent_name
            )
        del provider_preferences, self_delegation_depth  # see the docstring
        config = _child_config(parent, agent)
        _filtered(config, "tools", tool_inheritance, _modules_of(agent, "tools"))
        _filtered(config, "hooks", hook_inheritance, _modules_of(agent, "hooks"))
        _with_session_settings(config, orchestrator_config, session_metadata)
        child_id = sub_session_id or f"{parent.session_id}-{uuid.uuid4().hex[:16]}_{agent_name}"
        transcript = child_transcript_path(config, child_id)
        record = _Child(agent=agent_name, transcript=transcript)
        lane = self.lane_for(parent, agent_name)
        child = self._child(parent, config, child_id, agent_name, lane=lane, resumed=False)
        await self._run_child(
            parent,
            child,
            instruction,
            record,
            system=agent_instruction(agent),
            inherited=_sanitized(parent_messages),
        )
        return dict(self._answers[child_id])  # _run_child stored it

    async def resume(self, *, sub_session_id: str, instruction: str) -> dict[str, Any]:
        """Continue child ``sub_session_id`` with ``instruction`` (capability
        ``session.resume``): its history comes from its transcript (context-persistent,
        in this process or a later one) or from memory. Same result and rules as
        `spawn`; an id that names no child of this session raises
        [`DelegationError`][amplifier_anyio.errors.DelegationError]."""
        parent = self.session
        record = self._children.get(sub_session_id)
        agent_name = record.agent if record is not None else self._agent_of(sub_session_id)
        configs = agent_configs_of(parent)
        agent: Mapping[str, Any] = {} if agent_name == _SELF else configs.get(agent_name, {})
        if agent_name != _SELF and agent_name not in configs:
            raise DelegationError(f"sub-session {sub_session_id!r}: agent {agent_name!r} is gone")
        self._check_depth(parent, agent_name)
        config = _child_config(parent, agent)
        transcript = child_transcript_path(config, sub_session_id)
        lane = self.lane_for(parent, agent_name)  # before any wait: in the order of calls
        if record is None:
            found = transcript is not None and await anyio.Path(transcript).is_file()
            if not found:
                raise DelegationError(f"no sub-session {sub_session_id!r} of {parent.session_id!r}")
            record = _Child(agent=agent_name, transcript=transcript)
        child = self._child(parent, config, sub_session_id, agent_name, lane=lane, resumed=True)
        await self._run_child(parent, child, instruction, record, system=None, inherited=[])
        return dict(self._answers[sub_session_id])  # _run_child stored it

    async def new_child_id(self, *, agent_name: str) -> str:
        """An id for a new child, ``{parent}-{span}_{agent}`` (capability
        ``session.new_child_id``; ours, tool-task asks it).

        Inside a tool call the span is derived from the call (its lane, id and agent), so
        a recorded reply gives the same ids on replay (a cassette masks the parent's
        UUID); it is never one this session used, nor one whose transcript exists (a
        model that reuses call ids, a later process). Outside a tool call it is random.
        """
        parent = self.session.session_id
        call = current_tool_call()
        if call is None:
            await anyio.lowlevel.checkpoint()
            return f"{parent}-{uuid.uuid4().hex[:16]}_{agent_name}"
        agent = self.agents.get(agent_name, {})
        lane = getattr(self.session, "lane", ROOT_LANE)
        for attempt in range(1_000):
            seed = f"{lane}\0{call.tool_call_id}\0{agent_name}\0{attempt}".encode()
            child_id = f"{parent}-{hashlib.blake2b(seed, digest_size=8).hexdigest()}_{agent_name}"
            if child_id in self._named or child_id in self._children:
                continue
            transcript = child_transcript_path(merge_overlay(self.session.config, agent), child_id)
            if transcript is not None and await anyio.Path(transcript).exists():
                continue
            self._named.add(child_id)
            return child_id
        return f"{parent}-{uuid.uuid4().hex[:16]}_{agent_name}"  # pragma: no cover

    # -- the parts -----------------------------------------------------------------------

    def lane_for(self, parent: Any, agent_name: str) -> str:
        """A new child's cassette lane, its own for every spawn (or resume), so concurrent
        children replay the same whatever the scheduling (DESIGN §16).

        Inside a tool call: ``{parent lane}/{agent}@{call id}`` (the id is in the model's
        recorded reply, so it is the same on replay); a second child of that agent from the
        same call id adds ``#2``, ``#3``… Outside a tool call: ``{parent lane}/{agent}#{n}``,
        ``n`` counting that agent's spawns in this parent from 1. Taken when the spawn is
        called, before it waits on anything: numbered children are numbered in the order
        ``spawn`` was called.
        """
        stem = f"{getattr(parent, 'lane', ROOT_LANE)}/{agent_name}"
        call = current_tool_call()
        if call is not None:
            stem = f"{stem}@{call.tool_call_id}"
        count = self._lanes.get(stem, 0) + 1
        self._lanes[stem] = count
        return stem if call is not None and count == 1 else f"{stem}#{count}"

    def _check_depth(self, parent: Any, agent_name: str) -> None:
        limit = _depth_limit(parent)
        depth = int(getattr(parent, "depth", 0)) + 1
        if depth > limit:
            msg = (
                f"agent {agent_name!r}: delegation depth limit reached "
                f"(session.max_agent_depth = {limit}; this would be depth {depth})"
            )
            raise DelegationError(msg)

    def _agent_of(self, sub_session_id: str) -> str:
        """The agent named in a child id ``{parent}-{span}_{agent}`` of this session."""
        agent = agent_of_child_id(sub_session_id)
        if agent is None or parent_of_child_id(sub_session_id) != self.session.session_id:
            raise DelegationError(
                f"no sub-session {sub_session_id!r} of {self.session.session_id!r}"
            )
        return agent

    def _child(
        self,
        parent: Any,
        config: dict[str, Any],
        child_id: str,
        agent_name: str,
        *,
        lane: str,
        resumed: bool,
    ) -> Any:
        coordinator = parent.coordinator
        child = type(parent)(
            MountPlan.from_dict(config),
            session_id=child_id,
            parent_id=parent.session_id,
            approval_system=coordinator.approval_system,
            display_system=coordinator.display_system,
            is_resumed=resumed,
            strict=getattr(parent, "strict", False),
        )
        child.lane = lane
        child.depth = int(getattr(parent, "depth", 0)) + 1
        child.agent_name = agent_name
        child.child_setup = getattr(parent, "child_setup", [])  # shared: grandchildren too
        loader = getattr(parent, "loader", None)
        if loader is not None:
            child.loader.share_found(loader)
        child._parent_turn = _parent_turn(parent)
        return child

    async def _run_child(
        self,
        parent: Any,
        child: Any,
        instruction: str,
        record: _Child,
        *,
        system: str | None,
        inherited: list[dict[str, Any]],
    ) -> tuple[TurnResult, float]:
        await parent.coordinator.hooks.emit(
            SESSION_FORK,
            {
                "parent_session_id": parent.session_id,
                "child_session_id": child.session_id,
                "agent_name": child.agent_name,
                "lane": child.lane,
                "resumed": child.is_resumed,
            },
        )
        async with child:
            for setup in tuple(child.child_setup):
                done = setup(child)
                if inspect.isawaitable(done):
                    await done
            context = child.coordinator.get("context")
            if record.messages is not None and child.is_resumed:
                await context.set_messages(copy.deepcopy(record.messages))
            elif not child.is_resumed:
                if system is not None:
                    await context.add_message({"role": "system", "content": system})
                for message in inherited:
                    await context.add_message(message)
            if record.transcript is not None and not child.is_resumed:
                await anyio.to_thread.run_sync(
                    _write_metadata, record.transcript, _metadata(parent, child)
                )
            self._answers.pop(child.session_id, None)
            try:
                result, cost_usd = await self._turns(child, context, instruction)
            except anyio.get_cancelled_exc_class():
                # cut by the host or an immediate cancel: what a resume needs is kept (the
                # history, with a context that does not persist it) and what it spent
                with anyio.CancelScope(shield=True), anyio.move_on_after(_KEEP_TIMEOUT):
                    await self._keep(child, record, context)
                raise
            if record.transcript is None:  # nothing persists it: keep it for a resume
                record.messages = copy.deepcopy(await context.get_messages())
        self._children[child.session_id] = record
        self._answers[child.session_id] = self._answer(child.session_id, result, cost_usd)
        if result.error is not None:
            raise result.error
        return result, cost_usd

    @staticmethod
    async def _turns(child: Any, context: Any, instruction: str) -> tuple[TurnResult, float]:
        """Run ``instruction`` in the child; the result and what it cost (dollars).

        A resumed child whose last turn ended on held calls (a deferred approval, since
        decided or not; an idempotent call a crash interrupted) continues that turn
        first (``session.resume()``, the decisions recorded in its transcript applied):
        a new turn would leave the held calls behind, never run. When that turn still
        waits, or did not end with an answer, it is the result; else ``instruction``
        runs as the next turn, and the result counts both.
        """
        work_of = getattr(context, "resume_work", None) if child.is_resumed else None
        work = await work_of() if work_of is not None else None
        if work is None or not (work.run or work.denied or work.waiting):
            result: TurnResult = await child.run(instruction)
            return result, child.coordinator.turn.budget.cost_usd
        held: TurnResult = await child.resume()
        held_cost: float = child.coordinator.turn.budget.cost_usd
        if held.status not in _ANSWERED:
            return held, held_cost
        result = await child.run(instruction)
        both = attrs.evolve(
            result,
            turn_count=held.turn_count + result.turn_count,
            usage=held.usage + result.usage,
        )
        return both, held_cost + child.coordinator.turn.budget.cost_usd

    async def _keep(self, child: Any, record: _Child, context: Any) -> None:
        """A cut child's record (its history, when nothing persists it) and its answer as
        it stood (`child_answer`)."""
        self._children[child.session_id] = record
        handle = child.coordinator.turn
        partial = handle.partial
        if partial is not None:
            self._answers[child.session_id] = self._answer(
                child.session_id, partial(), handle.budget.cost_usd
            )
        if record.transcript is None:
            record.messages = copy.deepcopy(await context.get_messages())

    def child_answer(self, sub_session_id: str) -> dict[str, Any] | None:
        """The answer of a child's last turn as it stood when it ended — a turn a cancel
        cut short too (status ``cancelled``, with what it spent and its ``turn_count``) —
        or None (capability ``session.child_answer``; ours, tool-task reads it)."""
        answer = self._answers.get(sub_session_id)
        return dict(answer) if answer is not None else None

    @staticmethod
    def _answer(child_id: str, result: TurnResult, cost_usd: float) -> dict[str, Any]:
        return {
            "output": result.text,
            "session_id": child_id,
            "status": str(result.status),
            "turn_count": result.turn_count,
            "usage": unstructure(result.usage),
            "cost_usd": cost_usd,
            "finish_reason": result.finish_reason,
        }


def _child_config(parent: Any, agent: Mapping[str, Any]) -> dict[str, Any]:
    """The child's plan: the parent's with the agent's overlay merged in, its
    ``max_agent_depth`` never above the parent's (an overlay may lower the limit for its
    subtree, never raise the root's)."""
    config = merge_overlay(parent.config, agent)
    limit = _depth_limit(parent)
    session = config.setdefault("session", {})
    own = session.get("max_agent_depth", limit)
    if isinstance(own, int) and not isinstance(own, bool) and own > limit:
        session["max_agent_depth"] = limit
    return config


def _agent_named(configs: Mapping[str, Any], agent_name: str) -> Mapping[str, Any]:
    """The overlay of agent ``agent_name`` (``self``: none); a `DelegationError` when the
    plan has no such agent."""
    if agent_name == _SELF:
        return {}
    if agent_name not in configs:
        raise DelegationError(f"Agent '{agent_name}' not found")
    agent: Mapping[str, Any] = configs[agent_name]
    return agent


def _with_session_settings(
    config: dict[str, Any],
    orchestrator_config: Mapping[str, Any] | None,
    metadata: Mapping[str, Any] | None,
) -> None:
    """The caller's orchestrator config merged over the child plan's, and its session
    metadata, in place (upstream's ``orchestrator_config`` / ``session_metadata``)."""
    session_table = config.setdefault("session", {})
    if orchestrator_config:
        orchestrator = session_table.get("orchestrator")
        if isinstance(orchestrator, str):
            table = config.setdefault("orchestrator", {})
            table["config"] = {**(table.get("config") or {}), **orchestrator_config}
        elif isinstance(orchestrator, dict):
            orchestrator["config"] = {**(orchestrator.get("config") or {}), **orchestrator_config}
    if metadata:
        session_table["metadata"] = dict(metadata)


def _depth_limit(parent: Any) -> int:
    """The parent's ``session.max_agent_depth``."""
    limit: int = getattr(
        getattr(parent, "limits", None), "max_agent_depth", DEFAULT_MAX_AGENT_DEPTH
    )
    return limit


def agent_configs_of(session: Any) -> dict[str, dict[str, Any]]:
    """The agents of a session's plan (``coordinator.config["agents"]``)."""
    return agents_of(getattr(session, "config", {}) or {})


def _parent_turn(parent: Any) -> TurnHandle | None:
    """The turn a child runs under: the caller's (its task is inside it), when it is one
    of the parent session's turns; else the parent's current turn while it runs."""
    hooks = parent.coordinator.hooks
    handle = current_turn()
    if handle is not None and handle.hooks is hooks and not handle.done:
        return handle
    turn: TurnHandle = parent.coordinator.turn
    return None if turn.done else turn


def _metadata(parent: Any, child: Any) -> dict[str, Any]:
    return {
        "session_id": child.session_id,
        "parent_id": parent.session_id,
        "agent_name": child.agent_name,
        "lane": child.lane,
        "depth": child.depth,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
