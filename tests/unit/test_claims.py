"""Resource claims: parallel calls that touch the same thing run in call order.

Every batch here runs the real filesystem tools on a real temporary directory. Overlap
and order are measured by what the calls record (who entered before whom left), never by
the wall clock; a wait that would mean a lost order or a deadlock is bounded by
``fail_after`` so that a broken build fails instead of hanging.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

import amplifier_anyio
from amplifier_anyio.errors import ConfigError, ValidationError
from amplifier_anyio.events import TOOL_PRE, TOOL_WAITING
from amplifier_anyio.interfaces import Claims
from amplifier_anyio.models import HookResult, ToolCall, ToolResult
from amplifier_anyio.runtime import ToolBatch, ToolBatchConfig
from amplifier_anyio.runtime._claims import conflicts, keys_overlap
from amplifier_anyio.testing import MockContextManager, MockCoordinator
from amplifier_anyio.tools.bash import BashConfig, make_tool
from amplifier_anyio.tools.filesystem import make_tools
from tiers import needs, optional

mcp_tool = optional("amplifier_anyio.mcp.client")  # needs the MCP SDK

pytestmark = pytest.mark.anyio

DEADLOCK = 30.0
"""Seconds before a wait that should end at once is declared a hang (a failure)."""


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root


def fs_tools(work: Path) -> dict[str, Any]:
    return {t.name: t for t in make_tools(None, {"working_dir": str(work)})}


def assistant(calls: list[ToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
    }


async def run_batch(
    calls: list[ToolCall],
    tools: dict[str, Any],
    *,
    coordinator: MockCoordinator | None = None,
    config: ToolBatchConfig | None = None,
) -> list[str]:
    """Run one batch; the contents of its tool messages, in call order."""
    coordinator = coordinator or MockCoordinator()
    context = MockContextManager()
    batch = ToolBatch(
        calls=calls,
        tools=tools,
        hooks=coordinator.hooks,
        coordinator=coordinator,
        config=config or ToolBatchConfig(),
    )
    with anyio.fail_after(DEADLOCK):
        await batch.run(context, assistant(calls))
    return [m["content"] for m in context.messages if m["role"] == "tool"]


def call(i: int, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"c{i}", name=name, arguments=arguments)


class Recorded:
    """Wraps a tool: same claims, records entering and leaving its ``execute``; a call
    may be held at the door until ``gates[i]`` is set."""

    def __init__(self, tool: Any, log: list[tuple[str, str]]) -> None:
        self.tool = tool
        self.name = tool.name
        self.log = log
        self.gates: dict[str, anyio.Event] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.open_at: tuple[int, anyio.Event] | None = None
        """(n, door): the door opens once n calls are inside at once."""

    def claims(self, tool_input: dict[str, Any]) -> Claims:
        return self.tool.claims(tool_input)  # type: ignore[no-any-return]

    async def execute(self, tool_input: dict[str, Any]) -> ToolResult:
        tag = tool_input.get("tag", "")
        self.log.append(("enter", tag))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.open_at is not None and self.in_flight >= self.open_at[0]:
            self.open_at[1].set()
        try:
            if tag in self.gates:
                await self.gates[tag].wait()
            args = {k: v for k, v in tool_input.items() if k != "tag"}
            result: ToolResult = await self.tool.execute(args)
        finally:
            self.in_flight -= 1
            self.log.append(("exit", tag))
        return result


# -- the reported loss ------------------------------------------------------------------------


async def test_twelve_parallel_edits_of_one_file_all_land(work: Path) -> None:
    """The issue's measurement: 12 edits in one reply each replaced a unique string and
    reported success, and 10 were lost. Each now runs after the one before it."""
    target = work / "notes.txt"
    target.write_text("".join(f"line {i}: <OLD-{i}>\n" for i in range(12)))
    calls = [
        call(i, "edit_file", file_path="notes.txt", old_string=f"<OLD-{i}>", new_string=f"NEW-{i}")
        for i in range(12)
    ]

    contents = await run_batch(calls, fs_tools(work))

    assert [json.loads(c)["replacements_made"] for c in contents] == [1] * 12
    assert target.read_text() == "".join(f"line {i}: NEW-{i}\n" for i in range(12))


async def test_twelve_parallel_reads_of_one_file_still_overlap(work: Path) -> None:
    """Readers share: every read is inside ``execute`` at once (the last to enter opens
    the door for all; ordered reads would never get there and fail the deadline)."""
    (work / "big.txt").write_text("x\n" * 100)
    log: list[tuple[str, str]] = []
    read = Recorded(fs_tools(work)["read_file"], log)
    door = anyio.Event()
    read.gates = {str(i): door for i in range(12)}
    read.open_at = (12, door)

    calls = [call(i, "read_file", file_path="big.txt", tag=str(i)) for i in range(12)]
    contents = await run_batch(calls, {"read_file": read})

    assert read.max_in_flight == 12
    assert [kind for kind, _ in log[:12]] == ["enter"] * 12
    assert all(json.loads(c)["total_lines"] == 100 for c in contents)


async def test_two_names_of_one_file_are_one_resource(work: Path) -> None:
    """A symlink and a ``..`` detour name the file the edits really touch."""
    (work / "sub").mkdir()
    real = work / "real.txt"
    real.write_text("".join(f"<OLD-{i}>\n" for i in range(12)))
    (work / "link.txt").symlink_to("real.txt")
    names = ["real.txt", "link.txt", "sub/../real.txt", str(real)]
    tools = fs_tools(work)
    keys = {name: tools["edit_file"].claims({"file_path": name}).writes for name in names}
    assert set(map(frozenset, keys.values())) == {frozenset({str(real)})}

    calls = [
        call(i, "edit_file", file_path=names[i % 4], old_string=f"<OLD-{i}>", new_string=f"N{i}")
        for i in range(12)
    ]
    await run_batch(calls, tools)

    assert real.read_text() == "".join(f"N{i}\n" for i in range(12))
    assert (work / "link.txt").is_symlink()


async def test_writes_to_one_file_end_with_the_last_call(work: Path) -> None:
    calls = [call(i, "write_file", file_path="out.txt", content=f"v{i}") for i in range(10)]
    await run_batch(calls, fs_tools(work))
    assert (work / "out.txt").read_text() == "v9"


async def test_a_read_after_a_write_sees_it_and_one_before_does_not(work: Path) -> None:
    (work / "a.txt").write_text("before\n")
    calls = [
        call(0, "read_file", file_path="a.txt"),
        call(1, "write_file", file_path="a.txt", content="after\n"),
        call(2, "read_file", file_path="a.txt"),
    ]
    contents = await run_batch(calls, fs_tools(work))
    assert "before" in json.loads(contents[0])["content"]
    assert "after" in json.loads(contents[2])["content"]


async def test_a_listing_is_ordered_after_a_write_inside_the_directory(work: Path) -> None:
    """A directory covers what lies under it: the listing sees the new file."""
    calls = [
        call(0, "write_file", file_path="d/new.txt", content="x"),
        call(1, "list_directory", path="d"),
    ]
    contents = await run_batch(calls, fs_tools(work))
    assert [e["name"] for e in json.loads(contents[1])["entries"]] == ["new.txt"]


# -- claims of the built-in tools --------------------------------------------------------------


def test_filesystem_claims_per_operation(work: Path) -> None:
    (work / "a.txt").write_text("x")
    tools = fs_tools(work)
    a = str(work / "a.txt")
    assert tools["read_file"].claims({"file_path": "a.txt"}) == Claims(reads={a})
    assert tools["write_file"].claims({"file_path": "a.txt"}) == Claims(writes={a})
    assert tools["edit_file"].claims({"file_path": "./a.txt"}) == Claims(writes={a})
    assert tools["list_directory"].claims({}) == Claims(reads={str(work)})
    assert tools["glob"].claims({"pattern": "*", "path": ""}) == Claims(reads={str(work)})
    new = str(work / "new" / "b.txt")
    assert tools["write_file"].claims({"file_path": "new/b.txt"}) == Claims(writes={new})


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("read_file", {"file_path": "/etc/passwd"}, Claims(reads={"/etc/passwd"})),
        ("write_file", {"file_path": "../outside.txt"}, Claims(writes={"../outside.txt"})),
        ("read_file", {"file_path": "bad\x00name"}, Claims(reads={"bad\x00name"})),
        ("read_file", {"file_path": 42}, Claims()),
        ("edit_file", {}, Claims()),
        ("glob", {"pattern": "*", "path": ["not", "a", "path"]}, Claims()),
    ],
)
def test_a_path_the_call_will_refuse_is_claimed_as_given(
    work: Path, tool: str, arguments: dict[str, Any], expected: Claims
) -> None:
    assert fs_tools(work)[tool].claims(arguments) == expected


def test_bash_claims_its_working_directory_for_writing_by_default(work: Path) -> None:
    real = os.path.realpath(work)
    assert make_tool(None, {"working_dir": str(work)}).claims({}) == Claims(writes={real})
    reader = make_tool(None, {"working_dir": str(work), "claims": "read"})
    assert reader.claims({}) == Claims(reads={real})
    assert make_tool(None, {"working_dir": str(work), "claims": "none"}).claims({}) == Claims()
    with pytest.raises(ConfigError, match="claims: expected one of write, read, none"):
        BashConfig.from_dict({"claims": "all"})


async def test_bash_calls_run_in_call_order_and_files_under_them_wait(work: Path) -> None:
    """A real subprocess: the first command is slow, yet its line comes first, and the
    read of the file after them sees both lines."""
    bash = make_tool(None, {"working_dir": str(work)})
    tools = {"bash": bash, **fs_tools(work)}
    calls = [
        call(0, "bash", command="sleep 0.2; echo first >> log.txt"),
        call(1, "bash", command="echo second >> log.txt"),
        call(2, "read_file", file_path="log.txt"),
    ]
    contents = await run_batch(calls, tools)
    assert (work / "log.txt").read_text() == "first\nsecond\n"
    assert "second" in json.loads(contents[2])["content"]


@needs("mcp")
def test_mcp_tools_claim_what_the_plan_says() -> None:
    server = mcp_tool.MCPServerConfig.from_dict(
        "servers[0]",
        {
            "name": "db",
            "command": "db-mcp",
            "claims": {
                "query": {"reads": ["db:orders"]},
                "migrate_*": {"writes": ["db:orders", "db:schema"]},
                "*": {"reads": ["db:audit"]},
            },
        },
    )
    assert server.claims_of("query") == Claims(reads={"db:orders", "db:audit"})
    assert server.claims_of("migrate_up") == Claims(
        reads={"db:audit"}, writes={"db:orders", "db:schema"}
    )
    bare = mcp_tool.MCPServerConfig.from_dict("servers[0]", {"name": "x", "command": "x"})
    assert bare.claims_of("anything") is None


@needs("mcp")
@pytest.mark.parametrize(
    ("claims", "message"),
    [
        (["query"], "servers\\[0\\].claims: expected a mapping"),
        ({"query": ["db"]}, "servers\\[0\\].claims.query: expected a mapping"),
        ({"query": {"reeds": ["db"]}}, "servers\\[0\\].claims.query.reeds: unknown key"),
        ({"query": {"writes": "db"}}, "servers\\[0\\].claims.query.writes: expected a list"),
        ({"query": {"writes": [""]}}, "servers\\[0\\].claims.query.writes: a resource"),
    ],
)
def test_mcp_claims_config_errors_name_the_key(claims: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        mcp_tool.MCPServerConfig.from_dict(
            "servers[0]", {"name": "db", "command": "x", "claims": claims}
        )


# -- the value ----------------------------------------------------------------------------------


def test_claims_is_a_public_frozen_value() -> None:
    assert amplifier_anyio.Claims is Claims
    claims = Claims(reads=["/a", "/a"], writes=("k",))
    assert claims == Claims(reads=frozenset({"/a"}), writes={"k"})
    assert Claims() == Claims(reads=frozenset(), writes=frozenset())
    with pytest.raises(ValidationError, match="not one str"):
        Claims(writes="/a")
    with pytest.raises(ValidationError, match="non-empty string"):
        Claims(reads=[""])


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("/w/a.txt", "/w/a.txt", True),
        ("/w", "/w/a.txt", True),
        ("/", "/w/a.txt", True),
        ("/w/a", "/w/ab", False),
        ("db:x", "db:x", True),
        ("db", "db:x", False),
        ("w", "w/a", False),
    ],
)
def test_keys_overlap_when_equal_or_one_path_holds_the_other(a: str, b: str, overlap: bool) -> None:
    assert keys_overlap(a, b) is overlap
    assert keys_overlap(b, a) is overlap


def test_readers_share_and_a_writer_conflicts_both_ways() -> None:
    read, write = Claims(reads={"/f"}), Claims(writes={"/f"})
    assert not conflicts(read, read)
    assert conflicts(read, write)
    assert conflicts(write, read)
    assert conflicts(write, write)
    assert not conflicts(write, Claims(writes={"/g"}))


# -- the batch's invariants ---------------------------------------------------------------------


class Gated:
    """A tool with claims given in its input; a call waits for ``gates[tag]`` if set."""

    name = "gated"

    def __init__(self) -> None:
        self.gates: dict[str, anyio.Event] = {}
        self.log: list[tuple[str, str]] = []

    def claims(self, tool_input: dict[str, Any]) -> Claims:
        return Claims(reads=tool_input.get("reads", ()), writes=tool_input.get("writes", ()))

    async def execute(self, tool_input: dict[str, Any]) -> str:
        tag = tool_input["tag"]
        self.log.append(("enter", tag))
        if tag in self.gates:
            await self.gates[tag].wait()
        self.log.append(("exit", tag))
        return f"done {tag}"


async def test_tool_waiting_says_who_waits_for_whom_and_only_when_it_waits() -> None:
    tool = Gated()
    tool.gates["a"] = anyio.Event()  # opened by c2's tool:waiting: c2 must announce it
    coordinator = MockCoordinator()
    seen: list[dict[str, Any]] = []

    async def on_waiting(_event: str, data: dict[str, Any]) -> None:
        seen.append(data)
        tool.gates["a"].set()

    coordinator.hooks.register(TOOL_WAITING, on_waiting, name="watch")
    calls = [
        call(0, "gated", tag="a", writes=["/w/a.txt"]),
        call(1, "gated", tag="b", reads=["/w/b.txt"]),
        call(2, "gated", tag="c", reads=["/w/a.txt", "/w/b.txt"]),
    ]

    contents = await run_batch(calls, {"gated": tool}, coordinator=coordinator)

    assert contents == ["done a", "done b", "done c"]
    assert len(seen) == 1
    waiting = seen[0]
    assert (waiting["tool_name"], waiting["tool_call_id"], waiting["index"]) == ("gated", "c2", 2)
    assert waiting["waiting_for"] == ["c0"]
    assert waiting["resources"] == ["/w/a.txt", "/w/b.txt"]
    assert tool.log.index(("exit", "a")) < tool.log.index(("enter", "c"))


async def test_a_waiting_call_holds_no_seat_of_the_limiter() -> None:
    """Two seats: c0 runs until c2 has run; c1 waits for c0. Had c1 kept its seat, c2
    could never run and c0 never finish."""
    tool = Gated()
    tool.gates["a"] = anyio.Event()

    class Opener(Gated):
        name = "opener"

        async def execute(self, tool_input: dict[str, Any]) -> str:
            tool.gates["a"].set()
            return "opened"

    calls = [
        call(0, "gated", tag="a", writes=["k"]),
        call(1, "gated", tag="b", writes=["k"]),
        call(2, "opener", tag="c", reads=["other"]),
    ]
    config = ToolBatchConfig(max_parallel_tools=2)
    contents = await run_batch(calls, {"gated": tool, "opener": Opener()}, config=config)
    assert contents == ["done a", "done b", "opened"]


async def test_claims_follow_the_input_a_tool_pre_hook_leaves(work: Path) -> None:
    """A hook sends c1 to the file c0 edits: c1 waits for c0 (its claim is the path that
    runs, not the one the model asked for) and both edits land."""
    (work / "a.txt").write_text("ONE TWO\n")
    (work / "b.txt").write_text("untouched\n")
    log: list[tuple[str, str]] = []
    edit = Recorded(fs_tools(work)["edit_file"], log)
    edit.gates["0"] = anyio.Event()
    coordinator = MockCoordinator()

    async def redirect(_event: str, data: dict[str, Any]) -> HookResult:
        tool_input = data["tool_input"]
        if tool_input["tag"] == "1":
            return HookResult(
                action="modify", data={"tool_input": {**tool_input, "file_path": "a.txt"}}
            )
        return HookResult()

    async def on_waiting(_event: str, data: dict[str, Any]) -> None:
        assert data["waiting_for"] == ["c0"]
        edit.gates["0"].set()

    coordinator.hooks.register(TOOL_PRE, redirect, name="redirect")
    coordinator.hooks.register(TOOL_WAITING, on_waiting, name="watch")
    calls = [
        call(0, "edit_file", file_path="a.txt", old_string="ONE", new_string="1", tag="0"),
        call(1, "edit_file", file_path="b.txt", old_string="TWO", new_string="2", tag="1"),
    ]
    await run_batch(calls, {"edit_file": edit}, coordinator=coordinator)

    assert (work / "a.txt").read_text() == "1 2\n"
    assert (work / "b.txt").read_text() == "untouched\n"


async def test_a_failing_claims_is_that_calls_error_and_nobody_elses() -> None:
    tool = Gated()

    class Broken(Gated):
        name = "broken"

        def claims(self, tool_input: dict[str, Any]) -> Claims:
            if tool_input["tag"] == "x":
                raise RuntimeError("no idea what I touch")
            return "everything"  # type: ignore[return-value]

    calls = [
        call(0, "gated", tag="a", writes=["k"]),
        call(1, "broken", tag="x"),
        call(2, "broken", tag="y"),
        call(3, "gated", tag="b", writes=["k"]),
    ]
    contents = await run_batch(calls, {"gated": tool, "broken": Broken()})
    assert contents[0] == "done a"
    assert contents[3] == "done b"
    assert (
        contents[1] == "Error: claims() of tool 'broken' failed: RuntimeError: no idea what I touch"
    )
    assert contents[2] == "Error: claims() of tool 'broken' returned str, not Claims"
    assert ("enter", "x") not in tool.log


async def test_a_cancel_answers_the_waiting_calls_and_the_next_batch_runs(work: Path) -> None:
    (work / "a.txt").write_text("OLD-0 OLD-1 OLD-2\n")
    log: list[tuple[str, str]] = []
    edit = Recorded(fs_tools(work)["edit_file"], log)
    edit.gates["0"] = anyio.Event()  # never opened: the batch is cancelled instead
    coordinator = MockCoordinator()
    context = MockContextManager()
    waiting: list[str] = []

    async def on_waiting(_event: str, data: dict[str, Any]) -> None:
        waiting.append(data["tool_call_id"])
        if len(waiting) == 2:
            scope.cancel()

    coordinator.hooks.register(TOOL_WAITING, on_waiting, name="watch")
    calls = [
        call(
            i, "edit_file", file_path="a.txt", old_string=f"OLD-{i}", new_string=f"N{i}", tag=str(i)
        )
        for i in range(3)
    ]
    batch = ToolBatch(
        calls=calls, tools={"edit_file": edit}, hooks=coordinator.hooks, coordinator=coordinator
    )
    with anyio.fail_after(DEADLOCK), anyio.CancelScope() as scope:
        await batch.run(context, assistant(calls))

    assert scope.cancelled_caught
    assert sorted(waiting) == ["c1", "c2"]
    results = [json.loads(m["content"]) for m in context.messages if m["role"] == "tool"]
    assert [r.get("cancelled") for r in results] == [True, True, True]
    assert (work / "a.txt").read_text() == "OLD-0 OLD-1 OLD-2\n"

    again = await run_batch(calls[1:], {"edit_file": fs_tools(work)["edit_file"]})
    assert all(json.loads(c)["replacements_made"] == 1 for c in again)
    assert (work / "a.txt").read_text() == "OLD-0 N1 N2\n"


async def test_a_sequential_batch_and_a_lone_call_never_ask_for_claims() -> None:
    """Nothing to order: no claims() call, no thread hop."""

    class Counting(Gated):
        asked = 0

        def claims(self, tool_input: dict[str, Any]) -> Claims:
            Counting.asked += 1
            return super().claims(tool_input)

    tool = Counting()
    calls = [call(i, "gated", tag=str(i), writes=["k"]) for i in range(3)]
    await run_batch(calls[:1], {"gated": tool})
    await run_batch(calls, {"gated": tool}, config=ToolBatchConfig(parallel=False))
    assert Counting.asked == 0
    await run_batch(calls, {"gated": tool})
    assert Counting.asked == 3
