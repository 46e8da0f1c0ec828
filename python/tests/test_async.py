"""asyncio: run_async never blocks the event loop (a ticker keeps ticking
while a run goes on), and cancelling the awaiting task aborts the run."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, List, Tuple

import warpline


def slow_job(count: int) -> Dict[str, Any]:
    return {
        "pipeline": {"name": "slow", "flow": ["work"]},
        "source": {"kind": "generate", "count": count},
        "stages": {"work": {"kind": "slow", "workers": 1}},
    }


def register_slow(registered: List[str]) -> None:
    @warpline.stage("slow", takes="any", hands_on="any")
    def slow(item: warpline.Item) -> None:
        time.sleep(0.02)

    registered.append("slow")


def test_run_async_leaves_the_event_loop_responsive(registered: List[str]) -> None:
    register_slow(registered)

    async def main() -> Tuple[warpline.Report, int]:
        ticks = 0
        running = True

        async def ticker() -> None:
            nonlocal ticks
            while running:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        report = await warpline.run_async(slow_job(40))
        seen = ticks
        running = False
        await task
        return report, seen

    report, ticks = asyncio.run(main())
    assert report.items.done == 40
    # 40 calls of 20 ms on one worker: the run lasts 0.8 s or more, and a
    # loop that was never blocked ticked all along (a blocked one: never).
    assert report.elapsed_s >= 0.8
    assert ticks >= 0.2 * report.elapsed_s / 0.01, (ticks, report.elapsed_s)


def test_cancelling_the_awaiting_task_aborts_the_run(registered: List[str]) -> None:
    register_slow(registered)

    async def main() -> warpline.RunHandle:
        handle = warpline.spawn(slow_job(100000))
        task = asyncio.create_task(handle.report_async())
        async for e in handle.events():
            if e.kind == "done":
                break
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return handle

    handle = asyncio.run(main())
    assert handle.wait(30.0)
    report = handle.report()
    assert report.outcome == "aborted"
    assert 1 <= report.items.done < 100000
