"""A request cancelled while its body is being sent leaves nothing to the garbage collector.

The loser of a hedged race (or a turn cancelled mid-request) can be cancelled while
httpcore is still writing the request body. httpx's own body is an async generator; left
unfinished, it is finalised by the garbage collector, which trio reports as a
ResourceWarning ("Async generator ... was garbage collected before it had been
exhausted"). The server here reads the first bytes of the request, then stops reading, so
the client's write blocks on a full socket buffer until the cancel.
"""

from __future__ import annotations

import gc
import warnings
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import SocketStream

from amplifier_anyio.models import ChatRequest, Message
from amplifier_anyio.providers.openai import OpenAIChatProvider

pytestmark = pytest.mark.anyio

BODY_BYTES = 64 * 1024 * 1024  # far past any socket buffer of the loopback interface


async def test_a_request_cancelled_mid_body_leaves_no_unfinished_generator() -> None:
    started = anyio.Event()
    release = anyio.Event()

    async def stalled(stream: SocketStream) -> None:
        async with stream:
            await stream.receive()  # the request has begun: the body is on its way
            started.set()
            await release.wait()  # never read again while the client writes

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    config: dict[str, Any] = {
        "api_key": "sk-test",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": "m",
        "max_retries": 0,
    }
    request = ChatRequest(messages=[Message(role="user", content="x" * BODY_BYTES)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with listener, anyio.create_task_group() as group:
            group.start_soon(listener.serve, stalled)
            provider = OpenAIChatProvider(config)
            try:
                async with anyio.create_task_group() as call:
                    call.start_soon(provider.complete, request)
                    await started.wait()
                    await anyio.sleep(0.05)  # the client is blocked in its write
                    call.cancel_scope.cancel()
                del call
                gc.collect()
                await anyio.lowlevel.checkpoint()  # trio finalises abandoned generators on its loop
            finally:
                release.set()
                await provider.http.aclose()
                group.cancel_scope.cancel()
    unfinished = [str(w.message) for w in caught if "Async generator" in str(w.message)]
    assert unfinished == []
