"""
Every exception amplifier_anyio raises, under one root.

Hierarchy:

```text
AmplifierError
├── ConfigError (+ ValueError) ........ a bad mount plan, module config or CLI input
├── ValidationError (+ ValueError) .... a payload that does not fit a model
├── ContextFileError (+ ValueError) ... a persisted context file: a bad line, failed I/O
├── ContextWriteError ................. a turn could not write its context in time
├── ModuleNotFoundError ............... no resolver, entry point or package has the id
├── ModuleLoadError ................... found, but import or validation failed
├── ForeignModuleError (+ TypeError) .. an upstream module's answer that cannot be converted
├── MountError (+ ValueError) ......... misuse of the coordinator's mount points
├── InjectionTooLargeError (+ ValueError)  a hook injection over the size limit
├── ApprovalTimeoutError .............. an approval system gave no answer in time
├── ApprovalDeferred .................. a tool call put on hold until someone approves it
├── SessionError (+ RuntimeError) ..... a session used in the wrong state
│   └── ArgumentsChangedError ......... an allowed call's arguments changed after the decision
├── DelegationError (+ ValueError) .... a sub-agent that cannot be spawned or resumed
├── MCPServerError .................... an MCP server (tool-mcp) could not be started
├── OrchestrationError ................ a lifecycle orchestration failed (stage, context, cause)
├── CassetteMismatchError ............. a replayed run asked what its recording did not
├── CassetteError (+ ConfigError) ..... a cassette file held by another recorder, or not valid
├── ConformanceError (+ AssertionError)  a module broke a rule of its contract (testing)
└── LLMError .......................... a provider call failed
    ├── RateLimitError
    │   └── QuotaExceededError
    ├── AuthenticationError
    │   └── AccessDeniedError
    ├── ContextLengthError
    ├── ContentFilterError
    ├── InvalidRequestError
    ├── NotFoundError
    ├── ProviderUnavailableError
    │   └── NetworkError
    ├── LLMTimeoutError (+ TimeoutError)
    ├── StreamError
    ├── MalformedResponseError ........ a 200 answer that is not the API's shape
    └── InvalidToolCallError
```

Deadlines that are not a provider's raise the builtin `TimeoutError`. Cancellation
is never wrapped: the backend's cancellation exception always propagates unchanged.

ExceptionGroup policy: a task group's group never reaches a user. Inside a tool batch,
whatever fails on one call's path (the tool, its hooks, the approval system, serialising
its output, hook data of the wrong shape) becomes that call's error result and never
cancels a sibling, so the error a caller sees never depends on how many tools ran in
parallel. What can still leave a task group — ``KeyboardInterrupt``, ``SystemExit``, the
backend's cancellation — is raised bare, through
[`unwrap_group`][amplifier_anyio.errors.unwrap_group].
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = (
    "AmplifierError",
    "DurableSessionError",
    "ConfigError",
    "ValidationError",
    "ContextFileError",
    "ContextWriteError",
    "ApprovalDeferred",
    "ModuleNotFoundError",
    "ModuleLoadError",
    "ForeignModuleError",
    "MountError",
    "InjectionTooLargeError",
    "ApprovalTimeoutError",
    "SessionError",
    "ArgumentsChangedError",
    "DelegationError",
    "MCPServerError",
    "OrchestrationError",
    "CassetteMismatchError",
    "CassetteError",
    "ConformanceError",
    "LLMError",
    "RateLimitError",
    "QuotaExceededError",
    "AuthenticationError",
    "AccessDeniedError",
    "ContextLengthError",
    "ContentFilterError",
    "InvalidRequestError",
    "NotFoundError",
    "ProviderUnavailableError",
    "NetworkError",
    "LLMTimeoutError",
    "StreamError",
    "MalformedResponseError",
    "InvalidToolCallError",
    "unwrap_group",
    "describe",
)


class AmplifierError(Exception):
    """Root of every exception raised by amplifier_anyio."""


class ConfigError(AmplifierError, ValueError):
    """A mount plan, module config or command-line value is invalid.

    The message names the field and the problem in one line, for example
    ``providers[0].module: required``.
    """


class ValidationError(AmplifierError, ValueError):
    """A payload could not be structured into a model.

    Each entry of `errors` is one line ``<path>: <problem>``.
    """

    def __init__(self, errors: list[str]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(errors) if errors else "invalid payload")


class ContextFileError(AmplifierError, ValueError):
    """A persisted context file has a bad line, or could not be read or written.

    ``path`` is the file. ``line`` is the 1-based number of a line that is not a JSON
    message (``path:line: not a JSON message (problem)``), or None when reading or writing
    failed (``path: problem``; the ``OSError`` is the ``__cause__``).
    """

    def __init__(self, path: Path, line: int | None, problem: str) -> None:
        self.path = path
        self.line = line
        if line is None:
            super().__init__(f"{path}: {problem}")
        else:
            super().__init__(f"{path}:{line}: not a JSON message ({problem})")


class ModuleNotFoundError(AmplifierError):
    """No source resolver, entry point or importable package provides the module id."""

    def __init__(self, module_id: str, tried: list[str]) -> None:
        self.module_id = module_id
        self.tried = tuple(tried)
        where = "; ".join(tried) if tried else "nothing to try"
        super().__init__(f"module {module_id!r} not found (tried: {where})")


class ModuleLoadError(AmplifierError):
    """A module was found but could not be imported, has no usable ``mount``, or its
    ``mount`` failed while a session started (then ``kind`` says which plan entry —
    ``provider``, ``tool``, … — and ``__cause__`` is what the module raised)."""

    def __init__(self, module_id: str, reason: str, *, kind: str = "module") -> None:
        self.module_id = module_id
        self.reason = reason
        self.kind = kind
        if kind == "module":
            super().__init__(f"module {module_id!r} could not be loaded: {reason}")
        else:
            super().__init__(f"{kind} {module_id!r}: {reason}")


class ForeignModuleError(AmplifierError, TypeError):
    """A module written for amplifier-core gave an answer (a hook verdict, a tool result,
    a provider response, a content block, a tool call) that cannot be converted into
    ours. The message names the module (or the hook, tool or provider) and the value."""


class MountError(AmplifierError, ValueError):
    """A coordinator mount point was used the wrong way (unknown point, missing name)."""


class InjectionTooLargeError(AmplifierError, ValueError):
    """A hook's context injection is larger than the session's ``injection_size_limit``."""


class ApprovalTimeoutError(AmplifierError):
    """An approval system did not answer before its timeout."""


class ApprovalDeferred(AmplifierError):  # noqa: N818 - a signal, not a failure
    """A tool call is on hold until someone approves it (see ``docs/durable.md``).

    Raised by a tool's ``execute`` (which then runs again, with
    ``ToolCallContext.approved`` set, once the call is allowed), or by the coordinator
    when the approval system answers ``"defer"`` to a ``tool:pre`` ``ask_user``. The tool
    batch turns it into a pending approval: the turn finishes its other calls and ends
    with status ``awaiting_approval``. ``prompt`` is the question to show the approver.
    """

    def __init__(self, prompt: str = "Allow this tool call?") -> None:
        super().__init__(prompt)
        self.prompt = prompt


class ContextWriteError(AmplifierError):
    """A turn's context write failed or outlasted its bound (``write_timeout``).

    The turn ends with status ``error``; ``__cause__`` is the context's own exception
    when it raised. No request sends a tool call whose result was not written.
    """


class SessionError(AmplifierError, RuntimeError):
    """A session was used in a state that does not allow the call."""


class ArgumentsChangedError(SessionError):
    """An allowed call is about to run with other arguments than the ones decided on: it is
    denied (the tool batch answers it with this message) and not run."""


class DurableSessionError(SessionError):
    """A durable session (``amplifier_anyio.temporal``) could not do what was asked: the
    Temporal server cannot be reached, the session does not exist, a turn failed there."""


class DelegationError(AmplifierError, ValueError):
    """A sub-agent cannot be spawned or resumed (§14): an agent the plan does not have,
    delegation deeper than ``session.max_agent_depth``, a sub-session id that names no
    child of the session. tool-task answers it as the call's error result."""


class MCPServerError(AmplifierError):
    """An MCP server of tool-mcp could not be started: one line naming the server and the
    cause (``MCP server 'time' failed to start: ...``); the cause is the ``__cause__``."""


class OrchestrationError(AmplifierError):
    """A lifecycle orchestration failed ([`amplifier_anyio.lifecycle`][amplifier_anyio.lifecycle]).

    ``stage`` is where it failed (a ``LifecycleStage``), ``context`` the
    ``ExecutionContext`` at that moment (typed loosely: this module imports nothing of
    the package),
    ``cause`` the original exception (also the ``__cause__`` when raised), ``recoverable``
    whether a retry or a fallback may succeed, ``metadata`` more detail (the step, the
    attempts, the fallback's own error). ``str()`` names the stage and the trace id.
    """

    def __init__(
        self,
        stage: str,
        message: str,
        *,
        context: Any,
        cause: BaseException | None = None,
        recoverable: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.stage = stage
        self.message = message
        self.context = context
        self.cause = cause
        self.recoverable = recoverable
        self.metadata: dict[str, Any] = dict(metadata or {})

    def __str__(self) -> str:
        text = f"{self.stage} failed: {self.message} (trace_id={self.context.trace_id})"
        if self.cause is not None:
            text += f", caused by {type(self.cause).__name__}: {self.cause}"
        return text

    def __repr__(self) -> str:
        return (
            f"OrchestrationError(stage={str(self.stage)!r}, message={self.message!r}, "
            f"trace_id={self.context.trace_id!r}, recoverable={self.recoverable!r})"
        )


class CassetteMismatchError(AmplifierError):
    """A run replayed from a cassette (`amplifier_anyio.runtime` (the cassette)) made a
    call its recording does not have: the request differs from the recorded one, or the
    lane has no recorded call left.

    ``lane`` is the session's lane (``root``, a sub-agent's ``root/<agent>@<call id>``),
    ``ordinal`` the 0-based number of the call in that lane (for a tool, its call id),
    ``path`` the first JSON path where the request differs (``messages[1].content``; None
    past the end of the lane). The message names all three in one line.
    """

    def __init__(
        self,
        message: str,
        *,
        lane: str,
        ordinal: int | str,
        path: str | None = None,
        recorded: Any = None,
        actual: Any = None,
    ) -> None:
        super().__init__(message)
        self.lane = lane
        self.ordinal = ordinal
        self.path = path
        self.recorded = recorded
        self.actual = actual


class CassetteError(ConfigError):
    """A cassette file (`amplifier_anyio.runtime` (the cassette)) that cannot be used: another
    recorder holds it (the message names the holder's pid, or the session holding the lane
    in this process), or — checked whole when it is opened, before any call is replayed —
    it is empty, a line is not a recorded call, or one call is recorded twice.

    ``path`` is the file, ``line`` the 1-based line at fault (None when the whole file or
    its lock is); the message names both (``session.cassette.path: run.jsonl:3: …``). A
    `ConfigError`: it fails the session's start, as a bad ``session.cassette`` entry does.
    """

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class ConformanceError(AmplifierError, AssertionError):
    """A module breaks a rule of its contract (`amplifier_anyio.testing.conformance`).

    ``rule`` is the rule's short name (``tool.cancellation``); the message starts with it
    and says what the module did instead. An ``AssertionError``, so pytest shows it as a
    failed check rather than an error in the test.
    """

    def __init__(self, rule: str, problem: str) -> None:
        super().__init__(f"{rule}: {problem}")
        self.rule = rule
        self.problem = problem


class LLMError(AmplifierError):
    """A provider call failed.

    ``retryable`` says whether repeating the same request may succeed; ``retry_after`` is
    the server's requested delay in seconds, when it gave one.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        model: str | None = None,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.model = model
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        self.body = body

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.message!r}, provider={self.provider!r}, "
            f"status_code={self.status_code!r}, retryable={self.retryable!r})"
        )


class RateLimitError(LLMError):
    """The provider throttled the request (HTTP 429)."""


class QuotaExceededError(RateLimitError):
    """The account's quota or credit is exhausted; waiting will not help."""


class AuthenticationError(LLMError):
    """The credentials were missing or rejected (HTTP 401)."""


class AccessDeniedError(AuthenticationError):
    """The credentials are valid but not allowed to do this (HTTP 403)."""


class ContextLengthError(LLMError):
    """The request does not fit the model's context window."""


class ContentFilterError(LLMError):
    """The provider refused the content by policy."""


class InvalidRequestError(LLMError):
    """The provider rejected the request as malformed (HTTP 400, 422)."""


class NotFoundError(LLMError):
    """The model or endpoint does not exist (HTTP 404)."""


class ProviderUnavailableError(LLMError):
    """The provider failed or is overloaded (HTTP 5xx, 529)."""


class NetworkError(ProviderUnavailableError):
    """The connection failed before a response arrived."""


class LLMTimeoutError(LLMError, TimeoutError):
    """The provider did not answer within the request timeout."""


class StreamError(LLMError):
    """A streaming response broke off or could not be decoded."""


class MalformedResponseError(LLMError):
    """A successful (HTTP 200) answer whose body does not have the API's shape: not JSON,
    no choices, a field of the wrong type. The message names what is wrong."""


class InvalidToolCallError(LLMError):
    """The model produced a tool call that cannot be decoded."""

    def __init__(
        self,
        message: str,
        *,
        tool_name: str | None = None,
        raw_arguments: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.tool_name = tool_name
        self.raw_arguments = raw_arguments


def unwrap_group(error: BaseException) -> BaseException:
    """The one exception to raise for what a task group raised.

    ``KeyboardInterrupt`` and ``SystemExit`` win wherever they are in the group; a group
    of one becomes its exception; anything else is returned as it is.
    """
    if not isinstance(error, BaseExceptionGroup):
        return error
    leaves = list(_leaves(error))
    for kind in (KeyboardInterrupt, SystemExit):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0] if len(leaves) == 1 else error


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        else:
            yield error


def _single(exc: BaseException) -> BaseException:
    """The one exception inside nested single-member groups (a task group's wrapping)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """An exception as one line: ``Type: message`` (our own errors: the message alone);
    a task group's wrapping is looked through and a group names each of its exceptions."""
    exc = _single(exc)
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    message = " ".join(str(exc).split())
    if isinstance(exc, AmplifierError) and message:
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
