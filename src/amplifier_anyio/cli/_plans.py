"""The plan a command runs: a plan file, or one built from ``--provider`` and friends.

``run`` and ``chat`` share the options here. A plan file wins over ``--provider``,
``--model`` and ``--base-url`` (they are then ignored, with a warning);
``--max-iterations``, ``--tools``, ``--record`` and ``--replay`` apply to either. Every
bad value is one line and exit 2.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

import attrs

from ..errors import ConfigError
from ..kernel._mount_plan import MountPlan
from ..session._agents import agent_instruction, agents_of, merge_overlay
from ._common import fail, load_plan_file, warn

DEFAULT_PLAN: dict[str, Any] = {
    "session": {"orchestrator": "loop-basic", "context": "context-simple"},
    "orchestrator": {"config": {"max_iterations": 8}},
    "providers": [{"module": "provider-scripted", "config": {"demo": True}}],
    "tools": [{"module": "tool-demo"}],
}
"""The embedded offline plan: a scripted model that calls two demo tools in parallel."""

PROVIDERS = ("openai", "anthropic", "scripted")
TOOLS = ("filesystem", "bash")
NETWORK_MAX_ITERATIONS = 25
"""``max_iterations`` of a plan built for a real model (the demo plan's is 8)."""

APPROVAL_TOOLS = ("bash", "write_file", "edit_file")
"""What ``--tools`` asks the person at the terminal about (reads run without asking)."""

_KEYLESS_HINT = {
    "openai": "set OPENAI_API_KEY, or --base-url for a server that needs no key",
    "anthropic": "set ANTHROPIC_API_KEY",
}
_DEFAULT_BASE_URL = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


@attrs.frozen(kw_only=True)
class PlanOptions:
    """The plan-shaping options of ``run`` and ``chat``, as given on the command line."""

    plan: Path | None = None
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    max_iterations: str | None = None
    tools: str | None = None
    record: Path | None = None
    """``--record FILE``: the plan's ``session.cassette`` records to FILE."""
    replay: Path | None = None
    """``--replay FILE``: the plan's ``session.cassette`` replays FILE."""
    strict: bool = False
    """``--strict``: a bundle reference that cannot be resolved is an error."""


def build_plan(options: PlanOptions, *, streaming: bool = False) -> MountPlan:
    """The plan to run, or one line and exit 2.

    ``streaming``: a plan built here uses loop-streaming (tokens as they arrive) rather
    than loop-basic; a plan file keeps its orchestrator.
    """
    tools = parse_tools(options.tools)
    max_iterations = _positive_int("--max-iterations", options.max_iterations)
    if options.plan is not None:
        ignored = [
            flag
            for flag, value in (
                ("--provider", options.provider),
                ("--model", options.model),
                ("--base-url", options.base_url),
            )
            if value is not None
        ]
        if ignored:
            warn(f"{', '.join(ignored)} ignored: the plan file {options.plan} names the providers")
        data = load_plan_file(options.plan, strict=options.strict).to_dict()
    else:
        data = _built(options, streaming=streaming)
    if max_iterations is not None:
        orchestrator = data["session"]["orchestrator"]
        config = {**orchestrator.get("config", {}), "max_iterations": max_iterations}
        orchestrator["config"] = config
    _add_tools(data, tools)
    _add_cassette(data, options)
    try:
        return MountPlan.from_dict(data)
    except ConfigError as exc:  # pragma: no cover - the pieces above are valid
        raise fail(str(exc)) from None


RESUMABLE = ("context-simple", "context-persistent")


def persistent_plan(base: MountPlan, path: Path) -> MountPlan:
    """``base`` with its context kept in ``path``: context-simple becomes
    context-persistent (same settings); another context module is kept as it is (the
    conversation then cannot be resumed)."""
    data = base.to_dict()
    context = data["session"]["context"]
    if context["module"] not in RESUMABLE:
        return base
    config = {
        key: value
        for key, value in context.get("config", {}).items()
        if key not in ("path", "transcript_path")
    }
    context.update(module="context-persistent", config={**config, "path": str(path)})
    return MountPlan.from_dict(data)


def agent_plan(plan: MountPlan, name: str) -> tuple[MountPlan, str | None]:
    """``run --agent NAME``: the plan's agent NAME as the root session (its overlay merged
    into the plan, as a sub-agent's would be) and its instruction; else one line, exit 2."""
    agents = agents_of(plan.raw)
    if name not in agents:
        known = ", ".join(sorted(agents)) or "none"
        raise fail(f"--agent {name}: the plan has no such agent (its agents: {known})")
    agent = agents[name]
    try:
        merged = MountPlan.from_dict(merge_overlay(plan.raw, agent))
    except ConfigError as exc:
        raise fail(f"--agent {name}: {exc}") from None
    return merged, agent_instruction(agent)


def _positive_int(flag: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value.strip())
    except ValueError:
        number = 0
    if number < 1:
        raise fail(f"{flag}: expected a whole number of at least 1, not {value!r}")
    return number


def parse_tools(value: str | None) -> tuple[str, ...]:
    """``--tools filesystem,bash`` as a tuple of known names, or one line and exit 2."""
    if value is None:
        return ()
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in TOOLS]
    if unknown or not names:
        shown = ", ".join(repr(name) for name in unknown) or "nothing"
        raise fail(f"--tools: expected a comma-separated list of {', '.join(TOOLS)}; got {shown}")
    return tuple(dict.fromkeys(names))


def _built(options: PlanOptions, *, streaming: bool) -> dict[str, Any]:
    provider = options.provider or "scripted"
    if provider not in PROVIDERS:
        raise fail(f"--provider: must be one of {', '.join(PROVIDERS)}, not {provider!r}")
    if provider == "scripted":
        for flag, value in (("--model", options.model), ("--base-url", options.base_url)):
            if value is not None:
                raise fail(f"{flag}: only with --provider openai or anthropic")
        data = copy.deepcopy(DEFAULT_PLAN)
    else:
        data = _network_plan(provider, options)
    data = MountPlan.from_dict(data).to_dict()
    if streaming:
        data["session"]["orchestrator"]["module"] = "loop-streaming"
    return data


def _network_plan(provider: str, options: PlanOptions) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if options.model is not None:
        if not options.model.strip():
            raise fail("--model: empty")
        config["model"] = options.model
    prefix = provider.upper()
    base_url = options.base_url
    if base_url is not None:
        config["base_url"] = _checked_url(base_url)
    else:
        base_url = os.environ.get(f"{prefix}_BASE_URL")
    key = os.environ.get(f"{prefix}_API_KEY", "").strip()
    keyless = (
        provider == "openai"
        and (base_url or _DEFAULT_BASE_URL[provider]).rstrip("/") != _DEFAULT_BASE_URL[provider]
    )
    if not key and not keyless:
        raise fail(f"--provider {provider}: no API key ({_KEYLESS_HINT[provider]})")
    return {
        "session": {"orchestrator": "loop-basic", "context": "context-simple"},
        "orchestrator": {"config": {"max_iterations": NETWORK_MAX_ITERATIONS}},
        "providers": [{"module": f"provider-{provider}", "config": config}],
    }


def _checked_url(value: str) -> str:
    import httpx  # only for --base-url: the offline demo does not import it

    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise fail(f"--base-url: expected an http:// or https:// URL, not {value!r}")
    return value


def _add_tools(data: dict[str, Any], tools: tuple[str, ...]) -> None:
    """Mount the real tools, confined to the working directory, behind hooks-approval."""
    if not tools:
        return
    here = str(Path.cwd())
    mounted = {entry["module"] for entry in data.get("tools", [])}
    configs = {
        "filesystem": {
            "working_dir": here,
            "allowed_read_paths": [here],
            "allowed_write_paths": [here],
        },
        "bash": {"working_dir": here},
    }
    for name in tools:
        module = f"tool-{name}"
        if module not in mounted:
            data.setdefault("tools", []).append({"module": module, "config": configs[name]})
    hooks = data.setdefault("hooks", [])
    if not any(entry["module"] == "hooks-approval" for entry in hooks):
        hooks.append({"module": "hooks-approval", "config": {"tools": list(APPROVAL_TOOLS)}})


def _add_cassette(data: dict[str, Any], options: PlanOptions) -> None:
    """``--record`` / ``--replay``: the session's cassette (over one the plan file names)."""
    if options.record is not None and options.replay is not None:
        raise fail("--record and --replay: give one of them")
    if options.record is not None:
        data["session"]["cassette"] = {"path": str(options.record), "mode": "record"}
    elif options.replay is not None:
        if not options.replay.is_file():
            raise fail(f"--replay: {options.replay}: no such cassette (record it with --record)")
        data["session"]["cassette"] = {"path": str(options.replay), "mode": "replay"}


def read_prompt(prompt: str) -> str:
    """The prompt argument: ``-`` reads stdin, ``@file`` a file (``@@…`` is a literal ``@…``);
    the final newline of stdin or a file is not part of the prompt."""
    if prompt == "-":
        text = sys.stdin.read()
        source = "stdin"
    elif prompt.startswith("@@"):
        text, source = prompt[1:], "the prompt"
    elif prompt.startswith("@"):
        path = Path(prompt[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise fail(f"{prompt}: cannot read: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise fail(f"{prompt}: not UTF-8 text: byte at offset {exc.start}") from None
        source = str(path)
    else:
        text, source = prompt, "the prompt"
    if not text.strip():
        raise fail(f"{source}: the prompt is empty")
    return text.rstrip("\r\n") if source != "the prompt" else text
