"""Contract checks a module author runs in their own CI, on asyncio and trio.

Each check is an async function that exercises a module through the seam a session uses
and raises `ConformanceError` (an ``AssertionError``) whose
message starts with the broken rule's name (``tool.cancellation: ...``):

- `check_tool` — name, description and schema as providers need them; ``execute``
  answers a sample input with a result whose output serialises; it lets a cancellation
  through wherever it strikes (``tool.cancellation``); a bad input is answered, not hung on;
- `check_provider` — identity and models; ``complete`` answers with a
  `ChatResponse`, leaves the request untouched, lets a cancellation through wherever it
  strikes (and so does a stream); tool calls have unique ids, and ``parse_tool_calls``
  gives back every call of a response, once, in order; an ``open_stream()`` ends with its
  response and its text deltas add up to the response's text;
- `check_context` — what is added comes back, in order, as copies; ``set_messages``
  and ``clear`` do what they say; the request view keeps system messages and never
  separates a tool call from its result, whatever the budget; each method lets a
  cancellation through wherever it strikes;
- `check_hook` — a hook module's ``mount`` registers handlers that answer typical
  payloads of their events with a valid verdict, in time, and let a cancellation through
  wherever it strikes; its cleanup removes them;
- `check_orchestrator` — a turn with parallel tool calls (DESIGN §6): the answer is
  returned, exactly one ``orchestrator:complete`` and one ``execution:end`` and nothing
  after them, every call answered right after its assistant message in call order, the
  order independent of tool timing; an immediate cancel mid-batch keeps a finished call's
  result, gives the unfinished one the fixed cancelled result and leaves nothing running;
  a turn cancelled from outside wherever it strikes ends with the cancellation.

"Wherever it strikes": the module's call (a tool's ``execute``, a provider's
``complete``, a context's method, a hook handler, an orchestrator's ``execute``) is
cancelled before it starts, then at each of its suspension points in turn (checkpoint k
for k = 1…N, N counted by a run left alone; past 200, the first and last fifty and an even
spread) — a module that swallows the cancellation at its third checkpoint fails as one
that swallows it at its first. Every ``*.cancellation`` rule is one helper, run on each
module's own call.

The checks use real stand-ins from the test kit (a real coordinator and hook registry, a
scripted provider); they need no network and no hypothesis.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.lowlevel

from ..errors import ConformanceError, LLMError
from ..events import EXECUTION_END, ORCHESTRATOR_COMPLETE
from ..kernel._foreign import chat_response_of, hook_result_of, tool_result_of
from ..kernel._hooks import _is_async
from ..kernel._services import ServiceGroup
from ..models import (
    HOOK_ACTIONS,
    ChatRequest,
    ChatResponse,
    HookResult,
    Message,
    ModelInfo,
    ProviderInfo,
    TextBlock,
    ToolCall,
    ToolCallBlock,
    ToolResult,
    Usage,
    unstructure,
)
from ..providers.scripted import ScriptedProvider
from ..runtime._cassette import _number_call_ids
from ..runtime._streaming import stream_opener
from ._kit import EventRecorder, MockContextManager, MockCoordinator

__all__ = (
    "ConformanceError",
    "check_tool",
    "check_provider",
    "check_context",
    "check_hook",
    "check_orchestrator",
)

_TIMEOUT = 10.0  # seconds any one call of a module may take in a check
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the providers' APIs accept


def _require(condition: object, rule: str, problem: str) -> None:
    if not condition:
        raise ConformanceError(rule, problem)


async def _bounded(rule: str, what: str, work: Callable[[], Awaitable[Any]]) -> Any:
    """``await work()`` under the checks' time limit; a hang breaks ``rule``."""
    with anyio.move_on_after(_TIMEOUT):
        return await work()
    raise ConformanceError(rule, f"{what} did not finish within {_TIMEOUT} s")


async def _call(function: Any, *args: Any) -> Any:
    """A module's function, sync (in a worker thread, as the runtime runs it) or async."""
    if inspect.iscoroutinefunction(function):
        return await function(*args)
    result = await anyio.to_thread.run_sync(function, *args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _call_inline(function: Any, *args: Any) -> Any:
    """A cleanup (or an ``inline`` hook handler), called as the runtime calls it: on the
    loop, its answer awaited when it is awaitable."""
    await anyio.lowlevel.checkpoint()
    return await _answer(function, *args)


async def _answer(function: Any, *args: Any) -> Any:
    """``function(*args)``, awaited when it answers an awaitable (no checkpoint of its own)."""
    result = function(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _lets_cancellation_through(
    rule: str, what: str, work: Callable[[], Any], *, must_checkpoint: bool = True
) -> None:
    """``work()`` must end with the cancellation wherever it is cancelled: started in a
    cancelled scope (an async function checkpoints), and cancelled at each of its
    suspension points in turn — the k-th for k = 1…N, N counted by a run left alone — for
    nothing may swallow the backend's cancellation, at its first checkpoint or its last.

    Every check's ``*.cancellation`` rule is this one helper. ``must_checkpoint=False``
    lets ``work()`` finish without ever suspending (a hook handler or an in-memory
    context that does no I/O need not checkpoint); what it must not do is swallow a
    cancellation it was given."""
    with anyio.CancelScope() as scope:
        scope.cancel(f"conformance {rule}: started cancelled")
        started = _Suspensions(work(), cancel_at=None)
        try:
            await started.run()
        except Exception as exc:
            raise ConformanceError(
                rule, f"{what} raised {type(exc).__name__} instead of the cancellation"
            ) from exc
    _require(
        scope.cancelled_caught or (not must_checkpoint and started.count == 0),
        rule,
        f"{what} returned inside a cancelled scope: it never checkpointed, or it "
        "swallowed the cancellation",
    )
    counted = _Suspensions(work(), cancel_at=None)
    await _bounded(rule, what, counted.run)
    total = counted.count
    for k in _cancel_points(total):
        probe = _Suspensions(work(), cancel_at=k)
        with anyio.CancelScope() as probe.scope:
            try:
                await _bounded(rule, what, probe.run)
            except ConformanceError:
                raise
            except Exception as exc:
                raise ConformanceError(
                    rule,
                    f"{what} cancelled at checkpoint {k} of {total} raised "
                    f"{type(exc).__name__} instead of the cancellation",
                ) from exc
        _require(
            probe.scope.cancelled_caught or not probe.delivered,
            rule,
            f"{what} cancelled at checkpoint {k} of {total} returned: it swallowed the "
            "cancellation",
        )


_MOST_CANCEL_POINTS = 200


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _cancel_points(total: int) -> list[int]:
    """1…total; past `_MOST_CANCEL_POINTS` the first and last ones and an even spread."""
    if total <= _MOST_CANCEL_POINTS:
        return list(range(1, total + 1))
    half = _MOST_CANCEL_POINTS // 4
    spread = range(1, total + 1, max(1, total // (_MOST_CANCEL_POINTS // 2)))
    return sorted({*range(1, half + 1), *spread, *range(total - half + 1, total + 1)})


class _Suspensions:
    """Runs a coroutine, counting the times it suspends (yields to the event loop: every
    checkpoint and every wait); with ``cancel_at`` k, cancels ``scope`` as the coroutine
    suspends for the k-th time, so the cancellation reaches it exactly there.

    ``delivered``: the backend's cancellation was thrown into the coroutine (not so when
    it was in a shielded wait — a worker thread's — that then ran to its end; a call that
    finishes without another checkpoint has not swallowed what it never got)."""

    def __init__(self, awaitable: Any, *, cancel_at: int | None) -> None:
        self.coroutine = awaitable if inspect.iscoroutine(awaitable) else _awaited(awaitable)
        self.cancel_at = cancel_at
        self.count = 0
        self.cancelled = False
        self.delivered = False
        self.scope: anyio.CancelScope | None = None

    async def run(self) -> Any:
        return await self

    def __await__(self) -> Any:
        coroutine = self.coroutine
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                yielded = coroutine.send(value) if error is None else coroutine.throw(error)
            except StopIteration as stop:
                return stop.value
            self.count += 1
            if self.count == self.cancel_at and self.scope is not None:
                self.cancelled = True
                self.scope.cancel(f"conformance: cancelled at suspension point {self.count}")
            try:
                value, error = (yield yielded), None
                # trio resumes a task with an outcome: an Error carries the cancellation
                if self.cancelled and isinstance(
                    getattr(value, "error", None), anyio.get_cancelled_exc_class()
                ):
                    self.delivered = True
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to the coroutine, as await does
                value, error = None, exc
                if self.cancelled and isinstance(exc, anyio.get_cancelled_exc_class()):
                    self.delivered = True


# -- tools ----------------------------------------------------------------------------------


async def check_tool(tool: Any, sample_input: Mapping[str, Any] | None = None) -> None:
    """Check a tool against the tool contract, with ``sample_input`` as a valid input.

    Rules: ``tool.name`` (a string of letters, digits, ``_`` and ``-``, at most 64, as the
    providers' APIs accept), ``tool.description`` (non-empty text), ``tool.schema``
    (``input_schema`` a JSON object schema), ``tool.result`` (``execute`` returns a
    `ToolResult`, or a value the runtime converts, within
    10 s), ``tool.output`` (its output serialises), ``tool.cancellation`` (an async
    ``execute`` lets a cancellation through at every checkpoint), ``tool.bad_input`` (an
    input without the
    schema's required keys is answered — an error result or an exception — not hung on).
    """
    name, schema, execute = _tool_shape(tool)
    tool_input = dict(sample_input or {})
    await _check_tool_result(name, execute, tool_input)
    if inspect.iscoroutinefunction(execute):
        await _lets_cancellation_through(
            "tool.cancellation", "execute", lambda: execute(dict(tool_input))
        )
    required = schema.get("required") or ()
    if required:
        try:
            await _bounded("tool.bad_input", "execute({})", lambda: _call(execute, {}))
        except ConformanceError:
            raise
        except Exception:  # noqa: BLE001, S110 - an exception is an answer: the batch reports it
            pass


def _tool_shape(tool: Any) -> tuple[str, Mapping[str, Any], Callable[..., Any]]:
    """The rules ``tool.name``, ``tool.description`` and ``tool.schema``; the tool's
    name, input schema and ``execute``."""
    name = getattr(tool, "name", None)
    _require(
        isinstance(name, str) and _TOOL_NAME.match(name),
        "tool.name",
        f"expected 1-64 letters, digits, '_' or '-', got {name!r}",
    )
    description = getattr(tool, "description", None)
    _require(
        isinstance(description, str) and description.strip(),
        "tool.description",
        f"expected a non-empty string, got {description!r}",
    )
    schema = getattr(tool, "input_schema", None)
    _require(
        isinstance(schema, Mapping) and schema.get("type") == "object",
        "tool.schema",
        f'input_schema must be a JSON schema with "type": "object", got {schema!r}',
    )
    assert isinstance(name, str)
    assert isinstance(schema, Mapping)
    try:
        json.dumps(schema)
    except (TypeError, ValueError) as exc:
        raise ConformanceError("tool.schema", f"input_schema is not JSON: {exc}") from exc
    execute = getattr(tool, "execute", None)
    _require(callable(execute), "tool.result", "the tool has no execute()")
    assert execute is not None
    return name, schema, execute


async def _check_tool_result(
    name: str, execute: Callable[..., Any], tool_input: dict[str, Any]
) -> None:
    """The rules ``tool.result`` and ``tool.output`` on the sample input."""
    try:
        value = await _bounded("tool.result", "execute", lambda: _call(execute, tool_input))
    except ConformanceError:
        raise
    except Exception as exc:
        raise ConformanceError(
            "tool.result", f"execute raised {type(exc).__name__}: {exc} on the sample input"
        ) from exc
    try:
        result = tool_result_of(value, origin=f"tool {name!r}")
    except Exception as exc:
        raise ConformanceError("tool.result", f"execute returned {value!r}: {exc}") from exc
    try:
        output = result.get_serialized_output()
    except Exception as exc:
        raise ConformanceError("tool.output", f"the output does not serialise: {exc}") from exc
    _require(isinstance(output, str), "tool.output", f"serialised to {type(output).__name__}")


# -- providers ------------------------------------------------------------------------------


_HELLO = ChatRequest(messages=[Message(role="user", content="Say hello.")])


async def check_provider(provider: Any, request: ChatRequest | None = None) -> None:
    """Check a provider against the provider contract with ``request`` (default: one user
    message); a provider that needs a server must be pointed at one.

    Rules: ``provider.name``, ``provider.info`` (``get_info()`` a ProviderInfo; its
    ``context_window`` / ``max_output_tokens`` defaults whole numbers), ``provider.models``
    (``list_models()`` a list of ModelInfo; an LLMError — the server refused — is let
    be), ``provider.complete`` (a ChatResponse, or a value the runtime converts, within
    10 s), ``provider.request_untouched``,
    ``provider.tool_calls`` (``parse_tool_calls`` gives ToolCalls with unique non-empty
    ids, and for a response of three calls exactly those three, in order: none dropped,
    duplicated or reordered), ``provider.cancellation`` (``complete``, and a stream
    consumed whole, let a cancellation through at every checkpoint) and, when it
    streams (``open_stream()``, or ``stream()`` of the same shape), ``provider.stream``
    (event dicts with a ``type``, the last and only the last one the ``response``, text
    deltas adding up to the response's text).
    """
    request = request or _HELLO
    _check_provider_info(provider)
    await _check_models(provider)
    response = await _checked_complete(provider, request)
    _check_tool_calls(provider, response)
    _check_parsed_calls(provider)
    await _lets_cancellation_through(
        "provider.cancellation", "complete()", lambda: provider.complete(request)
    )
    stream = stream_opener(provider)
    if stream is not None:
        await _bounded("provider.stream", "open_stream()", lambda: _check_stream(stream, request))

        async def consume() -> None:
            async with stream(request) as iterator:
                async for _ in iterator:
                    pass

        await _lets_cancellation_through("provider.cancellation", "open_stream()", consume)


def _check_provider_info(provider: Any) -> None:
    """The rules ``provider.name`` and ``provider.info``."""
    name = getattr(provider, "name", None)
    _require(isinstance(name, str) and name, "provider.name", f"got {name!r}")
    info = provider.get_info()
    _require(isinstance(info, ProviderInfo), "provider.info", f"get_info() gave {info!r}")
    for key in ("context_window", "max_output_tokens"):
        value = info.defaults.get(key)
        _require(
            value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0),
            "provider.info",
            f"defaults[{key!r}] must be a positive whole number, got {value!r}",
        )


async def _check_models(provider: Any) -> None:
    """The rule ``provider.models`` (a server that refuses ``/models`` is let be)."""
    try:
        models = await _bounded("provider.models", "list_models()", provider.list_models)
    except LLMError:
        models = []  # the server refused (a compatible server without /models): not the module
    _require(
        isinstance(models, list) and all(isinstance(m, ModelInfo) for m in models),
        "provider.models",
        f"list_models() gave {models!r}",
    )


async def _checked_complete(provider: Any, request: ChatRequest) -> ChatResponse:
    """The rules ``provider.complete`` and ``provider.request_untouched``: the response."""
    before = unstructure(request)
    try:
        value = await _bounded(
            "provider.complete", "complete()", lambda: provider.complete(request)
        )
    except ConformanceError:
        raise
    except Exception as exc:
        raise ConformanceError(
            "provider.complete", f"complete() raised {type(exc).__name__}: {exc}"
        ) from exc
    try:
        response = chat_response_of(value, origin=f"provider {provider.name!r}")
    except Exception as exc:
        raise ConformanceError("provider.complete", f"complete() gave {value!r}: {exc}") from exc
    _require(
        unstructure(request) == before,
        "provider.request_untouched",
        "complete() changed the request it was given",
    )
    return response


_CALLS = (
    ToolCall(id="call_1", name="probe", arguments={"n": 1}),
    ToolCall(id="call_2", name="probe", arguments={"n": 2}),
    ToolCall(id="call_3", name="lookup", arguments={"q": "three"}),
)
"""Three calls, two of one tool: what `provider.tool_calls` hands ``parse_tool_calls``."""


def _check_parsed_calls(provider: Any) -> None:
    """``parse_tool_calls`` gives back a response's calls: every one, once, in order."""
    response = ChatResponse(
        content=[ToolCallBlock(id=c.id, name=c.name, input=dict(c.arguments)) for c in _CALLS],
        tool_calls=list(_CALLS),
        finish_reason="tool_calls",
    )
    try:
        calls = provider.parse_tool_calls(response)
    except Exception as exc:
        raise ConformanceError(
            "provider.tool_calls", f"parse_tool_calls() raised {type(exc).__name__}: {exc}"
        ) from exc
    _require(
        isinstance(calls, list) and all(isinstance(c, ToolCall) for c in calls),
        "provider.tool_calls",
        f"parse_tool_calls() gave {calls!r}",
    )
    given = [(c.id, c.name, c.arguments) for c in _CALLS]
    parsed = [(c.id, c.name, c.arguments) for c in calls]
    if parsed == given:
        return
    ids = [c[0] for c in given]
    got = [c[0] for c in parsed]
    if sorted(got) == sorted(ids):
        problem = f"reordered the calls: gave {got}, the response has {ids}"
    elif len(set(got)) < len(got):
        problem = f"duplicated a call: gave {got}, the response has {ids}"
    elif set(got) < set(ids):
        problem = f"dropped a call: gave {got}, the response has {ids}"
    else:
        problem = f"gave {parsed!r}, the response has {given!r}"
    raise ConformanceError("provider.tool_calls", f"parse_tool_calls() {problem}")


def _check_tool_calls(provider: Any, response: ChatResponse) -> None:
    calls = provider.parse_tool_calls(response)
    _require(
        isinstance(calls, list) and all(isinstance(c, ToolCall) for c in calls),
        "provider.tool_calls",
        f"parse_tool_calls() gave {calls!r}",
    )
    ids = [c.id for c in calls]
    _require(
        all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids),
        "provider.tool_calls",
        f"tool call ids must be unique non-empty strings, got {ids!r}",
    )


async def _check_stream(stream: Any, request: ChatRequest) -> None:
    async with stream(request) as iterator:
        events: list[Any] = [event async for event in iterator]
    _require(events, "provider.stream", "the stream gave no event")
    for index, event in enumerate(events):
        _require(
            isinstance(event, dict) and isinstance(event.get("type"), str),
            "provider.stream",
            f"event {index} is not a dict with a type: {event!r}",
        )
    kinds = [event["type"] for event in events]
    _require(
        kinds[-1] == "response" and kinds.count("response") == 1,
        "provider.stream",
        f"the last event, and only it, must be the response; got types {kinds}",
    )
    response = chat_response_of(events[-1].get("response"), origin="stream")
    deltas = "".join(
        str(e.get("delta", ""))
        for e in events
        if e["type"] == "content_block:delta" and e.get("block_type") == "text"
    )
    text = "".join(b.text for b in response.content if isinstance(b, TextBlock))
    _require(
        deltas == text,
        "provider.stream",
        f"the text deltas add up to {deltas[:80]!r}, the response says {text[:80]!r}",
    )


# -- contexts -------------------------------------------------------------------------------


def _conversation() -> list[dict[str, Any]]:
    calls = [
        {"id": "call_a", "name": "probe", "arguments": {"n": 1}},
        {"id": "call_b", "name": "probe", "arguments": {"n": 2}},
    ]
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Probe twice. " + "x " * 400},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_a", "content": "one " * 200},
        {"role": "tool", "tool_call_id": "call_b", "content": "two " * 200},
        {"role": "assistant", "content": "Done: one and two."},
        {"role": "user", "content": "Thanks."},
    ]


def _contains(stored: Mapping[str, Any], added: Mapping[str, Any]) -> bool:
    """A stored message keeps every field it was given (a context may add its own)."""
    return all(stored.get(key) == value for key, value in added.items())


async def check_context(context: Any) -> None:
    """Check an empty context manager against the context contract (it is cleared first).

    Rules: ``context.round_trip`` (what ``add_message`` took, ``get_messages`` gives
    back, in order, every field kept), ``context.copies`` (changing what was returned
    changes nothing stored), ``context.set_messages``, ``context.clear``,
    ``context.request_view`` (``get_messages_for_request`` keeps every system message
    and answers each assistant tool call right after it, in call order — with no budget
    and with a budget too small for the whole history), ``context.cancellation``
    (``add_message``, ``get_messages``, ``get_messages_for_request``, ``set_messages``
    and ``clear`` each let a cancellation through at every checkpoint). The context is
    cleared again at the end.
    """
    await _bounded("context.clear", "clear()", context.clear)
    conversation = _conversation()
    for message in conversation:
        await context.add_message(copy.deepcopy(message))
    stored = await context.get_messages()
    _require(
        len(stored) == len(conversation)
        and all(_contains(s, m) for s, m in zip(stored, conversation, strict=True)),
        "context.round_trip",
        f"added {len(conversation)} messages, got back {stored!r:.300}",
    )
    stored[0]["content"] = "CHANGED"
    stored.append({"role": "user", "content": "CHANGED"})
    again = await context.get_messages()
    _require(
        len(again) == len(conversation) and again[0]["content"] == conversation[0]["content"],
        "context.copies",
        "changing the list get_messages() returned changed the stored history",
    )
    for budget in (None, 300):
        view = await context.get_messages_for_request(token_budget=budget)
        _check_view(view, budget)
    replacement = conversation[:2]
    await context.set_messages(copy.deepcopy(replacement))
    replaced = await context.get_messages()
    _require(
        len(replaced) == 2
        and all(_contains(s, m) for s, m in zip(replaced, replacement, strict=True)),
        "context.set_messages",
        f"after set_messages of 2 messages, got {replaced!r:.300}",
    )
    await context.clear()
    _require(await context.get_messages() == [], "context.clear", "messages remain after clear()")
    await _context_cancellation(context, conversation)
    await context.clear()


async def _context_cancellation(context: Any, conversation: list[dict[str, Any]]) -> None:
    """``context.cancellation``: each method lets a cancellation through at every
    checkpoint (one that never suspends, an in-memory one, passes)."""
    message = conversation[1]
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("add_message()", lambda: context.add_message(copy.deepcopy(message))),
        ("get_messages()", context.get_messages),
        ("get_messages_for_request()", lambda: context.get_messages_for_request(token_budget=300)),
        ("set_messages()", lambda: context.set_messages(copy.deepcopy(conversation))),
        ("clear()", context.clear),
    ]
    for what, work in calls:
        await _lets_cancellation_through("context.cancellation", what, work, must_checkpoint=False)


def _check_view(view: Any, budget: int | None) -> None:
    where = "with no budget" if budget is None else f"with a budget of {budget} tokens"
    _require(isinstance(view, list), "context.request_view", f"{where}: not a list: {view!r:.200}")
    systems = [m for m in view if m.get("role") == "system" and "terse" in str(m.get("content"))]
    _require(systems, "context.request_view", f"{where}: the system message was dropped")
    _pairing(view, "context.request_view", f"{where}: ")
    answered = [m.get("tool_call_id") for m in view if m.get("role") == "tool"]
    called = {c.get("id") for m in view for c in (m.get("tool_calls") or ())}
    orphans = [i for i in answered if i not in called]
    _require(not orphans, "context.request_view", f"{where}: results without their call: {orphans}")


# -- hooks ----------------------------------------------------------------------------------

_PAYLOAD: dict[str, Any] = {
    "session_id": "conformance",
    "trace_id": "conformance-trace",
    "prompt": "Probe twice.",
    "provider": "scripted",
    "iteration": 0,
    "tool_name": "probe",
    "tool_call_id": "call_a",
    "tool_input": {"n": 1},
    "parallel_group_id": "group",
    "index": 0,
    "result": {"success": True, "output": "one"},
    "available_tools": ["probe"],
    "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    "tool_calls": 0,
    "response": "Done.",
    "response_preview": "Done.",
    "length": 5,
    "status": "completed",
    "orchestrator": "loop-basic",
    "turn_count": 1,
}
"""The typical payload handed to a hook under check (a superset of every event's keys)."""


async def check_hook(
    mount: Callable[..., Awaitable[Any]],
    config: Mapping[str, Any] | None = None,
    *,
    payload: Mapping[str, Any] | None = None,
) -> None:
    """Check a hook module: ``await mount(coordinator, config)`` on a real coordinator
    (with module services running), then each handler it registered is called with a
    typical payload of its event (``payload`` adds or replaces keys).

    Rules: ``hook.registers`` (at least one handler), ``hook.verdict`` (each answers None,
    a HookResult or a dict / upstream result with a valid ``action``, and does not
    raise), ``hook.timely`` (within 10 s), ``hook.cancellation`` (a handler that runs on
    the loop lets a cancellation through at every checkpoint; one that never suspends
    passes), ``hook.cleanup`` (the cleanup ``mount`` returned removes every handler it
    registered).
    """
    coordinator = MockCoordinator()
    hooks = coordinator.hooks
    before = hooks.list_handlers()
    registered: list[tuple[str, Any, bool]] = []
    register = hooks.register

    def capture(
        event: str, handler: Any, priority: int = 0, name: str | None = None, **options: Any
    ) -> Any:
        inline = options.get("inline")
        blocking = bool(options.get("blocking")) or inline is False
        registered.append((event, handler, blocking))
        return register(event, handler, priority, name, **options)

    hooks.register = capture  # type: ignore[method-assign]
    failure: Exception | None = None
    async with anyio.create_task_group() as group:
        coordinator._bind_services(ServiceGroup(group))
        try:
            cleanup = await _bounded(
                "hook.timely", "mount()", lambda: mount(coordinator, dict(config or {}))
            )
            hooks.register = register  # type: ignore[method-assign]
            _require(registered, "hook.registers", "mount() registered no handler")
            data = {**_PAYLOAD, **(payload or {})}
            for event, handler, blocking in registered:
                await _check_handler(event, handler, data, blocking=blocking)
            if callable(cleanup):
                await _call_inline(cleanup)
                left = {
                    event: names
                    for event, names in hooks.list_handlers().items()
                    if names != before.get(event, [])
                }
                _require(not left, "hook.cleanup", f"handlers left after the cleanup: {left}")
        except Exception as exc:  # noqa: BLE001 - raised below, never from inside the group
            failure = exc
        finally:
            hooks.register = register  # type: ignore[method-assign]
            with anyio.CancelScope(shield=True):
                await coordinator.cleanup()
            group.cancel_scope.cancel("conformance: hook check over")
    if failure is not None:
        raise failure


async def _check_handler(event: str, handler: Any, data: dict[str, Any], *, blocking: bool) -> None:
    what = f"the handler of {event!r}"
    payload = {**data, "event": event}
    # As the registry runs it: a plain handler on the loop unless registered ``blocking``.
    call = _call if blocking and not _is_async(handler) else _call_inline
    try:
        answer = await _bounded("hook.timely", what, lambda: call(handler, event, payload))
    except ConformanceError:
        raise
    except Exception as exc:
        raise ConformanceError(
            "hook.verdict", f"{what} raised {type(exc).__name__}: {exc}"
        ) from exc
    if answer is not None and not isinstance(answer, HookResult):
        try:
            verdict = hook_result_of(answer, origin=what)
        except Exception as exc:
            raise ConformanceError("hook.verdict", f"{what} answered {answer!r}: {exc}") from exc
        _require(
            verdict is not None and verdict.action in HOOK_ACTIONS,
            "hook.verdict",
            f"{what} answered {answer!r}, not a verdict",
        )
    if call is _call_inline:  # on the loop: a cancel reaches it at its checkpoints
        await _lets_cancellation_through(
            "hook.cancellation",
            what,
            lambda: _answer(handler, event, dict(payload)),
            must_checkpoint=False,
        )


# -- orchestrators --------------------------------------------------------------------------

_CANCELLED = "Tool execution was cancelled"


class _Probe:
    """The tool of the orchestrator checks: answers ``probe(n)``; ``{"hang": true}`` waits
    until cancelled, after the other calls of its batch have answered."""

    name = "probe"
    description = "Answers with its input; the conformance checks' tool."
    input_schema: dict[str, Any] = {  # noqa: RUF012 - read only
        "type": "object",
        "properties": {"n": {"type": "integer"}, "hang": {"type": "boolean"}},
    }

    def __init__(self, delays: Mapping[int, float] | None = None) -> None:
        self.delays = dict(delays or {})
        self.running = 0
        self.answered = anyio.Event()
        self.hanging = anyio.Event()

    async def execute(self, input: dict[str, Any]) -> ToolResult:
        self.running += 1
        try:
            if input.get("hang"):
                await self.answered.wait()
                self.hanging.set()
                await anyio.sleep_forever()
            await anyio.sleep(self.delays.get(int(input.get("n", 0)), 0))
            self.answered.set()
            return ToolResult(output=f"probe({input.get('n')})")
        finally:
            self.running -= 1


def _script(calls: list[dict[str, Any]], answer: str) -> Callable[[ChatRequest], ChatResponse]:
    """The model of the orchestrator checks: asks for ``calls`` at once (a JSON plan when
    asked to plan, as loop-lifecycle does), then answers with ``answer``."""

    def reply(request: ChatRequest) -> ChatResponse:
        last = request.messages[-1]
        content = str(unstructure(last.content))
        if "lifecycle-plan" in content:
            steps = [{"id": f"s{c['n']}", "tool": "probe", "input": c} for c in calls]
            return ChatResponse(content=[TextBlock(text=json.dumps(steps))])
        if any(m.role == "tool" for m in request.messages) or not request.tools:
            return ChatResponse(
                content=[TextBlock(text=answer)],
                usage=Usage(input_tokens=1, output_tokens=1),
                finish_reason="stop",
            )
        tool_calls = [ToolCall(id=f"call_{c['n']}", name="probe", arguments=c) for c in calls]
        return ChatResponse(
            content=[ToolCallBlock(id=c.id, name=c.name, input=c.arguments) for c in tool_calls],
            tool_calls=tool_calls,
            finish_reason="tool_calls",
        )

    return reply


async def _one_turn(
    orchestrator: Any,
    calls: list[dict[str, Any]],
    probe: _Probe,
    *,
    cancel: bool = False,
) -> tuple[Any, list[dict[str, Any]], list[str]]:
    """One turn as a session runs it; the answer, the context, the event names."""
    coordinator = MockCoordinator()
    context = MockContextManager()
    recorder = EventRecorder()
    recorder.attach(coordinator.hooks)
    answer: Any = None
    async with anyio.create_task_group() as group:
        if cancel:

            async def cancel_when_hanging() -> None:
                await probe.hanging.wait()
                await coordinator.request_cancel(immediate=True)

            group.start_soon(cancel_when_hanging)
        with anyio.fail_after(_TIMEOUT):
            answer = await _execute(orchestrator, calls, probe, coordinator, context)
        group.cancel_scope.cancel("conformance: orchestrator probe over")
    return answer, context.messages, recorder.names()


async def _execute(
    orchestrator: Any,
    calls: list[dict[str, Any]],
    probe: _Probe,
    coordinator: MockCoordinator,
    context: MockContextManager,
) -> Any:
    """``execute`` as a session calls it (mounted, a turn begun, its cancel scope bound
    to the turn's token); its answer."""
    providers = {"scripted": ScriptedProvider(_script(calls, "All probed."))}
    await coordinator.mount("orchestrator", orchestrator)
    await coordinator.mount("context", context)
    token = coordinator.begin_turn()
    with anyio.CancelScope() as scope, token.bind_scope(scope):
        return await orchestrator.execute(
            "Probe them.",
            context,
            providers,
            {"probe": probe},
            coordinator.hooks,
            coordinator=coordinator,
        )


async def _cancelled_turn(orchestrator: Any) -> Any:
    """A turn of two parallel calls for `orchestrator.cancellation` (a fresh coordinator
    and context each time); no tool may still run when it ends, however it ends."""
    probe = _Probe()
    try:
        return await _execute(
            orchestrator, [{"n": 1}, {"n": 2}], probe, MockCoordinator(), MockContextManager()
        )
    finally:
        _require(probe.running == 0, "orchestrator.no_leaks", "a tool was still running")


def _pairing(messages: list[dict[str, Any]], check: str, where: str = "") -> None:
    """Every assistant message's tool calls are answered right after it, in call order."""
    for index, message in enumerate(messages):
        ids = [c.get("id") for c in message.get("tool_calls") or ()]
        if message.get("role") != "assistant" or not ids:
            continue
        answers = [m.get("tool_call_id") for m in messages[index + 1 : index + 1 + len(ids)]]
        _require(
            answers == ids,
            check,
            f"{where}the calls {ids} are answered by {answers}, not right after them in call order",
        )
    called = [str(c.get("id")) for m in messages for c in (m.get("tool_calls") or ())]
    answered = [str(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"]
    _require(
        sorted(called) == sorted(answered),
        "orchestrator.tool_pairing",
        f"calls {called} but results for {answered}",
    )


def _terminal(names: list[str]) -> None:
    counts = (names.count(ORCHESTRATOR_COMPLETE), names.count(EXECUTION_END))
    _require(
        counts == (1, 1),
        "orchestrator.terminal_events",
        f"orchestrator:complete and execution:end were emitted {counts[0]} and {counts[1]} "
        "times, not once each",
    )
    _require(
        names.index(ORCHESTRATOR_COMPLETE) < names.index(EXECUTION_END) == len(names) - 1,
        "orchestrator.terminal_events",
        f"events after execution:end, or out of order: {names[-4:]}",
    )


def _text_of(answer: Any) -> str:
    return str(getattr(answer, "text", answer))


async def check_orchestrator(orchestrator: Any) -> None:
    """Check an orchestrator (the object a module mounts) against DESIGN §6, with a model
    that asks for parallel calls of a ``probe`` tool (or plans them, for loop-lifecycle).

    Rules: ``orchestrator.answer`` (``execute`` returns the model's final text),
    ``orchestrator.terminal_events``, ``orchestrator.tool_pairing``,
    ``orchestrator.timing`` (the same calls with opposite delays give the same context),
    ``orchestrator.cancel_results`` (after an immediate cancel in a batch, the finished
    call keeps its result and the unfinished one has the fixed cancelled result),
    ``orchestrator.cancel_returns`` (the cancelled ``execute`` returns within 10 s),
    ``orchestrator.no_leaks`` (no tool still running when it returned) and
    ``orchestrator.cancellation`` (a turn cancelled from outside — before it starts, then
    at each checkpoint k = 1…N of the task that runs ``execute`` — ends with the
    cancellation, never an answer).
    """
    calls = [{"n": 1}, {"n": 2}]
    answer, first, names = await _one_turn(orchestrator, calls, _Probe({1: 0.02, 2: 0.0}))
    _require(
        _text_of(answer) == "All probed.",
        "orchestrator.answer",
        f"execute returned {answer!r}, not the model's answer 'All probed.'",
    )
    _terminal(names)
    _pairing(first, "orchestrator.tool_pairing")
    _, second, _ = await _one_turn(orchestrator, calls, _Probe({1: 0.0, 2: 0.02}))
    _require(
        _canonical(first) == _canonical(second),
        "orchestrator.timing",
        "the context depends on which tool finished first",
    )
    probe = _Probe()
    try:
        _, messages, names = await _one_turn(
            orchestrator, [{"n": 1}, {"n": 2, "hang": True}], probe, cancel=True
        )
    except TimeoutError as exc:
        raise ConformanceError(
            "orchestrator.cancel_returns", f"execute did not return within {_TIMEOUT} s"
        ) from exc
    _require(probe.running == 0, "orchestrator.no_leaks", "a tool was still running")
    _terminal(names)
    _pairing(messages, "orchestrator.tool_pairing")
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m.get("role") == "tool"}
    _require(
        results.get("call_1") == "probe(1)" or any(v == "probe(1)" for v in results.values()),
        "orchestrator.cancel_results",
        f"the call that finished before the cancel lost its result: {results}",
    )
    cancelled = [v for v in results.values() if v != "probe(1)"]
    _require(
        len(cancelled) == 1 and _is_cancelled(cancelled[0]),
        "orchestrator.cancel_results",
        f"the unfinished call's result is {cancelled!r}, not the fixed cancelled result",
    )
    await _lets_cancellation_through(
        "orchestrator.cancellation", "execute", lambda: _cancelled_turn(orchestrator)
    )


def _canonical(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with their tool call ids numbered by first appearance (an
    orchestrator may make its own ids per run; the order of the calls is what counts)."""
    copied = copy.deepcopy(messages)
    _number_call_ids(copied)
    return copied


def _is_cancelled(content: Any) -> bool:
    try:
        value = json.loads(content) if isinstance(content, str) else content
    except ValueError:
        return False
    return bool(value == {"error": _CANCELLED, "cancelled": True, "tool": "probe"})
