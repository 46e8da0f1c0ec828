"""Not a test: code a user writes, checked by mypy (--strict) in
scripts/test-python.sh so the package's annotations and the extension
module's stubs say what the API gives."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import List, Optional

import numpy as np

import warpline


@warpline.stage("typed-ndvi", memory=64 << 20)
def typed_ndvi(raster: warpline.Raster, *, a: int = 3, b: int = 1) -> warpline.Raster:
    x = raster.read(a, dtype=np.float32)
    y = raster.read(b, dtype="float32")
    gt: Optional[tuple[float, float, float, float, float, float]] = raster.geo_transform
    assert gt is None or gt[1] != 0
    return raster.with_bands([(x - y) / (x + y)], nodata=float("nan"))


def use(path: Path) -> int:
    report: warpline.Report = warpline.run(path, set={"stages.decode.workers": 2})
    done: int = report.items.done
    busy: float = report.stages["decode"].busy_s
    peak: Optional[int] = report.limiters[0].peak_in_use
    v = warpline.validate({"pipeline": {"flow": []}})
    problems: List[warpline.Problem] = v.problems
    pairs = [(p.path, p.message) for p in problems]
    plan = warpline.plan(str(path))
    bound: int = plan.admission_bound
    limits = warpline.Limits()
    limits.count("cpu", 2)
    handle = warpline.spawn(path, limits=limits)
    for event in handle.events():
        item: Optional[str] = event.item
        print(event.kind, item)
    p: warpline.Progress = handle.progress()
    eta: Optional[float] = p.eta_s
    print(busy, peak, pairs, bound, eta)
    return done


async def use_async(path: Path) -> int:
    report = await warpline.run_async(path, progress=lambda p: print(p.done))
    handle = warpline.spawn(path)
    async for event in handle.events():
        print(event.kind)
    again = await handle.report_async()
    return report.items.done + again.items.failed


def errors(path: Path) -> None:
    try:
        warpline.run(path)
    except warpline.PipelineError as e:
        for problem in e.problems:
            print(problem.path, problem.message, problem.tier)
    except warpline.RunError as e:
        print(e)


if __name__ == "__main__":
    asyncio.run(use_async(Path("p.toml")))
