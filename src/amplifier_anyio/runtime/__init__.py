"""What every orchestrator shares: the turn engine, the structured tool batch, where tool
calls run (executors), the request helpers, the stream relay, and the cassette that
records and replays a session's provider calls (the plan's ``session.cassette``, the
CLI's ``--record`` / ``--replay``; re-exported by `amplifier_anyio.testing`)."""

from __future__ import annotations

from ._cassette import (
    ROOT_LANE,
    Cassette,
    CassetteStatistics,
    child_lane,
    first_difference,
    install_cassette,
    lane_of,
    lock_path_for,
    normalise_request,
    open_cassette,
)
from ._executors import (
    BUILTIN_EXECUTORS,
    LocalExecutor,
    ProcessExecutor,
    ThreadExecutor,
    ToolExecutionContext,
    ToolExecutor,
    WorkerToolError,
    builtin_executor,
    run_tool_in_worker,
)
from ._progress import (
    DEFAULT_REPEATS,
    NO_PROGRESS_FINISH_REASON,
    ProgressVerdict,
    ProgressWatch,
    no_progress_repeats,
)
from ._requests import (
    LOOP_LIMIT_REMINDER,
    LOST_RESULT,
    answer_orphaned_calls,
    apply_injections,
    assistant_message,
    build_request,
    chat_request,
    error_payload,
    inject,
    pending_injection,
    request_messages,
    select_provider,
    tool_calls_of,
)
from ._streaming import STREAM_EVENTS, relay_stream, stream_payload
from ._tool_batch import CANCELLED_MESSAGE, ToolBatch, ToolBatchConfig, cancelled_result
from ._turn import INCOMPLETE_FINISH_REASONS, PAUSE_TURN, ToolRunner, Turn, TurnConfig

__all__ = (
    # the cassette (DESIGN §16): record and replay provider calls by lane
    "Cassette",
    "CassetteStatistics",
    "open_cassette",
    "install_cassette",
    "lane_of",
    "child_lane",
    "ROOT_LANE",
    "lock_path_for",
    "normalise_request",
    "first_difference",
    # the engine
    "Turn",
    "TurnConfig",
    "ToolRunner",
    "INCOMPLETE_FINISH_REASONS",
    "PAUSE_TURN",
    # no-progress detection
    "ProgressWatch",
    "ProgressVerdict",
    "NO_PROGRESS_FINISH_REASON",
    "DEFAULT_REPEATS",
    "no_progress_repeats",
    # tool batches
    "ToolBatch",
    "ToolBatchConfig",
    "cancelled_result",
    "CANCELLED_MESSAGE",
    # executors
    "ToolExecutor",
    "ToolExecutionContext",
    "LocalExecutor",
    "ThreadExecutor",
    "ProcessExecutor",
    "BUILTIN_EXECUTORS",
    "builtin_executor",
    "run_tool_in_worker",
    "WorkerToolError",
    # requests
    "LOOP_LIMIT_REMINDER",
    "LOST_RESULT",
    "select_provider",
    "apply_injections",
    "pending_injection",
    "build_request",
    "chat_request",
    "tool_calls_of",
    "assistant_message",
    "error_payload",
    "answer_orphaned_calls",
    "request_messages",
    "inject",
    # streams
    "STREAM_EVENTS",
    "relay_stream",
    "stream_payload",
)
