"""The stages of an orchestration and the strategies for a failed step."""

from __future__ import annotations

import enum

__all__ = ("LifecycleStage", "ErrorPropagation", "TERMINAL_STAGES")


class LifecycleStage(enum.StrEnum):
    """Where an orchestration stands; each event it yields names one.

    The order is initialize → plan → (route → execute)* → aggregate → complete, and every
    orchestration ends with exactly one of the terminal stages complete, failed or
    cancelled, after which nothing is yielded.
    """

    INITIALIZE = "initialize"
    """The lifecycle's resources are set up."""
    PLAN = "plan"
    """The goal is decomposed into steps."""
    ROUTE = "route"
    """A step is given a target (one event per step)."""
    EXECUTE = "execute"
    """A step ran (one event per step of a wave, in plan order)."""
    AGGREGATE = "aggregate"
    """The step results are collected into the output."""
    COMPLETE = "complete"
    """Terminal: the orchestration ran to its end (its data says whether every step succeeded)."""
    FAILED = "failed"
    """Terminal: the orchestration stopped on an error."""
    CANCELLED = "cancelled"
    """Terminal: the orchestration was cancelled or its timeout passed."""

    @property
    def is_terminal(self) -> bool:
        """Whether nothing may follow this stage."""
        return self in TERMINAL_STAGES


TERMINAL_STAGES = frozenset(
    {LifecycleStage.COMPLETE, LifecycleStage.FAILED, LifecycleStage.CANCELLED}
)
"""The stages that end an orchestration."""


class ErrorPropagation(enum.StrEnum):
    """What an orchestration does when a step fails."""

    FAIL_FAST = "fail_fast"
    """Stop at the first failure: FAILED, teardown, then
    [`OrchestrationError`][amplifier_anyio.errors.OrchestrationError] raised."""
    CONTINUE = "continue"
    """Record the failure, run every step that does not depend on it, complete with
    ``success: False``."""
    RETRY = "retry"
    """Retry a recoverable failure with exponential backoff and jitter, up to
    `RetryPolicy.max_attempts` attempts in all; then FAILED."""
    FALLBACK = "fallback"
    """Run the routing decision's fallback target; if there is none or it fails too, FAILED."""
