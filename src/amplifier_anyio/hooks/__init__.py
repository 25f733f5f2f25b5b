"""Hook modules shipped with amplifier_anyio.

- :mod:`amplifier_anyio.hooks.otel` (``hooks-otel``, extra ``[otel]``): OpenTelemetry spans
  and metrics for turns, provider calls and tool calls, per the GenAI semantic conventions.
  Its names are imported from that module, since it needs the optional ``opentelemetry-api``.
"""

from __future__ import annotations

__all__ = ()
