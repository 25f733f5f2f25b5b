"""Hook modules shipped with amplifier_anyio.

- :mod:`amplifier_anyio.hooks.logging` (``hooks-logging``): a JSONL event log, secrets
  redacted, written by a module service off the event loop.
- :mod:`amplifier_anyio.hooks.approval` (``hooks-approval``): rule-based approval of tool
  calls and the approval systems that answer it (console, callback); fail closed.
"""

from __future__ import annotations

__all__ = ()
