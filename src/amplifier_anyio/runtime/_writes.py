"""One context write of a turn under a bounded shield.

Every write a turn makes to its context — the user's prompt, an assistant message, a
batch's results — runs in one cancel scope that is shielded from outside and cancelled
by its own deadline only (``write_timeout``). So no cancel of the turn (graceful,
immediate, the deadline, the host's own scope) stops a write half way: the write lands
or fails whole, and the cancel takes effect right after it. A write that fails or
outlasts its bound is logged at error level and answered as a
[`ContextWriteError`][amplifier_anyio.ContextWriteError] for the caller to record and raise.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ..errors import ContextWriteError

__all__ = ("bounded_write",)

logger = logging.getLogger(__name__)


async def bounded_write(
    what: str, write: Callable[[Any], Awaitable[None]], arg: Any, timeout: float
) -> ContextWriteError | None:
    """``await write(arg)`` under a shield bounded by ``timeout`` seconds; the error to
    raise if it did not land (already logged), or None.

    ``what`` names the write in the error (``writing the prompt gave up after 5.0 s``).
    """
    error: ContextWriteError | None = None
    # One scope: shielded from outside, cancelled by its own deadline only.
    with anyio.CancelScope(shield=True, deadline=anyio.current_time() + timeout) as bound:
        try:
            await write(arg)
        except Exception as exc:  # noqa: BLE001 - reported as a problem of the turn
            error = ContextWriteError(f"writing {what} failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
    if bound.cancelled_caught:
        error = ContextWriteError(f"writing {what} gave up after {timeout} s")
    if error is not None:
        logger.error("%s", error)
    return error
