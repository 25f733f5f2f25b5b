"""hooks-logging's redaction: by key name, by value pattern, by plan literal, recursively."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amplifier_anyio.hooks.logging import REDACTED, Redactor
from amplifier_anyio.models import ToolResult


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "X-Api-Key",
        "OPENAI_API_KEY",
        "Authorization",
        "token",
        "refresh_token",
        "password",
        "client_secret",
        "aws_secret_access_key",
        "credentials",
        "Cookie",
        "private_key",
    ],
)
def test_values_under_secret_keys_are_redacted(key: str) -> None:
    assert Redactor().clean({key: "hunter2-value"}) == {key: REDACTED}


@pytest.mark.parametrize("key", ["max_tokens", "input_tokens", "author", "keyword", "path"])
def test_ordinary_keys_are_kept(key: str) -> None:
    assert Redactor().clean({key: "plain"}) == {key: "plain"}


def test_numbers_under_secret_looking_keys_stay_readable() -> None:
    assert Redactor().clean({"token_count": 12, "token": None}) == {
        "token_count": 12,
        "token": None,
    }


def test_a_secret_key_hides_a_whole_structure() -> None:
    assert Redactor().clean({"credentials": {"user": "u", "pass": "p"}}) == {
        "credentials": REDACTED
    }


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("key sk-abcdefghijklmnop1234 end", "sk-abcdefghijklmnop1234"),
        ("sk-ant-api03-abcdefghijkl", "sk-ant-api03-abcdefghijkl"),
        ("Authorization: Bearer eyJhbGciOi.J9.x-y_z", "eyJhbGciOi.J9.x-y_z"),
        ("id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        ("ghp_" + "a" * 36, "ghp_" + "a" * 36),
        ("xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef"),
        ("AIza" + "B" * 35, "AIza" + "B" * 35),
    ],
)
def test_key_shaped_values_are_redacted_anywhere(text: str, secret: str) -> None:
    cleaned = Redactor().clean({"data": {"list": [text, {"deep": (text,)}]}})
    dumped = json.dumps(cleaned)
    assert secret not in dumped
    assert REDACTED in dumped


def test_words_that_merely_contain_sk_are_kept() -> None:
    assert Redactor().text("a task-force of disk-backed runs") == "a task-force of disk-backed runs"


def test_plan_literals_and_extra_patterns() -> None:
    redactor = Redactor(literals=["plan-secret-1", "short"], patterns=[r"corp-\d{6}"])
    assert redactor.text("a plan-secret-1 b corp-123456 c short") == (
        f"a {REDACTED} b {REDACTED} c short"  # literals under 8 characters are not secrets
    )


def test_models_exceptions_and_odd_values_become_json() -> None:
    value: dict[str, Any] = {
        "result": ToolResult(success=False, error={"message": "bad sk-abcdefghijkl1"}),
        "error": ValueError("Bearer abc.def"),
        "blob": b"\x00\x01",
        "nan": float("nan"),
        "set": {1},
    }
    cleaned = Redactor().clean(value)
    json.dumps(cleaned)  # JSON-ready
    assert "sk-abcdefghijkl1" not in json.dumps(cleaned)
    assert cleaned["error"] == {"type": "ValueError", "message": REDACTED}
    assert cleaned["blob"] == "<2 bytes>"
    assert cleaned["nan"] == "nan"
    assert cleaned["set"] == [1]


def test_cycles_end_instead_of_recursing_forever() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    cleaned = Redactor().clean(loop)
    assert "nested too deep" in json.dumps(cleaned)


@pytest.mark.parametrize(
    "key",
    [
        "accessToken",
        "clientSecret",
        "userPassword",
        "refreshToken",
        "privateKey",
        "AccessToken",
        "client-secret",
        "user-password",
        "USER_PASSWORD",
        "X-Auth-Token",
        "Access Token",
        "dbPasswd",
        "sessionCookie",
        "awsSecretAccessKey",
    ],
)
def test_secret_keys_in_any_case_or_separators_are_redacted(key: str) -> None:
    """Before: camelCase keys (``accessToken``) were read as one word and kept in clear."""
    assert Redactor().clean({key: "hunter2-value"}) == {key: REDACTED}
    assert Redactor().clean({"deep": [{key: {"v": "hunter2-value"}}]}) == {
        "deep": [{key: REDACTED}]
    }


@pytest.mark.parametrize("key", ["tokenizer", "authorName", "keyword", "passage", "maxTokens"])
def test_words_that_only_resemble_secret_keys_are_kept(key: str) -> None:
    assert Redactor().clean({key: "plain"}) == {key: "plain"}


@pytest.mark.parametrize(
    "secret",
    ["sk-abcdefghijklmnop1234", "AKIAIOSFODNN7EXAMPLE", "Bearer eyJhbGciOi.J9.x-y_z"],
)
def test_a_secret_shaped_dict_key_is_redacted(secret: str) -> None:
    """Before: keys were written as they were; only values were redacted."""
    cleaned = Redactor().clean({"map": {secret: 1, "other": 2}})
    assert secret not in json.dumps(cleaned)
    assert cleaned == {"map": {REDACTED: 1, "other": 2}}


def test_two_keys_redacted_alike_stay_two_entries() -> None:
    cleaned = Redactor().clean({"sk-aaaaaaaaaaaa1": 1, "sk-bbbbbbbbbbbb2": 2})
    assert sorted(cleaned.values()) == [1, 2]


def test_json_text_is_redacted_as_data() -> None:
    """Before: a tool result's secret, redacted on ``tool:post``, travelled in clear as
    the JSON text of the tool message inside every later request."""
    text = json.dumps({"accessToken": "opaque-value-123", "items": [1, 2]})
    twice = json.dumps({"content": text})
    for value in (text, twice, f"  {text}\n"):
        cleaned = json.dumps(Redactor().clean({"messages": [{"content": value}]}))
        assert "opaque-value-123" not in cleaned
        assert REDACTED in cleaned


@pytest.mark.parametrize(
    "text",
    [
        'result {"clientSecret": "opaque-value-123"} end',
        'escaped {\\"clientSecret\\": \\"opaque-value-123\\"} end',
        "password=opaque-value-123 next",
        "api-key: opaque-value-123",
        "userPassword = 'opaque-value-123'",
    ],
)
def test_secret_assignments_in_free_text_are_redacted(text: str) -> None:
    cleaned = Redactor().text(text)
    assert "opaque-value-123" not in cleaned
    assert REDACTED in cleaned


def test_numbers_and_flags_in_assignments_stay_readable() -> None:
    assert Redactor().text("token_count=12 auth: true password: null") == (
        "token_count=12 auth: true password: null"
    )


def test_a_value_redacted_for_its_key_is_redacted_wherever_it_turns_up_later() -> None:
    redactor = Redactor()
    assert redactor.clean({"clientSecret": "opaque-value-123"}) == {"clientSecret": REDACTED}
    assert redactor.text("the secret was opaque-value-123.") == f"the secret was {REDACTED}."
