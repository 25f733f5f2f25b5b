"""Prices per million tokens → ``Usage.cost_usd`` (a Decimal), on both HTTP providers."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest

from amplifier_anyio.errors import ConfigError, ValidationError
from amplifier_anyio.models import (
    ChatRequest,
    Message,
    Price,
    PriceTable,
    Usage,
    structure,
    unstructure,
)
from amplifier_anyio.providers.anthropic import AnthropicProvider
from amplifier_anyio.providers.openai import OpenAIChatProvider

pytestmark = pytest.mark.anyio

SONNET = {
    "input_per_mtok": 3,
    "output_per_mtok": 15,
    "cache_read_per_mtok": "0.30",
    "cache_write_per_mtok": 3.75,
}


def test_a_call_costs_fresh_input_cache_reads_writes_and_output_at_their_prices() -> None:
    price = Price.from_config(SONNET)
    usage = Usage(
        input_tokens=10_000,
        output_tokens=1_000,
        total_tokens=11_000,
        cache_read_tokens=8_000,
        cache_write_tokens=1_000,
    )
    # 1000 fresh * 3 + 8000 * 0.30 + 1000 * 3.75 + 1000 * 15, per million
    assert price.cost(usage) == Decimal("0.02415")


def test_a_missing_cache_price_is_the_input_price() -> None:
    price = Price.from_config({"input_per_mtok": 2, "output_per_mtok": 8})
    usage = Usage(input_tokens=1_000_000, output_tokens=0, cache_read_tokens=500_000)
    assert price.cost(usage) == Decimal(2)


def test_many_small_costs_add_up_exactly() -> None:
    price = Price.from_config({"input_per_mtok": 0.15, "output_per_mtok": 0.6})
    one = Usage(input_tokens=7, output_tokens=3, total_tokens=10)
    total = Usage()
    for _ in range(1000):
        total = total + Usage(**{**_fields(one), "cost_usd": price.cost(one)})
    assert total.cost_usd == Decimal("0.00285")  # float arithmetic would drift here
    assert total.input_tokens == 7000


def _fields(usage: Usage) -> dict[str, Any]:
    return {k: v for k, v in unstructure(usage).items() if k != "cost_usd"}


def test_by_model_snapshots_and_the_default() -> None:
    table = PriceTable.from_config(
        {
            "gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10},
            "gpt-4o-mini": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
            "*": {"input_per_mtok": 1, "output_per_mtok": 1},
        }
    )
    assert table.price_of("gpt-4o-2024-08-06") == table.prices["gpt-4o"]
    assert table.price_of("gpt-4o-mini-2024-07-18") == table.prices["gpt-4o-mini"]
    assert table.price_of("o3") == table.prices["*"]
    # the model asked for wins over the one that answered, and both over "*"
    assert table.price_of("unknown", "gpt-4o-mini") == table.prices["gpt-4o-mini"]
    assert PriceTable.from_config({"x": SONNET}).price_of("y") is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"input_per_mtok": -1, "output_per_mtok": 1}, "pricing.input_per_mtok: expected a finite"),
        ({"input_per_mtok": True, "output_per_mtok": 1}, "pricing.input_per_mtok"),
        ({"input_per_mtok": 1}, "pricing.output_per_mtok: required"),
        ({"input_per_mtok": 1, "output_per_mtok": 1, "per_call": 1}, "pricing.per_call: unknown"),
        (
            {"gpt-4o": {"input_per_mtok": "lots", "output_per_mtok": 1}},
            "pricing.gpt-4o.input_per_mtok",
        ),
        ({"gpt-4o": 3}, "pricing.gpt-4o: expected a table"),
        ({"input_per_mtok": float("nan"), "output_per_mtok": 1}, "pricing.input_per_mtok"),
    ],
)
def test_a_bad_price_is_a_config_error_naming_the_key(config: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PriceTable.from_config(config)
    with pytest.raises(ConfigError, match=message):
        OpenAIChatProvider({"api_key": "k", "pricing": config})


def test_cost_usd_is_text_in_json_and_never_a_float() -> None:
    usage = Usage(input_tokens=1, output_tokens=1, total_tokens=2, cost_usd=Decimal("0.000018"))
    data = unstructure(usage)
    assert data["cost_usd"] == "0.000018"
    assert structure(json.loads(json.dumps(data)), Usage) == usage
    with pytest.raises(
        ValidationError, match="cost_usd: expected a decimal number as text, got float"
    ):
        structure({**data, "cost_usd": 0.1}, Usage)
    with pytest.raises(TypeError, match="cost_usd"):
        Usage(cost_usd=0.1)  # type: ignore[arg-type]


def test_usage_sums_keep_an_unknown_cost_unknown() -> None:
    assert (Usage() + Usage()).cost_usd is None
    priced = Usage(cost_usd=Decimal("0.5"))
    assert (priced + Usage()).cost_usd == Decimal("0.5")


def anthropic_message(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


async def test_anthropic_prices_its_cache_split() -> None:
    usage = {
        "input_tokens": 1000,
        "output_tokens": 1000,
        "cache_read_input_tokens": 8000,
        "cache_creation_input_tokens": 1000,
    }
    transport = httpx.MockTransport(lambda _r: httpx.Response(200, json=anthropic_message(usage)))
    config = {
        "api_key": "k",
        "model": "claude-sonnet-4-5",
        "pricing": {"claude-sonnet-4-5": SONNET},
    }
    provider = AnthropicProvider(config, transport=transport)
    response = await provider.complete(ChatRequest(messages=[Message(role="user", content="x")]))
    assert response.usage is not None
    assert response.usage.input_tokens == 10_000
    assert response.usage.cost_usd == Decimal("0.02415")
    await provider.http.aclose()


async def test_a_stream_is_priced_too() -> None:
    chunks = [
        {
            "id": "c",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}],
        },
        {
            "id": "c",
            "model": "gpt-4o",
            "choices": [],
            "usage": {
                "prompt_tokens": 1_000_000,
                "completion_tokens": 0,
                "total_tokens": 1_000_000,
            },
        },
    ]
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    transport = httpx.MockTransport(lambda _r: httpx.Response(200, content=body.encode()))
    config = {
        "api_key": "k",
        "model": "gpt-4o",
        "pricing": {"input_per_mtok": 2.5, "output_per_mtok": 10},
    }
    provider = OpenAIChatProvider(config, transport=transport)
    async with provider.open_stream(
        ChatRequest(messages=[Message(role="user", content="x")])
    ) as events:
        final = [e async for e in events][-1]["response"]
    assert final.usage.cost_usd == Decimal("2.5")
    await provider.http.aclose()


async def test_without_a_price_the_cost_stays_unknown() -> None:
    usage = {"input_tokens": 10, "output_tokens": 5}
    transport = httpx.MockTransport(lambda _r: httpx.Response(200, json=anthropic_message(usage)))
    provider = AnthropicProvider({"api_key": "k"}, transport=transport)
    response = await provider.complete(ChatRequest(messages=[Message(role="user", content="x")]))
    assert response.usage is not None
    assert response.usage.cost_usd is None
    await provider.http.aclose()
