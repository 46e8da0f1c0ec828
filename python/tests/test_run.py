"""Running pipelines from Python: a path, TOML text and a dict are the same
pipeline and give the same outputs; the report is the binary's, typed; the
report's classes name exactly the fields of the engine's JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Set, Type

import pytest

import warpline
from warpline._records import Record

from conftest import TILES, gdalinfo, outputs, pipeline_dict, toml_text


def test_a_path_a_string_and_a_dict_run_the_same_pipeline(tiles: Path, tmp_path: Path) -> None:
    names = {}
    for how in ("path", "string", "dict"):
        out = tmp_path / f"out-{how}"
        d = pipeline_dict(tiles, out)
        if how == "dict":
            given: Any = d
        elif how == "string":
            given = toml_text(d)
        else:
            given = tmp_path / "pipeline.toml"
            given.write_text(toml_text(d))
        report = warpline.run(given)
        assert (report.items.done, report.items.failed) == (TILES, 0), str(report)
        assert report.outcome == "completed"
        assert report.pipeline == "local"
        names[how] = [p.name for p in outputs(out)]
        for p in outputs(out):
            assert "Pseudo-Mercator" in gdalinfo(p)["coordinateSystem"]["wkt"]
    assert names["path"] == names["string"] == names["dict"]
    assert len(names["path"]) == TILES


def test_the_report_is_typed_and_the_json_the_binary_writes(tiles: Path, tmp_path: Path) -> None:
    out, file = tmp_path / "out", tmp_path / "report.json"
    report = warpline.run(pipeline_dict(tiles, out), report=file)
    written = json.loads(file.read_text())
    assert report.to_dict() == written
    assert report.items.done == written["items"]["done"] == TILES
    assert report.stages.names() == ["fetch", "decode", "reproject", "write"]
    assert report.stages["reproject"] is report.stages[2]
    assert report.stages["reproject"].processed == TILES
    assert report.limiters["cpu"].capacity == 2
    assert 0 < report.limiters["cpu"].peak_in_use <= 2  # type: ignore[operator]
    assert report.bytes_out > 0
    assert "items" in str(report) and report.pipeline in str(report)
    with pytest.raises(KeyError):
        report.stages["nope"]


def test_set_overrides_keys_as_the_command_line_does(tiles: Path, tmp_path: Path) -> None:
    p = warpline.plan(
        pipeline_dict(tiles, tmp_path / "o"),
        set={"stages.decode.workers": 3, "stages.reproject.crs": "EPSG:4326"},
    )
    assert p.stages["decode"].workers == 3


def keys_of(cls: Type[Record]) -> Set[str]:
    return set(cls.fields())


def check_fields(cls: Type[Record], data: Dict[str, Any]) -> None:
    """The class names every key of the JSON, and nothing the JSON lacks
    except the fields it leaves out when empty."""
    have = set(data)
    assert have <= keys_of(cls), f"{cls.__name__} lacks {have - keys_of(cls)}"
    extra = keys_of(cls) - have
    assert extra <= set(cls._optional), f"{cls.__name__} names {extra}, not in the JSON"


def test_the_report_classes_name_exactly_the_json_fields(tiles: Path, tmp_path: Path) -> None:
    report = warpline.run(pipeline_dict(tiles, tmp_path / "o"))
    d = report.to_dict()
    check_fields(warpline.Report, d)
    check_fields(warpline.ItemCounts, d["items"])
    for s in d["stages"]:
        check_fields(warpline.StageReport, s)
    for limiter in d["limiters"]:
        check_fields(warpline.LimiterReport, limiter)
    for h in d["hosts"]:
        check_fields(warpline.HostReport, h)
    # A raster pipeline knows where each output lies.
    assert len(d["footprints"]) == report.items.done > 0
    for f in d["footprints"]:
        check_fields(warpline.ItemFootprint, f)
    assert {f.outcome for f in report.footprints} == {"done"}
    plan = warpline.plan(pipeline_dict(tiles, tmp_path / "o"))
    pd = plan.to_dict()
    check_fields(warpline.Plan, pd)
    for s in pd["stages"]:
        check_fields(warpline.PlannedStage, s)
    for limiter in pd["limiters"]:
        check_fields(warpline.PlannedLimiter, limiter)


def test_a_failed_item_is_in_the_report_with_its_message(tmp_path: Path) -> None:
    bad = tmp_path / "in"
    bad.mkdir()
    (bad / "broken.tif").write_bytes(b"not a tiff")
    report = warpline.run(pipeline_dict(bad, tmp_path / "o"))
    assert (report.items.done, report.items.failed) == (0, 1)
    (failure,) = report.failures
    assert failure.stage == "decode" and "broken" in failure.id
    check_fields(warpline.Failure, failure.to_dict())


def test_a_source_that_cannot_open_raises_run_error(tmp_path: Path) -> None:
    p = {
        "pipeline": {"flow": ["w"]},
        "source": {"kind": "list", "path": str(tmp_path / "missing.txt")},
        "stages": {"w": {"kind": "discard"}},
    }
    with pytest.raises(warpline.RunError, match="missing.txt"):
        warpline.run(p)


def test_the_demo_runs_as_the_binary_runs_it(tmp_path: Path) -> None:
    report = warpline.demo(tmp_path, set={"stages.write.workers": 1})
    assert report.pipeline == "demo"
    assert report.items.failed == 0 and report.items.done == report.items.total == 24
    assert len(outputs(tmp_path / "output")) == 24
    assert len(list((tmp_path / "output").glob("*.json"))) == 24 + 1  # items, collection
    assert report.hosts[0].requests >= 24
