"""Upstream bundles and profiles, resolved into one mount plan dict.

Upstream Amplifier publishes its configurations as *bundles* (amplifier-foundation) and,
earlier, *profiles* (amplifier-app-cli): YAML files or Markdown files whose YAML front
matter is the configuration and whose body is the system instruction. They compose:

- ``includes:`` — a list of bundle references (a string or ``{bundle: ref}``): a path
  (relative to the including file), a ``file://`` URI, a ``git+…`` URL (``@ref``,
  ``#subdirectory=`` naming a directory or a file), ``namespace:path`` (``namespace`` is
  a bundle already loaded by that ``bundle.name``, or a well-known name), or a bare name
  (`WELL_KNOWN_BUNDLES` or a ``registry`` entry). A directory means its ``bundle.md`` or
  ``bundle.yaml``; ``path`` may leave out ``.yaml`` / ``.yml`` / ``.md``.
- ``profile: {extends: ref}`` — the parent profile (the same references; a bare name is a
  sibling ``name.md``).
- ``agents: {include: [name, …]}`` — agent files ``<bundle dir>/agents/<name>.md``
  (``namespace:name`` in that namespace's directory): front matter ``meta:`` (or flat
  ``name`` / ``description``), mount plan sections, and the body as the instruction.
- ``context: {include: [path, …]}`` — files appended to the instruction.

Precedence is upstream's: the includes in order, then the including bundle; ``session``
tables merge key by key (lists concatenate without duplicates); ``providers`` / ``tools``
/ ``hooks`` entries merge by module id (their config merged the same way); agents and the
instruction of a later bundle replace earlier ones. ``extends`` merges a child profile
over its parent the same way except that a list replaces a list.

`resolve_plan_file` / `resolve_plan_dict` give the plan dict in our shape (``session``,
the module lists, ``agents`` as ``NAME → definition``, ``instruction``) with the lines of
what was resolved and the problems found. A reference that cannot be resolved is a
warning and the rest goes on, as upstream does; with ``strict`` it is an error. A file of
ours (no upstream feature in it) comes back unchanged. The merge functions `compose` and
`extend` are pure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from ..errors import AmplifierError, ConfigError, ModuleLoadError, describe
from ..kernel._mount_plan import MountPlan, parse_document
from ..kernel._overlay import MODULE_LISTS, merge_plan
from ..kernel._sources import GitSource, fetch_git_source, is_git_source

__all__ = (
    "ResolvedPlan",
    "resolve_plan_file",
    "resolve_plan_dict",
    "needs_resolution",
    "resolve_plan",
    "plan_of",
    "compose",
    "extend",
    "WELL_KNOWN_BUNDLES",
)

WELL_KNOWN_BUNDLES: dict[str, str] = {
    "foundation": "git+https://github.com/microsoft/amplifier-foundation@main",
    "recipes": "git+https://github.com/microsoft/amplifier-bundle-recipes@main",
    "design-intelligence": "git+https://github.com/microsoft/amplifier-bundle-design-intelligence@main",
}
"""Bundle names upstream's CLI knows without being told (``includes: [foundation]``,
``foundation:behaviors/x``); a ``registry`` given to the resolver adds or replaces names."""

_PLAN_KEYS = ("session", "orchestrator", "context", *MODULE_LISTS, "agents", "instruction")
_UPSTREAM_KEYS = ("bundle", "profile", "includes")
_SUFFIXES = (".yaml", ".yml", ".md", ".toml")
_FRONT_MATTER = re.compile(r"^---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|$)", re.DOTALL)
_MENTION = re.compile(r"(?<![\w@])@[\w.-]+:[\w./-]+")


@attrs.frozen(kw_only=True)
class ResolvedPlan:
    """A plan file or dict with every upstream reference resolved."""

    plan: dict[str, Any]
    """The plan dict in our shape (``MountPlan.from_dict`` reads it)."""
    upstream: bool
    """The document was in upstream's format (a bundle, a profile, a ``.md`` file, or it
    used ``includes`` / ``agents: {include}``)."""
    resolved: tuple[str, ...] = ()
    """What was resolved, one line each (``validate`` prints them)."""
    warnings: tuple[str, ...] = ()
    """References that could not be resolved (skipped), keys not used here."""
    errors: tuple[str, ...] = ()
    """With ``strict``: what would have been warnings about references."""


def needs_resolution(data: Mapping[str, Any]) -> bool:
    """Whether a plan dict uses an upstream feature this module resolves."""
    if any(key in data for key in _UPSTREAM_KEYS):
        return True
    agents = data.get("agents")
    context = data.get("context")
    return (isinstance(agents, Mapping) and "include" in agents) or (
        isinstance(context, Mapping) and "include" in context
    )


async def resolve_plan_file(
    path: str | Path,
    *,
    strict: bool = False,
    registry: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
) -> ResolvedPlan:
    """Read a plan, bundle or profile file (``.yaml``, ``.yml``, ``.toml``, ``.md``, or a
    directory holding ``bundle.md`` / ``bundle.yaml``) and resolve it.

    A problem with the file itself (cannot be read, not valid YAML, not a table, a bundle
    fragment without ``session``) is a ConfigError naming it. ``registry`` maps bundle
    names to references (over `WELL_KNOWN_BUNDLES`); ``cache_dir`` is where git sources
    are cloned (the module cache by default).
    """
    resolver = _Resolver(strict=strict, registry=registry, cache_dir=cache_dir)
    target = await _document_path(Path(path))
    data, body = await _read(target)
    # A file without ``session`` can only be upstream's: a fragment (a behavior).
    upstream = target.suffix.lower() == ".md" or needs_resolution(data) or "session" not in data
    if not upstream:
        return ResolvedPlan(plan=data, upstream=False)
    target = Path(await anyio.Path(target).resolve())
    bundle = await resolver.document(target, data, body, chain=(target,))
    return resolver.result(bundle, origin=str(path))


async def resolve_plan_dict(
    data: Mapping[str, Any],
    *,
    base: Path | None = None,
    strict: bool = False,
    registry: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
) -> ResolvedPlan:
    """Resolve a plan dict's upstream references; relative paths are relative to
    ``base`` (the current directory by default). A dict without any comes back as is."""
    plan = dict(data)
    if not needs_resolution(plan):
        await anyio.lowlevel.checkpoint()
        return ResolvedPlan(plan=plan, upstream=False)
    resolver = _Resolver(strict=strict, registry=registry, cache_dir=cache_dir)
    where = (base or Path.cwd()) / "<plan>"
    bundle = await resolver.document(where, plan, None, chain=())
    return resolver.result(bundle, origin="<plan>")


async def resolve_plan(
    plan: MountPlan | Mapping[str, Any] | str | Path, *, strict: bool = False
) -> ResolvedPlan | None:
    """A plan file resolved, or a plan (dict or MountPlan) that uses an upstream feature;
    None for a plan that needs nothing (it stays as it is)."""
    if isinstance(plan, str | Path):
        return await resolve_plan_file(plan, strict=strict)
    data = plan.raw if isinstance(plan, MountPlan) else plan
    if not needs_resolution(data):
        await anyio.lowlevel.checkpoint()
        return None
    return await resolve_plan_dict(data, strict=strict)


def plan_of(resolved: ResolvedPlan) -> MountPlan:
    """The MountPlan of a resolution; its errors (strict) are one ConfigError."""
    if resolved.errors:
        raise ConfigError("; ".join(resolved.errors))
    return MountPlan.from_dict(resolved.plan)


# -- merging (pure) ------------------------------------------------------------------------


def compose(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` composed over ``base`` as upstream composes an include and its includer.

    The plan merge of `kernel._overlay` with lists concatenating without duplicates:
    ``providers`` / ``tools`` / ``hooks`` merge by module id, ``context`` files
    accumulate, the overlay's ``instruction`` replaces; ``agents`` merge by name (the
    overlay's definition wins whole).
    """
    result = merge_plan(base, overlay, lists="concatenate")
    agents, own = base.get("agents"), overlay.get("agents")
    if isinstance(agents, Mapping) and isinstance(own, Mapping):
        result["agents"] = {**agents, **own}
    return result


def extend(parent: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    """``child`` profile over its ``parent`` as upstream's profiles merge (the plan merge of
    `kernel._overlay`): module lists by module id, tables key by key, any other value (a
    list too) replaced by the child's."""
    return merge_plan(parent, child, lists="replace")


# -- reading -------------------------------------------------------------------------------


async def _document_path(path: Path) -> Path:
    """The file a path names: itself, or a directory's ``bundle.md`` / ``bundle.yaml``."""
    if await anyio.Path(path).is_dir():
        for name in ("bundle.md", "bundle.yaml", "bundle.yml"):
            if await anyio.Path(path / name).is_file():
                return path / name
        msg = f"{path}: cannot read: a directory, with no bundle.md or bundle.yaml in it"
        raise ConfigError(msg)
    return path


async def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """A document's table and, for Markdown, its body (None: no body)."""
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        msg = f"{path}: unknown plan format {suffix or '(none)'!r}; use .yaml, .yml, .toml or .md"
        raise ConfigError(msg)
    try:
        raw = await anyio.Path(path).read_bytes()
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror or exc}"
        raise ConfigError(msg) from exc
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is not an error
    except UnicodeDecodeError as exc:
        msg = f"{path}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}"
        raise ConfigError(msg) from None
    if suffix != ".md":
        return parse_document(text, suffix=suffix, origin=str(path)), None
    match = _FRONT_MATTER.match(text)
    if match is None:
        return {}, text.strip() or None
    head = match.group(1)
    data = parse_document(head, origin=f"{path} (front matter)") if head.strip() else {}
    return data, text[match.end() :].strip() or None


@attrs.define(eq=False)
class _Bundle:
    """One document after its references were followed: the parts a plan is made of."""

    data: dict[str, Any]
    name: str | None = None


@attrs.define(eq=False)
class _Resolver:
    strict: bool
    registry: Mapping[str, str] | None
    cache_dir: Path | None
    namespaces: dict[str, Path] = attrs.Factory(dict)
    resolved: list[str] = attrs.Factory(list)
    warnings: list[str] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)
    loaded: dict[Path, dict[str, Any]] = attrs.Factory(dict)

    def problem(self, line: str) -> None:
        (self.errors if self.strict else self.warnings).append(line)

    def known(self, name: str) -> str | None:
        return (self.registry or {}).get(name) or WELL_KNOWN_BUNDLES.get(name)

    # -- one document ---------------------------------------------------------------------

    async def document(
        self, path: Path, data: dict[str, Any], body: str | None, chain: tuple[Path, ...]
    ) -> dict[str, Any]:
        """``data`` (read from ``path``) with its includes, parent profile, agents and
        context files resolved, composed as upstream composes it."""
        base = path.parent
        meta = data.get("bundle") if isinstance(data.get("bundle"), Mapping) else None
        profile = data.get("profile") if isinstance(data.get("profile"), Mapping) else None
        name = (meta or profile or {}).get("name")
        if isinstance(name, str) and name and name not in self.namespaces:
            root = (meta or {}).get("namespace_root")
            self.namespaces[name] = _joined(base, root) if isinstance(root, str) else base
        own = self.own_parts(path, data, body)
        parent: dict[str, Any] = {}
        if profile is not None and profile.get("extends"):
            parent = await self.reference(str(profile["extends"]), path, chain, "extends")
        included: list[dict[str, Any]] = []
        for index, entry in enumerate(_as_list(data.get("includes"))):
            ref = entry.get("bundle") if isinstance(entry, Mapping) else entry
            if not isinstance(ref, str) or not ref:
                self.problem(f"{path.name}: includes[{index}]: not a bundle reference: {entry!r}")
                continue
            included.append(await self.reference(ref, path, chain, "includes"))
        if "agents" in data:  # after the includes: their namespaces are known now
            own["agents"] = await self.agents(data["agents"], path)
        context = data.get("context")
        if isinstance(context, Mapping) and "include" in context:
            files = await self.context_files(context["include"], path)
            if files:
                own["context_files"] = files
        result: dict[str, Any] = {}
        for part in included:
            result = compose(result, part)
        if parent:
            own = extend(parent, own)
        return compose(result, own)

    def own_parts(self, path: Path, data: dict[str, Any], body: str | None) -> dict[str, Any]:
        """The plan keys a document sets itself, module sources made absolute."""
        base = path.parent
        parts = {k: data[k] for k in _PLAN_KEYS if k in data and k != "agents"}
        if isinstance(parts.get("context"), Mapping) and "include" in parts["context"]:
            del parts["context"]  # upstream's context files, not our context's config
        for section in MODULE_LISTS:
            if isinstance(parts.get(section), list):
                parts[section] = [_absolute_source(e, base) for e in parts[section]]
        session = parts.get("session")
        if isinstance(session, Mapping):
            parts["session"] = {
                k: _absolute_source(v, base) if k in ("orchestrator", "context") else v
                for k, v in session.items()
            }
        system = data.get("system")
        instruction = body or (system.get("instruction") if isinstance(system, Mapping) else None)
        if isinstance(instruction, str) and instruction.strip():
            parts["instruction"] = instruction.strip()
        unused = [k for k in data if k not in (*_PLAN_KEYS, *_UPSTREAM_KEYS, "system")]
        if unused:
            shown = ", ".join(repr(k) for k in unused)
            self.resolved.append(f"{path.name}: not used here: {shown}")
        return parts

    # -- references -----------------------------------------------------------------------

    async def reference(
        self, ref: str, including: Path, chain: tuple[Path, ...], field: str
    ) -> dict[str, Any]:
        """The resolved parts of the document ``ref`` names; {} (and a problem) when it
        cannot be found, read or resolved."""
        where = f"{including.name}: {field}"
        try:
            path = await self.locate(ref, including.parent)
            if path in chain:
                shown = " -> ".join(p.name for p in (*chain, path))
                self.problem(f"{where}: {ref!r} skipped: it includes itself ({shown})")
                return {}
            if path not in self.loaded:
                data, body = await _read(path)
                self.loaded[path] = await self.document(path, data, body, (*chain, path))
        except (ConfigError, ModuleLoadError) as exc:
            self.problem(f"{where}: {ref!r} skipped: {_why(exc)}")
            return {}
        self.resolved.append(f"{where}: {ref} -> {path}")
        return self.loaded[path]

    async def locate(self, ref: str, base: Path) -> Path:
        """The file ``ref`` names (see the module's docstring for the forms)."""
        if is_git_source(ref):
            return await self.git(ref)
        if ref.startswith("file://"):
            return await _find(Path(ref.removeprefix("file://")), ref)
        namespace, sep, rest = ref.partition(":")
        if sep and namespace and "/" not in namespace and not Path(ref).is_absolute():
            root = await self.namespace(namespace, ref)
            rest = rest.lstrip("/")
            try:
                return await _find(root / rest, ref)
            except ConfigError:  # upstream profiles' "collection:name" is profiles/name.md
                return await _find(root / "profiles" / rest, ref)
        known = self.known(ref)
        if known is not None and "/" not in ref:
            return await self.locate(known, base)
        return await _find(base / await anyio.Path(ref).expanduser(), ref)

    async def git(self, ref: str) -> Path:
        where = await self.fetch(ref)
        return await _find(where, ref)

    async def fetch(self, ref: str) -> Path:
        """The local copy of a git reference: the whole repository cloned (its own bundle
        names a namespace), then the ``subdirectory``, which may name a file."""
        try:
            parsed = GitSource.parse(ref)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        whole = f"git+{parsed.url}" + (f"@{parsed.ref}" if parsed.ref else "")
        root = await fetch_git_source(whole, self.cache_dir)
        await self.register_root(root)
        return root / parsed.subdirectory if parsed.subdirectory else root

    async def register_root(self, root: Path) -> None:
        """A clone's own bundle names its namespace (``foundation:…`` in foundation)."""
        try:
            path = await _document_path(root)
            data, _ = await _read(path)
        except ConfigError:
            return
        meta = data.get("bundle")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if isinstance(name, str) and name:
            self.namespaces.setdefault(name, root)

    async def namespace(self, name: str, ref: str) -> Path:
        """The directory ``name:…`` references are relative to: a bundle loaded by that
        name, else a registry or well-known entry (a directory, or the directory of the
        bundle file it names; fetched when it is a git source)."""
        if name in self.namespaces:
            return self.namespaces[name]
        known = self.known(name)
        if known is None:
            msg = f"{ref!r}: no bundle named {name!r} was loaded, and it is not a known name"
            raise ConfigError(msg)
        if is_git_source(known):
            where = await self.fetch(known)
        else:
            where = Path(known.removeprefix("file://"))
        if await anyio.Path(where).is_file():
            where = where.parent
        elif not await anyio.Path(where).is_dir():
            msg = f"{ref!r}: {name!r} names {known!r}, which is not a directory or a bundle"
            raise ConfigError(msg)
        return self.namespaces.setdefault(name, Path(await anyio.Path(where).resolve()))

    # -- agents and context files ---------------------------------------------------------

    async def agents(self, value: Any, including: Path) -> Any:
        """The roster: included agent files read, inline definitions kept; ``all`` /
        ``none`` / a list (which agents a session may use) as they are."""
        if not isinstance(value, Mapping):
            return value
        roster: dict[str, Any] = {}
        for name in _as_list(value.get("include")):
            if not isinstance(name, str) or not name:
                self.problem(f"{including.name}: agents.include: not an agent name: {name!r}")
                continue
            found = await self.agent(name, including)
            if found is not None:
                roster[name] = found
        roster.update({k: v for k, v in value.items() if k != "include" and isinstance(v, dict)})
        return roster

    async def agent(self, name: str, including: Path) -> dict[str, Any] | None:
        namespace, sep, short = name.partition(":")
        try:
            root = await self.namespace(namespace, name) if sep else including.parent
            short = short if sep else name
            path = root / "agents" / (short if short.endswith(".md") else f"{short}.md")
            data, body = await _read(path)
        except (ConfigError, ModuleLoadError) as exc:
            self.problem(f"{including.name}: agents.include: {name!r} skipped: {_why(exc)}")
            return None
        self.resolved.append(f"{including.name}: agents: {name} -> {path}")
        return _agent_definition(name, data, body, path.parent)

    async def context_files(self, entries: Any, including: Path) -> list[tuple[str, str]]:
        """``(path, text)`` of each context file (``namespace:path`` or relative)."""
        found: list[tuple[str, str]] = []
        for entry in _as_list(entries):
            namespace, sep, rest = str(entry).partition(":")
            try:
                root = await self.namespace(namespace, str(entry)) if sep else including.parent
                path = root / (rest if sep else str(entry)).lstrip("/")
                text = await anyio.Path(path).read_text(encoding="utf-8")
            except (ConfigError, ModuleLoadError, OSError, UnicodeDecodeError) as exc:
                problem = _why(exc) if isinstance(exc, AmplifierError) else "cannot be read"
                self.problem(f"{including.name}: context.include: {entry!r} skipped: {problem}")
                continue
            self.resolved.append(f"{including.name}: context: {entry} -> {path}")
            found.append((str(path), text))
        return found

    # -- the plan -------------------------------------------------------------------------

    def result(self, bundle: dict[str, Any], *, origin: str) -> ResolvedPlan:
        plan = {k: v for k, v in bundle.items() if k in _PLAN_KEYS}
        instruction = _instruction(plan.get("instruction"), bundle.get("context_files", []))
        if instruction:
            plan["instruction"] = instruction
        if plan.get("agents") in ({}, None):
            plan.pop("agents", None)
        if "session" not in plan:
            msg = (
                f"{origin}: session: required — this is a bundle fragment (a behavior): "
                "include it from a bundle that names the orchestrator and the context"
            )
            raise ConfigError(msg)
        mentions = sorted(set(_MENTION.findall(plan.get("instruction") or "")))
        if mentions:
            self.warnings.append(
                f"instruction: @mentions are not expanded here ({', '.join(mentions[:5])}"
                + (", …" if len(mentions) > 5 else "")
                + ")"
            )
        return ResolvedPlan(
            plan=plan,
            upstream=True,
            resolved=tuple(self.resolved),
            warnings=tuple(self.warnings),
            errors=tuple(self.errors),
        )


def _why(exc: BaseException) -> str:
    """A resolution problem in a few words (a failed clone: git's own line)."""
    return exc.reason if isinstance(exc, ModuleLoadError) else describe(exc)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


async def _find(path: Path, ref: str) -> Path:
    """``path``, or it with ``.yaml`` / ``.yml`` / ``.md``, or the bundle in it."""
    for candidate in (path, *(Path(f"{path}{suffix}") for suffix in (".yaml", ".yml", ".md"))):
        if await anyio.Path(candidate).is_file():
            return Path(await anyio.Path(candidate).resolve())
        if await anyio.Path(candidate).is_dir():
            return Path(await anyio.Path(await _document_path(candidate)).resolve())
    msg = f"{ref!r}: no such bundle ({path})"
    raise ConfigError(msg)


def _absolute_source(entry: Any, base: Path) -> Any:
    """A module entry whose ``source`` is ``./…`` or ``../…``, made absolute: it is
    relative to the bundle's directory, wherever the session runs (upstream's rule)."""
    if not isinstance(entry, Mapping):
        return entry
    source = entry.get("source")
    if isinstance(source, str) and source.startswith(("./", "../")):
        return {**entry, "source": str(_joined(base, source))}
    return dict(entry)


def _joined(base: Path, relative: str) -> Path:
    """``relative`` under ``base`` with ``.`` and ``..`` folded (no file system access)."""
    return Path(os.path.normpath(base / relative))


def _agent_definition(
    name: str, data: dict[str, Any], body: str | None, base: Path
) -> dict[str, Any]:
    """An agent file as an agent definition: ``meta`` (or the flat ``name`` /
    ``description``) fields, its plan sections, the body as ``instruction``."""
    meta = data.get("meta")
    if not isinstance(meta, Mapping):
        meta = data if ("name" in data or "description" in data) else {}
    agent: dict[str, Any] = {"name": meta.get("name", name), "description": ""}
    agent.update({k: v for k, v in meta.items() if k != "name"})
    for key in (*MODULE_LISTS, "session", "provider_preferences", "model_role"):
        if key in data:
            agent[key] = data[key]
    for section in MODULE_LISTS:
        if isinstance(agent.get(section), list):
            agent[section] = [_absolute_source(e, base) for e in agent[section]]
    if isinstance(data.get("agents"), str | list):  # which agents it may use in turn
        agent["agents"] = data["agents"]
    if body:
        agent["instruction"] = body
    return agent


def _instruction(text: Any, files: list[tuple[str, str]]) -> str | None:
    """The instruction, then each context file as a ``<context_file>`` block."""
    parts = [text] if isinstance(text, str) and text.strip() else []
    blocks = [
        f'<context_file paths="{path}">\n{body.strip()}\n</context_file>' for path, body in files
    ]
    if blocks:
        parts.append("\n\n".join(blocks))
    return "\n\n---\n\n".join(parts) or None
