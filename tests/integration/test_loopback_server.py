"""The provider tests' loopback HTTP server (tests/_loopback.py) serves a client that leaves.

A hedged request's loser is cancelled while it may still be sending its body; under load
the server then read a short body and failed the test that owned it (once in two default
tiers run at once: test_hedged_requests_end_with_one_answer_and_nothing_left[trio]).
"""

from __future__ import annotations

import anyio
import pytest

from _loopback import Reply, Request, open_loopback

pytestmark = pytest.mark.anyio


async def answer(request: Request) -> Reply:
    return Reply(json={"ok": True})


async def test_a_client_that_leaves_mid_body_is_not_the_servers_error() -> None:
    async with open_loopback(answer) as server:
        port = int(server.url.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as client:
            await client.send(b"POST /v1/responses HTTP/1.1\r\ncontent-length: 10\r\n\r\n{}")
        with anyio.fail_after(10):
            await server.wait_idle()

    assert server.requests == []  # nothing was asked: no reply was owed
