"""Watching a run: its events name each item's end, and the progress
callback's counts are the report's."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import List

import warpline

from conftest import TILES, pipeline_dict


def test_events_and_progress_counts_match_the_report(tiles: Path, tmp_path: Path) -> None:
    bad = tmp_path / "in"
    bad.mkdir()
    for t in sorted(tiles.iterdir())[:3]:
        (bad / t.name).write_bytes(t.read_bytes())
    (bad / "broken.tif").write_bytes(b"not a tiff")
    handle = warpline.spawn(pipeline_dict(bad, tmp_path / "o"))
    events = list(handle.events())
    seen: List[warpline.Progress] = []
    report = handle.report(progress=seen.append, progress_interval=0.05)
    kinds = Counter(e.kind for e in events)
    assert kinds["run_started"] == kinds["run_finished"] == 1
    assert events[0].kind == "run_started" and events[-1].kind == "run_finished"
    assert kinds["done"] == report.items.done == 3
    assert kinds["failed"] == report.items.failed == 1
    assert kinds["admitted"] == report.items.total == 4
    done_ids = {e.item for e in events if e.kind == "done"}
    failed = [e for e in events if e.kind == "failed"]
    assert done_ids == {t.stem for t in sorted(tiles.iterdir())[:3]}
    assert failed[0].item and "broken" in failed[0].item and failed[0].stage == "decode"
    assert failed[0].message
    last = seen[-1]
    assert last.finished
    assert (last.done, last.failed, last.skipped) == (3, 1, 0)
    assert last.total == 4 and last.eta_s == 0.0
    assert all(a.ended <= b.ended for a, b in zip(seen, seen[1:]))


def test_a_rerun_skips_and_says_so(tiles: Path, tmp_path: Path) -> None:
    p = pipeline_dict(tiles, tmp_path / "o")
    p["stages"]["write"]["exists"] = "skip"
    warpline.run(p)
    handle = warpline.spawn(p)
    skipped = [e for e in handle.events() if e.kind == "skipped"]
    report = handle.report()
    assert report.items.skipped == len(skipped) == TILES
    assert all(e.message for e in skipped)


def test_events_iterate_asynchronously(tiles: Path, tmp_path: Path) -> None:
    async def main() -> int:
        handle = warpline.spawn(pipeline_dict(tiles, tmp_path / "o"))
        done = 0
        async for e in handle.events():
            done += e.kind == "done"
        report = await handle.report_async()
        assert report.items.done == done
        return done

    assert asyncio.run(main()) == TILES
