"""``amplifier-anyio temporal worker``: run a durable-session worker (docs/durable-sessions.md).

A process that made a Temporal client can abort at interpreter exit (temporalio's
sdk-python issue 300); the console-script entry point therefore leaves such a process with
``os._exit`` once its output is flushed (``exit_after_client``), with the exit code the
command chose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ._common import cli_command, fail, say

__all__ = ("app", "worker_command", "run_durable", "CLIENT_USED")

app = typer.Typer(help="Durable sessions on Temporal.", no_args_is_help=True)

CLIENT_USED = {"value": False}
"""Whether this process made a Temporal client (the entry point then leaves by os._exit)."""


@app.command("worker")
def worker_command(
    plan: Annotated[Path, typer.Option("--plan", help="The plan whose sessions to serve.")],
    address: Annotated[
        str | None, typer.Option("--address", help="host:port of the Temporal server.")
    ] = None,
    task_queue: Annotated[
        str | None, typer.Option("--task-queue", help="The task queue to poll.")
    ] = None,
    namespace: Annotated[str | None, typer.Option("--namespace")] = None,
) -> None:
    """Mount the plan's modules once and run its sessions' workflow and activities."""
    import anyio

    with cli_command():
        try:
            from ..temporal import SessionWorker
        except ImportError as exc:
            raise fail(str(exc)) from None
        worker = SessionWorker(plan, address=address, namespace=namespace, task_queue=task_queue)
        CLIENT_USED["value"] = True

        def ready() -> None:
            say(f"worker ready: {worker.address} queue {worker.task_queue!r} (Ctrl-C stops it)")

        try:
            anyio.run(worker.serve, ready, backend="asyncio")  # Temporal's worker is asyncio
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
        except Exception as exc:  # noqa: BLE001 - one line and an exit code
            raise fail(f"{type(exc).__name__}: {exc}") from None


def run_durable(plan: Any, prompt: str, backend: str) -> tuple[Any, str]:
    """One turn of a new durable session of ``plan`` (its ``session.durable`` says where)."""
    import anyio

    from ..temporal import TemporalSessions

    spec = plan.durable
    CLIENT_USED["value"] = True

    async def turn() -> tuple[Any, str]:
        async with TemporalSessions(
            address=spec.address, namespace=spec.namespace, task_queue=spec.task_queue
        ) as sessions:
            session = await sessions.open(plan)
            return await session.run(prompt), session.id

    result: tuple[Any, str] = anyio.run(turn, backend=backend)
    return result
