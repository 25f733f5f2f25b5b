"""The cost of hooks-otel on the fan-out turn: ``python -m benchmarks.bench_otel``.

The fan-out turn of ``amplifier-anyio bench`` (loop-basic, N parallel calls of a tool that
sleeps D, a real ModuleCoordinator, the lean context) timed in four variants, interleaved
repeat by repeat with the rules of :mod:`amplifier_anyio.bench.timing`:

* ``floor`` — a bare task group doing the same sleeps;
* ``without`` — the turn, no hook;
* ``otel-api`` — hooks-otel mounted with the API's own providers (no SDK installed as the
  global one: every span is a non-recording no-op), what an application that has not set
  up OpenTelemetry pays;
* ``otel-sdk`` — hooks-otel with the SDK: a ``TracerProvider`` whose span processor hands
  every span to an exporter that drops it, and a ``MeterProvider`` with a reader (so the
  histograms aggregate): the full cost of recording, without any I/O.

Options: ``--backend asyncio|trio`` (repeatable), ``--size N`` (repeatable), ``--delay-ms D``
(repeatable), ``--repeats R``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

import anyio
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from amplifier_anyio.bench import LeanContext, SleepTool, taskgroup_floor
from amplifier_anyio.bench.timing import Timing, time_variants
from amplifier_anyio.hooks.otel import OtelHook
from amplifier_anyio.kernel import ModuleCoordinator
from amplifier_anyio.models import ChatResponse, TextBlock, ToolCall
from amplifier_anyio.orchestrators import LoopBasicOrchestrator
from amplifier_anyio.providers.scripted import ScriptedProvider

VARIANTS = ("floor", "without", "otel-api", "otel-sdk")


class DropExporter(SpanExporter):
    """Takes every span and keeps none."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def sdk_providers() -> dict[str, Any]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(DropExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return {"tracer_provider": tracer_provider, "meter_provider": meter_provider}


def prepare_turn(n: int, delay: float, otel: dict[str, Any] | None) -> Callable[[], Any]:
    calls = [ToolCall(id=f"call_{i}", name=SleepTool.name) for i in range(n)]
    first = ChatResponse(tool_calls=calls, finish_reason="tool_calls")
    final = ChatResponse(content=[TextBlock(text="done")], finish_reason="stop")
    tools = {SleepTool.name: SleepTool(delay)}

    def prepare() -> Any:
        coordinator = ModuleCoordinator()
        if otel is not None:
            OtelHook(otel, coordinator=coordinator).register(coordinator.hooks)
        context = LeanContext()
        provider = ScriptedProvider([first, final])

        async def turn() -> None:
            result = await LoopBasicOrchestrator().run_turn(
                "fan out",
                context,
                {"p": provider},
                tools,
                coordinator.hooks,
                coordinator=coordinator,
            )
            assert result.status == "success", result.status
            assert sum(m.get("role") == "tool" for m in context.messages) == n

        return turn

    return prepare


def prepare_floor(n: int, delay: float) -> Callable[[], Any]:
    def prepare() -> Any:
        async def run() -> None:
            await taskgroup_floor(n, delay)

        return run

    return prepare


async def measure(sizes: list[int], delays: list[float], repeats: int) -> list[dict[str, Any]]:
    rows = []
    sdk = sdk_providers()
    for delay in delays:
        for n in sizes:
            prepare = {
                "floor": prepare_floor(n, delay),
                "without": prepare_turn(n, delay, None),
                "otel-api": prepare_turn(n, delay, {}),
                "otel-sdk": prepare_turn(n, delay, sdk),
            }
            await prepare["otel-sdk"]()()  # one warm-up
            timings: dict[str, Timing] = await time_variants(prepare, repeats)
            rows.append({"n": n, "delay_ms": delay * 1000, **timings})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_otel")
    parser.add_argument("--backend", action="append", choices=["asyncio", "trio"])
    parser.add_argument("--size", action="append", type=int)
    parser.add_argument("--delay-ms", action="append", type=float)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    backends = args.backend or ["asyncio", "trio"]
    sizes = args.size or [100, 1_000]
    delays = [d / 1000 for d in (args.delay_ms or [0.0, 10.0])]
    print(
        "| backend |     N | D ms | floor | without | otel-api | otel-sdk "
        "| api/without | sdk/without | sdk µs/call |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for backend in backends:
        rows = anyio.run(measure, sizes, delays, args.repeats, backend=backend)
        for row in rows:
            ms = {v: row[v].median * 1000 for v in VARIANTS}
            per_call = (ms["otel-sdk"] - ms["without"]) * 1000 / row["n"]
            print(
                f"| {backend} | {row['n']:,} | {row['delay_ms']:g} | {ms['floor']:.1f} "
                f"| {ms['without']:.1f} | {ms['otel-api']:.1f} | {ms['otel-sdk']:.1f} "
                f"| {ms['otel-api'] / ms['without']:.2f} | {ms['otel-sdk'] / ms['without']:.2f} "
                f"| {per_call:.1f} |"
            )


if __name__ == "__main__":
    main()
