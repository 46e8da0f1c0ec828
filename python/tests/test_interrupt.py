"""Ctrl-C while `run` waits drains the run as `warpline run` does: no new
inputs, the items in flight finish, and only complete outputs are on disk;
the KeyboardInterrupt is raised after, with the report."""

from __future__ import annotations

import _thread
import time
from pathlib import Path
from typing import List

import pytest

import warpline

from conftest import gdalinfo, outputs, pipeline_dict, read_pixels


def test_keyboard_interrupt_drains_and_leaves_only_complete_outputs(
    tmp_path: Path, registered: List[str]
) -> None:
    tiles = tmp_path / "in"
    warpline.sample_tiles(tiles, per_crs=6, size=128)
    calls = []

    @warpline.stage("interrupting")
    def interrupting(raster: warpline.Raster) -> None:
        calls.append(raster.id)
        if len(calls) == 2:
            _thread.interrupt_main()  # as Ctrl-C would
        time.sleep(0.02)

    registered.append("interrupting")
    out = tmp_path / "out"
    p = pipeline_dict(tiles, out, {"kind": "interrupting"}, workers=1, mailbox=1)
    with pytest.raises(KeyboardInterrupt) as caught:
        warpline.run(p)
    report: warpline.Report = getattr(caught.value, "report")
    assert report.outcome == "stopped"
    # Every admitted item finished; the rest were never admitted.
    assert report.items.failed == 0
    assert 2 <= report.items.done == report.items.total < 24
    assert report.items.not_admitted == 24 - report.items.total
    files = outputs(out)
    assert len(files) == report.items.done
    for f in files:
        assert f.suffix == ".tif" and not f.name.startswith(".")
        assert len(gdalinfo(f)["bands"]) == 3
        assert read_pixels(f, tmp_path).any()
