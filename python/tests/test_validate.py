"""Validation reports every problem at once, each at its key path, as
`warpline validate` does; `run` raises the same problems as a
PipelineError; `plan` is the binary's plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

import pytest

import warpline

from conftest import pipeline_dict


def three_mistakes(tiles: Path, out: Path) -> Dict[str, Any]:
    p = pipeline_dict(tiles, out)
    p["stages"]["decode"]["workers"] = 0  # a stage with no workers
    p["stages"]["reproject"]["resampling"] = "bilinearr"  # a misspelt word
    p["stages"]["write"]["formatt"] = "COG"  # a misspelt key
    return p


def test_three_mistakes_are_all_reported_with_their_key_paths(tiles: Path, tmp_path: Path) -> None:
    v = warpline.validate(three_mistakes(tiles, tmp_path / "o"))
    assert not v.valid and not v
    paths = [p.path for p in v.problems]
    assert "stages.decode.workers" in paths
    assert "stages.reproject.resampling" in paths
    assert any(p.startswith("stages.write") for p in paths), paths
    assert len(v.problems) == 3, v.problems
    by_path = {p.path: p for p in v.problems}
    assert "bilinear" in by_path["stages.reproject.resampling"].message
    assert all(p.tier in ("schema", "graph", "environment") for p in v.problems)


def test_run_raises_every_problem_as_a_pipeline_error(tiles: Path, tmp_path: Path) -> None:
    with pytest.raises(warpline.PipelineError) as caught:
        warpline.run(three_mistakes(tiles, tmp_path / "o"))
    e = caught.value
    assert len(e.problems) == 3
    pairs = [(p.path, p.message) for p in e.problems]
    assert ("stages.decode.workers", e.problems[0].message) in pairs or any(
        path == "stages.decode.workers" for path, _ in pairs
    )
    assert "3 problems" in str(e)
    assert isinstance(e, ValueError)


def test_a_valid_pipeline_has_its_admission_bound_and_its_plan(tiles: Path, tmp_path: Path) -> None:
    p = pipeline_dict(tiles, tmp_path / "o")
    v = warpline.validate(p)
    assert v.valid and v.problems == [] and v.admission_bound is not None
    plan = warpline.plan(p)
    assert plan.admission_bound == v.admission_bound
    assert plan.stages.names() == ["fetch", "decode", "reproject", "write"]
    assert plan.stages["decode"].workers_are == "blocking"
    assert plan.limiters["memory"].capacity == 256 << 20
    assert "admission bound" in str(plan)


def test_a_path_that_is_no_file_is_a_problem_at_the_file(tmp_path: Path) -> None:
    v = warpline.validate(tmp_path / "nope.toml")
    assert [p.path for p in v.problems] == ["<file>"]
    with pytest.raises(TypeError):
        warpline.validate(42)  # type: ignore[arg-type]
