"""What a stored session remembers of how it ran: the plan file, by path and content digest.

``run`` and ``chat`` write ``<stem>.meta.json`` beside a context-persistent transcript
when their session creates it (as its writer; a resume leaves it as it is):

```json
{"session_id": "…", "plan": {"path": "/abs/plan.yaml", "sha256": "…"}, "updated": "…"}
```

(``"plan": null`` when the plan was built from the command line: the demo, ``--provider``).
``chat --resume ID`` and ``run --resume ID`` without ``--plan`` resume under that plan
file: a session that held a ``deploy`` call is not resumed under the offline demo plan
(where ``deploy`` would be answered "not found" and its approval used up). ``--plan`` on
a resume chooses another plan for that command only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs

from ..session._session import AmplifierSession
from ._common import fail, say, warn
from ._plans import PlanOptions

__all__ = ("metadata_path_for", "read_metadata", "remember_plan", "stored_plan")


def metadata_path_for(transcript: Path) -> Path:
    """The session's metadata beside its transcript: ``<stem>.meta.json``."""
    return transcript.with_name(f"{transcript.stem}.meta.json")


def read_metadata(transcript: Path) -> dict[str, Any] | None:
    """The metadata of a stored session, or None (none written, or unreadable)."""
    try:
        value = json.loads(metadata_path_for(transcript).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stored_plan(options: PlanOptions, session_id: str, transcript: Path) -> PlanOptions:
    """``options`` for resuming a stored session: without ``--plan``, the plan file the
    session ran under (one line and exit 2 when that file is gone)."""
    if options.plan is not None:
        return options
    plan = (read_metadata(transcript) or {}).get("plan")
    if not isinstance(plan, dict) or not isinstance(plan.get("path"), str):
        return options  # it ran under a plan built from the command line
    path = Path(plan["path"])
    try:
        digest = _digest(path)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise fail(
            f"session {session_id} ran under the plan {path}, which cannot be read ({reason}); "
            "give --plan FILE to resume it under another"
        ) from None
    if digest != plan.get("sha256"):
        warn(f"the plan {path} changed since session {session_id} ran under it")
    say(f"plan: {path} (the one session {session_id} ran under)")
    return attrs.evolve(options, plan=path)


async def remember_plan(session: AmplifierSession, plan_file: Path | None) -> None:
    """Write the session's metadata beside its transcript, when its context keeps one and
    it has none yet (the plan a session was started under stays its own)."""
    context: Any = session.coordinator.get("context")
    transcript = getattr(context, "path", None)
    if not isinstance(transcript, Path) or getattr(context, "read_only", True):
        return
    try:
        await anyio.to_thread.run_sync(_write, transcript, session.session_id, plan_file)
    except OSError as exc:  # the turn can run all the same; only a later resume guesses
        warn(f"cannot write {metadata_path_for(transcript)}: {exc.strerror or exc}")


def _write(transcript: Path, session_id: str, plan_file: Path | None) -> None:
    plan = None
    if plan_file is not None:
        path = plan_file.resolve()
        plan = {"path": str(path), "sha256": _digest(path)}
    record = {
        "session_id": session_id,
        "plan": plan,
        "updated": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    target = metadata_path_for(transcript)
    if target.exists():
        return
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle, ensure_ascii=False)
            handle.write("\n")
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
