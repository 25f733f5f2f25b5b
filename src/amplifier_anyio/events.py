"""
Canonical event names.

Every name of upstream Amplifier's ``ALL_EVENTS`` (same strings, same order), followed by
the events amplifier_anyio adds: ``session:config`` (upstream emits it but does not list it),
the loop-events scheduler stage ``tool:selecting`` / ``tool:selected``, the tool batch's
``tool:waiting`` (a call waits for an earlier call whose claims conflict with its own; see
``docs/concurrency.md``), tool-task's ``task:agent_spawned`` / ``task:agent_resumed`` /
``task:agent_completed`` (upstream's tool-task emits them too; ``docs/agents.md``),
the provider policy's ``provider:failover`` / ``provider:hedge`` /
``provider:hedge_settled`` and the prompt-cache report ``provider:cache`` (see
``docs/providers.md``), the registry's ``hook:slow`` (a plain handler held the loop
longer than ``HookRegistry.slow_handler``; ``docs/hooks.md``), and loop-lifecycle's
stage events ``lifecycle:<stage>`` (`LIFECYCLE_EVENTS`). Names follow
``namespace:action[:detail]`` in lower case; each constant is the upper snake case of its
string.

Not every name is emitted by something here. `EMITTED_EVENTS` are the ones a
built-in module emits (``tool:selecting`` / ``tool:selected``: the loop-events
orchestrator's scheduler stage); `RESERVED_EVENTS` are kept so that an upstream
module's hook on them registers (and so the names stay taken), but nothing built in emits
them yet. A test keeps both sets honest against the source.
"""

from __future__ import annotations

from typing import Final

__all__ = (
    "GATE_EVENTS",
    "SESSION_START",
    "SESSION_END",
    "SESSION_FORK",
    "SESSION_RESUME",
    "PROMPT_SUBMIT",
    "PROMPT_COMPLETE",
    "PLAN_START",
    "PLAN_END",
    "PROVIDER_REQUEST",
    "PROVIDER_RESPONSE",
    "PROVIDER_RETRY",
    "PROVIDER_ERROR",
    "PROVIDER_THROTTLE",
    "PROVIDER_TOOL_SEQUENCE_REPAIRED",
    "PROVIDER_RESOLVE",
    "LLM_REQUEST",
    "LLM_RESPONSE",
    "CONTENT_BLOCK_START",
    "CONTENT_BLOCK_DELTA",
    "CONTENT_BLOCK_END",
    "THINKING_DELTA",
    "THINKING_FINAL",
    "TOOL_PRE",
    "TOOL_POST",
    "TOOL_ERROR",
    "CONTEXT_PRE_COMPACT",
    "CONTEXT_POST_COMPACT",
    "CONTEXT_COMPACTION",
    "CONTEXT_INCLUDE",
    "ORCHESTRATOR_COMPLETE",
    "EXECUTION_START",
    "EXECUTION_END",
    "USER_NOTIFICATION",
    "ARTIFACT_WRITE",
    "ARTIFACT_READ",
    "POLICY_VIOLATION",
    "APPROVAL_REQUIRED",
    "APPROVAL_GRANTED",
    "APPROVAL_DENIED",
    "CANCEL_REQUESTED",
    "CANCEL_COMPLETED",
    "MODULE_ON_SESSION_READY_FAILED",
    "MODULE_LOAD_FAILED",
    "SESSION_CONFIG",
    "TOOL_SELECTING",
    "TOOL_SELECTED",
    "TOOL_WAITING",
    "TASK_AGENT_SPAWNED",
    "TASK_AGENT_RESUMED",
    "TASK_AGENT_COMPLETED",
    "PROVIDER_FAILOVER",
    "PROVIDER_HEDGE",
    "PROVIDER_HEDGE_SETTLED",
    "PROVIDER_CACHE",
    "HOOK_SLOW",
    "LIFECYCLE_INITIALIZE",
    "LIFECYCLE_PLAN",
    "LIFECYCLE_ROUTE",
    "LIFECYCLE_EXECUTE",
    "LIFECYCLE_AGGREGATE",
    "LIFECYCLE_COMPLETE",
    "LIFECYCLE_FAILED",
    "LIFECYCLE_CANCELLED",
    "LIFECYCLE_EVENTS",
    "ALL_EVENTS",
    "EMITTED_EVENTS",
    "RESERVED_EVENTS",
)

SESSION_START: Final = "session:start"
SESSION_END: Final = "session:end"
SESSION_FORK: Final = "session:fork"
SESSION_RESUME: Final = "session:resume"
PROMPT_SUBMIT: Final = "prompt:submit"
PROMPT_COMPLETE: Final = "prompt:complete"
PLAN_START: Final = "plan:start"
PLAN_END: Final = "plan:end"
PROVIDER_REQUEST: Final = "provider:request"
PROVIDER_RESPONSE: Final = "provider:response"
PROVIDER_RETRY: Final = "provider:retry"
PROVIDER_ERROR: Final = "provider:error"
PROVIDER_THROTTLE: Final = "provider:throttle"
PROVIDER_TOOL_SEQUENCE_REPAIRED: Final = "provider:tool_sequence_repaired"
PROVIDER_RESOLVE: Final = "provider:resolve"
LLM_REQUEST: Final = "llm:request"
LLM_RESPONSE: Final = "llm:response"
CONTENT_BLOCK_START: Final = "content_block:start"
CONTENT_BLOCK_DELTA: Final = "content_block:delta"
CONTENT_BLOCK_END: Final = "content_block:end"
THINKING_DELTA: Final = "thinking:delta"
THINKING_FINAL: Final = "thinking:final"
TOOL_PRE: Final = "tool:pre"
TOOL_POST: Final = "tool:post"
TOOL_ERROR: Final = "tool:error"
CONTEXT_PRE_COMPACT: Final = "context:pre_compact"
CONTEXT_POST_COMPACT: Final = "context:post_compact"
CONTEXT_COMPACTION: Final = "context:compaction"
CONTEXT_INCLUDE: Final = "context:include"
ORCHESTRATOR_COMPLETE: Final = "orchestrator:complete"
EXECUTION_START: Final = "execution:start"
EXECUTION_END: Final = "execution:end"
USER_NOTIFICATION: Final = "user:notification"
ARTIFACT_WRITE: Final = "artifact:write"
ARTIFACT_READ: Final = "artifact:read"
POLICY_VIOLATION: Final = "policy:violation"
APPROVAL_REQUIRED: Final = "approval:required"
APPROVAL_GRANTED: Final = "approval:granted"
APPROVAL_DENIED: Final = "approval:denied"
CANCEL_REQUESTED: Final = "cancel:requested"
CANCEL_COMPLETED: Final = "cancel:completed"
MODULE_ON_SESSION_READY_FAILED: Final = "module:on_session_ready_failed"
MODULE_LOAD_FAILED: Final = "module:load_failed"
SESSION_CONFIG: Final = "session:config"
TOOL_SELECTING: Final = "tool:selecting"
TOOL_SELECTED: Final = "tool:selected"
TOOL_WAITING: Final = "tool:waiting"
TASK_AGENT_SPAWNED: Final = "task:agent_spawned"
TASK_AGENT_RESUMED: Final = "task:agent_resumed"
TASK_AGENT_COMPLETED: Final = "task:agent_completed"
PROVIDER_FAILOVER: Final = "provider:failover"
PROVIDER_HEDGE: Final = "provider:hedge"
PROVIDER_HEDGE_SETTLED: Final = "provider:hedge_settled"
PROVIDER_CACHE: Final = "provider:cache"
HOOK_SLOW: Final = "hook:slow"
LIFECYCLE_INITIALIZE: Final = "lifecycle:initialize"
LIFECYCLE_PLAN: Final = "lifecycle:plan"
LIFECYCLE_ROUTE: Final = "lifecycle:route"
LIFECYCLE_EXECUTE: Final = "lifecycle:execute"
LIFECYCLE_AGGREGATE: Final = "lifecycle:aggregate"
LIFECYCLE_COMPLETE: Final = "lifecycle:complete"
LIFECYCLE_FAILED: Final = "lifecycle:failed"
LIFECYCLE_CANCELLED: Final = "lifecycle:cancelled"

LIFECYCLE_EVENTS: Final[tuple[str, ...]] = (
    LIFECYCLE_INITIALIZE,
    LIFECYCLE_PLAN,
    LIFECYCLE_ROUTE,
    LIFECYCLE_EXECUTE,
    LIFECYCLE_AGGREGATE,
    LIFECYCLE_COMPLETE,
    LIFECYCLE_FAILED,
    LIFECYCLE_CANCELLED,
)
"""loop-lifecycle's stage events (``{stage, data, trace_id}``), in stage order."""

ALL_EVENTS: Final[tuple[str, ...]] = (
    SESSION_START,
    SESSION_END,
    SESSION_FORK,
    SESSION_RESUME,
    PROMPT_SUBMIT,
    PROMPT_COMPLETE,
    PLAN_START,
    PLAN_END,
    PROVIDER_REQUEST,
    PROVIDER_RESPONSE,
    PROVIDER_RETRY,
    PROVIDER_ERROR,
    PROVIDER_THROTTLE,
    PROVIDER_TOOL_SEQUENCE_REPAIRED,
    PROVIDER_RESOLVE,
    LLM_REQUEST,
    LLM_RESPONSE,
    CONTENT_BLOCK_START,
    CONTENT_BLOCK_DELTA,
    CONTENT_BLOCK_END,
    THINKING_DELTA,
    THINKING_FINAL,
    TOOL_PRE,
    TOOL_POST,
    TOOL_ERROR,
    CONTEXT_PRE_COMPACT,
    CONTEXT_POST_COMPACT,
    CONTEXT_COMPACTION,
    CONTEXT_INCLUDE,
    ORCHESTRATOR_COMPLETE,
    EXECUTION_START,
    EXECUTION_END,
    USER_NOTIFICATION,
    ARTIFACT_WRITE,
    ARTIFACT_READ,
    POLICY_VIOLATION,
    APPROVAL_REQUIRED,
    APPROVAL_GRANTED,
    APPROVAL_DENIED,
    CANCEL_REQUESTED,
    CANCEL_COMPLETED,
    MODULE_ON_SESSION_READY_FAILED,
    MODULE_LOAD_FAILED,
    SESSION_CONFIG,
    TOOL_SELECTING,
    TOOL_SELECTED,
    TOOL_WAITING,
    TASK_AGENT_SPAWNED,
    TASK_AGENT_RESUMED,
    TASK_AGENT_COMPLETED,
    PROVIDER_FAILOVER,
    PROVIDER_HEDGE,
    PROVIDER_HEDGE_SETTLED,
    PROVIDER_CACHE,
    HOOK_SLOW,
    *LIFECYCLE_EVENTS,
)
"""Every canonical event name, upstream's first, in upstream's order."""

GATE_EVENTS: Final[frozenset[str]] = frozenset({PROMPT_SUBMIT, PROVIDER_REQUEST, TOOL_PRE})
"""Events whose answer decides whether work runs. A handler that raises, or answers
something that is not a verdict, *denies* on these (a gate fails closed); on every other
event it is logged and skipped."""

RESERVED_EVENTS: Final[frozenset[str]] = frozenset(
    {
        PLAN_START,
        PLAN_END,
        PROVIDER_THROTTLE,
        PROVIDER_RESOLVE,
        THINKING_FINAL,
        CONTEXT_COMPACTION,
        CONTEXT_INCLUDE,
        USER_NOTIFICATION,
        POLICY_VIOLATION,
        APPROVAL_REQUIRED,
        APPROVAL_GRANTED,
        APPROVAL_DENIED,
        SESSION_CONFIG,
    }
)
"""Canonical names nothing built in emits yet (upstream's)."""

EMITTED_EVENTS: Final[tuple[str, ...]] = tuple(e for e in ALL_EVENTS if e not in RESERVED_EVENTS)
"""The events built-in modules emit, in `ALL_EVENTS` order."""
