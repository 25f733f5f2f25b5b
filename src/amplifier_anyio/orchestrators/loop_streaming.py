"""loop-streaming: loop-basic, but the provider's reply arrives as a stream.

When the selected provider has ``open_stream()`` (or a ``stream()`` of that shape, the
contract's earlier name), each turn's provider call relays the stream
as ``content_block:start`` / ``content_block:delta`` / ``content_block:end`` and
``thinking:delta`` events (payload: the provider's event fields plus ``provider``), then
continues exactly as loop-basic with the assembled response. Providers that cannot stream
are called with ``complete()``. A cancel during the stream leaves the
provider's ``async with`` block, which closes the HTTP response.
"""

from __future__ import annotations

from typing import Any

from ..config_schema import ConfigSchema
from .loop_basic import LoopBasicConfig, LoopBasicOrchestrator

__all__ = ("LoopStreamingOrchestrator", "mount")


class LoopStreamingOrchestrator(LoopBasicOrchestrator):
    """loop-basic with streamed provider calls (same config, events and invariants)."""

    name = "loop-streaming"
    streaming = True


async def mount(coordinator: Any, config: dict[str, Any] | None = None) -> None:
    """Mount loop-streaming as the session's orchestrator."""
    await coordinator.mount("orchestrator", LoopStreamingOrchestrator(config))


CONFIG_SCHEMA = ConfigSchema.from_attrs("loop-streaming", LoopBasicConfig)
"""The keys loop-streaming accepts: loop-basic's."""
