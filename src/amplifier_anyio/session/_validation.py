"""Checking a mount plan before it runs: every module found, its config keys and types
against the schema it declares, and its ``mount`` run offline.

``validate_plan`` reports every problem at once; ``amplifier-anyio validate [--strict]``
prints its report and ``AmplifierSession(plan, strict=True)`` refuses to start on the
schema errors it finds.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from ..config_schema import schema_of
from ..errors import ConfigError, describe
from ..kernel._coordinator import ModuleCoordinator
from ..kernel._foreign import module_scope
from ..kernel._loader import ModuleLoader
from ..kernel._mount_plan import ModuleSpec, MountPlan
from ._agents import SessionLimits, agent_problems, agents_of, merge_overlay
from ._bundles import resolve_plan

__all__ = ("PlanReport", "validate_plan", "schema_problems", "module_line")

_MOUNT_POINT_OF = {"orchestrator": "orchestrator", "context": "context"}
_CLEANUP_SECONDS = 5.0


@attrs.frozen
class PlanReport:
    """What [`validate_plan`][amplifier_anyio.validate_plan] found. ``errors`` stop the plan from
    starting (unknown keys among them in strict mode); ``warnings`` do not."""

    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    """One line per plan entry found: what will actually be mounted and where it came
    from (``tool 'tool-x': entry point 'tool-x' = pkg:mount (dist 1.0)``)."""
    resolved: tuple[str, ...] = ()
    """What an upstream bundle or profile resolved to: one line per include, parent
    profile, agent file and context file (``bundle.md: includes: ./x.yaml -> /…/x.yaml``)."""
    plan: dict[str, Any] | None = None
    """The plan that was checked, resolved (``MountPlan.to_dict()``); None when it could
    not be parsed."""

    @property
    def ok(self) -> bool:
        """No errors."""
        return not self.errors


@attrs.define(eq=False)
class _Findings:
    errors: list[str] = attrs.Factory(list)
    warnings: list[str] = attrs.Factory(list)
    modules: list[str] = attrs.Factory(list)
    resolved: list[str] = attrs.Factory(list)
    plan: dict[str, Any] | None = None

    def report(self) -> PlanReport:
        return PlanReport(
            tuple(self.errors),
            tuple(self.warnings),
            tuple(self.modules),
            tuple(self.resolved),
            self.plan,
        )


@attrs.frozen
class _Identity:
    """What a module may ask its coordinator while the plan is validated."""

    session_id: str
    parent_id: str | None = None


async def validate_plan(
    plan: MountPlan | Mapping[str, Any] | str | os.PathLike[str],
    *,
    strict: bool = False,
    loader: ModuleLoader | None = None,
) -> PlanReport:
    """Load every module of ``plan``, check its config against its declared schema, and
    run its ``mount`` offline (``coordinator.validating`` is true: modules create no
    files and open no connections); the mounts are cleaned up before returning.

    Unknown config keys are errors when ``strict``, warnings otherwise; a module that
    declares no schema is a warning in strict mode (its keys cannot be checked). A plan
    that cannot be parsed is one error. An upstream bundle or profile is resolved first
    (``session/_bundles.py``): what it resolved to is in ``resolved``, a reference that
    cannot be resolved is a warning (an error when ``strict``).
    """
    findings = _Findings()
    try:
        parsed = await _parse(plan, strict, findings)
    except ConfigError as exc:
        return PlanReport(errors=(*findings.errors, str(exc)), resolved=tuple(findings.resolved))
    findings.plan = parsed.to_dict()
    coordinator = ModuleCoordinator(_Identity(f"validate-{uuid.uuid4()}"))
    coordinator.validating = True
    loader = loader or ModuleLoader(coordinator)
    _check_plan(parsed, strict, findings)
    try:
        for kind, spec in parsed.all_modules():
            await _check_module(
                kind, spec, loader=loader, coordinator=coordinator, strict=strict, findings=findings
            )
        for field, spec in _executor_specs(parsed):
            await _check_executor(field, spec, loader, coordinator, findings)
        await _check_agents(
            parsed, loader=loader, coordinator=coordinator, strict=strict, findings=findings
        )
    finally:
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + _CLEANUP_SECONDS
            try:
                await coordinator.cleanup()
            except Exception as exc:  # noqa: BLE001 - a module's cleanup is one more finding
                findings.errors.append(f"cleaning up after validation: {describe(exc)}")
        if loader.coordinator is coordinator:
            loader.cleanup()
    return findings.report()


async def schema_problems(
    plan: MountPlan, loader: ModuleLoader, *, strict: bool, agents: bool = True
) -> PlanReport:
    """The schema check alone, no mount: what a session runs before it mounts. A module
    that cannot be found is left to the mount (which honours ``optional``); an optional
    module's problems are warnings. ``agents=False`` skips the agents section (a
    sub-agent's: its root session checked them when it started)."""
    findings = _Findings()
    _check_plan(plan, strict, findings, agents=agents)
    for kind, spec in plan.all_modules():
        if spec.problem is not None:
            continue  # the mount reports it, honouring optional
        try:
            mount = await loader.find(spec.module, spec.source)
        except Exception:  # noqa: BLE001, S112 - the mount reports it, honouring optional
            continue
        found = _Findings()
        _check_schema(kind, spec, mount, strict, found)
        findings.warnings.extend(found.warnings)
        (findings.warnings if spec.optional else findings.errors).extend(found.errors)
    return findings.report()


# The plan's own keys (amplifier-core's mount plan, plus ours): anything else is a typo or
# something this runtime does not read, which a user should hear about.
_PLAN_KEYS = frozenset(
    {
        "session",
        "orchestrator",
        "context",
        "providers",
        "tools",
        "hooks",
        "agents",
        "includes",
        "instruction",
    }
)
_SESSION_KEYS = frozenset(
    {
        "orchestrator",
        "orchestrator_source",
        "context",
        "context_source",
        "executor",
        "budget",
        "max_agent_depth",
        "cassette",
        "durable",
        "providers_policy",
        "injection_budget_per_turn",
        "injection_size_limit",
        "metadata",
        "raw",
        "debug",
        "raw_debug",
    }
)
_ENTRY_KEYS = frozenset({"module", "source", "config", "instance_id", "optional", "executor"})
_STRING_FORM_KEYS = frozenset({"config"})  # top-level orchestrator / context tables


def _unknown_keys(plan: MountPlan) -> list[str]:
    """``<where>: unknown key 'x'`` for every key the plan's structure does not define."""
    raw = plan.raw
    found = [f"unknown top-level key {k!r}" for k in raw if k not in _PLAN_KEYS]
    session = raw.get("session")
    if isinstance(session, Mapping):
        found += [f"session: unknown key {k!r}" for k in session if k not in _SESSION_KEYS]
        for key in ("orchestrator", "context", "executor"):
            entry = session.get(key)
            if isinstance(entry, Mapping):
                where = f"session.{key}"
                found += [f"{where}: unknown key {k!r}" for k in entry if k not in _ENTRY_KEYS]
    for key in ("orchestrator", "context"):
        table = raw.get(key)
        if isinstance(table, Mapping):
            found += [f"{key}: unknown key {k!r}" for k in table if k not in _STRING_FORM_KEYS]
    for section in ("providers", "tools", "hooks"):
        entries = raw.get(section)
        for index, entry in enumerate(entries if isinstance(entries, list) else ()):
            if isinstance(entry, Mapping):
                where = f"{section}[{index}]"
                found += [
                    f"{where}: unknown key {k!r}"
                    for k in entry
                    if k not in _ENTRY_KEYS and not (section == "providers" and k == "pricing")
                ]
    return found


def _misplaced_pricing(plan: MountPlan) -> list[str]:
    """``pricing`` beside a provider's ``module`` instead of inside its ``config``: an error
    that says where it goes (left there, it would price nothing and a dollar budget would
    never fire)."""
    entries = plan.raw.get("providers")
    return [
        f"providers[{i}].pricing: prices go in the provider's config "
        f"(providers[{i}].config.pricing), not beside its module"
        for i, entry in enumerate(entries if isinstance(entries, list) else ())
        if isinstance(entry, Mapping) and "pricing" in entry
    ]


def _unpriced(plan: MountPlan, field: str) -> list[str]:
    """A dollar budget counts nothing for a provider without prices: every provider of the
    plan needs ``config.pricing`` that prices its model (``config.model`` or
    ``default_model`` when it names one; a table by model needs that key or ``"*"``)."""
    from ..models._pricing import PriceTable  # noqa: PLC0415 - only for a dollar budget

    found: list[str] = []
    for index, spec in enumerate(plan.providers):
        where = f"providers[{index}].config.pricing"
        try:
            table = PriceTable.from_config(spec.config.get("pricing"), where)
        except ConfigError as exc:
            found.append(str(exc))
            continue
        model = spec.config.get("model") or spec.config.get("default_model")
        if not table:
            found.append(f"{field}: provider {spec.module!r} has no prices; give them in {where}")
        elif isinstance(model, str) and table.price_of(model) is None:
            found.append(f"{field}: {where} has no price for model {model!r} of {spec.module!r}")
    return found


def _check_plan(plan: MountPlan, strict: bool, findings: _Findings, *, agents: bool = True) -> None:
    """Keys the plan's structure does not define (a typo such as ``confg:`` would silently
    drop a module's config), and ``includes`` left unresolved (a MountPlan built by hand
    and checked with `schema_problems`: sessions and ``validate_plan`` resolve them).
    Errors when ``strict``, warnings otherwise."""
    (findings.errors if strict else findings.warnings).extend(_unknown_keys(plan))
    findings.errors.extend(_misplaced_pricing(plan))
    try:
        limits = SessionLimits.from_settings(plan.session_settings)
    except ConfigError as exc:
        findings.errors.append(str(exc))
    else:
        if limits.budget.max_cost_usd is not None:
            findings.errors.extend(_unpriced(plan, "session.budget.max_cost_usd"))
    if agents:
        errors, warnings = agent_problems(plan, strict=strict)
        findings.errors.extend(errors)
        findings.warnings.extend(warnings)
    if plan.includes:
        listed = ", ".join(repr(i) for i in plan.includes)
        line = f"includes: not resolved: {listed}"
        (findings.errors if strict else findings.warnings).append(line)


def module_line(kind: str, spec: ModuleSpec, loader: ModuleLoader) -> str:
    """``<kind> '<id>': <where its code came from>`` for a module the loader found."""
    origin = loader.origin_of(spec.module, spec.source) or "found"
    return f"{kind} {spec.module!r}: {origin}"


async def _parse(
    plan: MountPlan | Mapping[str, Any] | str | os.PathLike[str], strict: bool, findings: _Findings
) -> MountPlan:
    """The plan, upstream references resolved (their findings recorded)."""
    source: MountPlan | Path
    if isinstance(plan, MountPlan):
        source = plan
    elif isinstance(plan, Mapping):
        source = MountPlan.from_dict(dict(plan))
    else:
        source = Path(plan)
    resolved = await resolve_plan(source, strict=strict)
    if resolved is None:
        assert isinstance(source, MountPlan)
        return source
    findings.resolved.extend(resolved.resolved)
    findings.warnings.extend(resolved.warnings)
    findings.errors.extend(resolved.errors)
    return MountPlan.from_dict(resolved.plan)


async def _check_module(
    kind: str,
    spec: ModuleSpec,
    *,
    loader: ModuleLoader,
    coordinator: ModuleCoordinator,
    strict: bool,
    findings: _Findings,
) -> None:
    label = f"{kind} {spec.module!r}"
    if spec.problem is not None:  # optional, so the session would go on without it
        findings.warnings.append(f"{label}: optional, not loaded: {spec.problem}")
        return
    try:
        mount = await loader.find(spec.module, spec.source)
    except Exception as exc:  # noqa: BLE001 - every problem is reported, one line each
        findings.errors.append(f"{label}: {describe(exc)}")
        return
    findings.modules.append(module_line(kind, spec, loader))
    findings.warnings.extend(f"{label}: {w}" for w in loader.warnings_of(spec.module, spec.source))
    errors_before = len(findings.errors)
    _check_schema(kind, spec, mount, strict, findings)
    if len(findings.errors) > errors_before:
        return  # its mount would only repeat the schema's finding less clearly
    try:
        mount_fn = await loader.load(spec.module, spec.config, spec.source)
        with module_scope(spec.module):
            result = await mount_fn(coordinator)
    except Exception as exc:  # noqa: BLE001 - every problem is reported, one line each
        findings.errors.append(f"{label}: {describe(exc)}")
        return
    coordinator.register_cleanup(result)
    point = _MOUNT_POINT_OF.get(kind)
    if point is not None and coordinator.get(point) is None:
        findings.errors.append(f"{label}: mounted nothing at {point!r}")


async def _check_agents(
    plan: MountPlan,
    *,
    loader: ModuleLoader,
    coordinator: ModuleCoordinator,
    strict: bool,
    findings: _Findings,
) -> None:
    """Each agent's own modules (those its overlay adds or changes) found, their config
    checked and mounted offline, every line naming the agent. A child plan that does
    not parse was reported by `_check_plan` already."""
    parent = set(map(repr, plan.all_modules()))
    for name, agent in agents_of(plan.raw).items():
        try:
            child = MountPlan.from_dict(merge_overlay(plan.raw, agent))
        except ConfigError:
            continue
        found = _Findings()
        for kind, spec in child.all_modules():
            if repr((kind, spec)) in parent:
                continue  # the parent's own entry, checked above
            await _check_module(
                kind, spec, loader=loader, coordinator=coordinator, strict=strict, findings=found
            )
        findings.errors.extend(f"agents.{name}: {line}" for line in found.errors)
        findings.warnings.extend(f"agents.{name}: {line}" for line in found.warnings)
        findings.modules.extend(f"agents.{name}: {line}" for line in found.modules)


def _executor_specs(plan: MountPlan) -> list[tuple[str, ModuleSpec]]:
    """Every executor entry of the plan, with the field that names it."""
    found = [("session.executor", plan.executor)] if plan.executor is not None else []
    found.extend(
        (f"tools[{i}].executor", spec.executor)
        for i, spec in enumerate(plan.tools)
        if spec.executor is not None
    )
    return found


async def _check_executor(
    field: str,
    spec: ModuleSpec,
    loader: ModuleLoader,
    coordinator: ModuleCoordinator,
    findings: _Findings,
) -> None:
    """A built-in executor's config, or an executor module found and its config accepted
    (its ``mount`` only builds the executor: it starts nothing until the session does)."""
    from ..runtime._executors import builtin_executor  # noqa: PLC0415 - runtime needs kernel

    try:
        builtin_executor(spec.module, spec.config, field)
    except ConfigError as exc:
        findings.errors.append(str(exc))
        return
    except LookupError:
        pass
    else:
        await anyio.lowlevel.checkpoint()
        return
    try:
        executor = await (await loader.load(spec.module, spec.config, spec.source))(coordinator)
    except Exception as exc:  # noqa: BLE001 - every problem is reported, one line each
        findings.errors.append(f"{field}: {describe(exc)}")
        return
    if not callable(getattr(executor, "run", None)):
        findings.errors.append(f"{field}.module: {spec.module!r} is not an executor")


def _check_schema(
    kind: str, spec: ModuleSpec, mount: Any, strict: bool, findings: _Findings
) -> None:
    schema = schema_of(mount)
    label = f"{kind} {spec.module!r}"
    if schema is None:
        if strict and spec.config:
            findings.warnings.append(f"{label}: declares no config schema; its keys are unchecked")
        return
    for problem in schema.check(spec.config):
        line = f"{label}: {problem}"
        if problem.kind == "unknown" and not strict:
            findings.warnings.append(line)
        else:
            findings.errors.append(line)
