"""The placeholder results live beside `PendingApproval`, where the engine finds them.

The tool batch, the turn policy and context-persistent's journal all write them; the
journal's old names stay the same objects.
"""

from __future__ import annotations

import json

from amplifier_anyio import errors
from amplifier_anyio.contexts import _journal
from amplifier_anyio.kernel import _turns

MOVED = sorted(set(_turns.__all__) - {"TurnStatus", "TurnResult", "PendingApproval"})
"""What moved here from the journal: every name of the module but the turn's own."""


def test_the_journal_names_are_the_placeholders_beside_pending_approval() -> None:
    assert len(MOVED) == 8
    for name in MOVED:
        assert getattr(_journal, name) is getattr(_turns, name), name
    assert _journal.ArgumentsChangedError is errors.ArgumentsChangedError
    assert issubclass(errors.ArgumentsChangedError, errors.SessionError)


def test_a_pending_placeholder_is_a_complete_tool_message() -> None:
    message = _turns.pending_result("c1", "grep", "May I?")
    assert message["role"] == "tool"
    assert message["tool_call_id"] == "c1"
    assert json.loads(message["content"])["error"] == _turns.PENDING_MESSAGE
    assert _turns.is_placeholder(message)
    assert _turns.is_placeholder(_turns.resumable_result("c2", "grep"))
    assert not _turns.is_placeholder(_turns.interrupted_result("c3", "grep"))
    assert not _turns.is_placeholder(_turns.finished_result("c4", "grep", "done"))


def test_an_approval_binds_to_the_tool_and_its_canonical_arguments() -> None:
    digest = _turns.call_digest("grep", {"b": 1, "a": 2})
    assert digest == _turns.call_digest("grep", {"a": 2, "b": 1})
    assert digest != _turns.call_digest("grep", {"a": 2, "b": 2})
    assert digest != _turns.call_digest("find", {"a": 2, "b": 1})
