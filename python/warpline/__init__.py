"""warpline: an actor-based dataflow engine for geospatial raster batch work,
from Python.

Pipelines declared in TOML (or given as a dict) fetch, decode, reproject
and write GeoTIFF / COG, with every resource bounded by a named limiter and
every input accounted for. This package runs them on warpline's Rust
engine, in the same process: the GIL is released while the engine works.

- :func:`run`, :func:`run_async`, :func:`spawn`: run a pipeline (a path,
  TOML text or a dict) and get its :class:`Report`; watch it with
  :class:`Events` and :class:`Progress`, stop or abort it;
- :func:`validate`, :func:`plan`: what ``warpline validate`` and
  ``warpline plan`` say, as objects;
- :func:`stage`: a stage written in Python over numpy arrays;
- :class:`Limits`: limiters shared by several runs of the process;
- :class:`PipelineError` (every problem, each with its key path),
  :class:`RunError`;
- :func:`demo`, :func:`sample_tiles`: the binary's demo, and its tiles.

See docs/python.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from . import _warpline
from ._errors import PipelineError, Problem, RunError, WarplineError
from ._records import (
    ByName,
    Event,
    Failure,
    HostReport,
    ItemCounts,
    ItemFootprint,
    LimiterReport,
    Plan,
    PlannedLimiter,
    PlannedStage,
    Progress,
    Report,
    StageReport,
    Validation,
)
from ._run import (
    Events,
    PipelineLike,
    RunHandle,
    demo,
    run,
    run_async,
    spawn,
    spawn_demo,
)
from ._stage import stage, stage_kinds, unregister

Limits = _warpline.Limits
Raster = _warpline.Raster
Item = _warpline.Item

__version__: str = _warpline.__version__

__all__ = [
    "ByName",
    "Event",
    "Events",
    "Failure",
    "HostReport",
    "Item",
    "ItemCounts",
    "ItemFootprint",
    "LimiterReport",
    "Limits",
    "PipelineError",
    "PipelineLike",
    "Plan",
    "PlannedLimiter",
    "PlannedStage",
    "Problem",
    "Progress",
    "Raster",
    "Report",
    "RunError",
    "RunHandle",
    "StageReport",
    "Validation",
    "WarplineError",
    "demo",
    "plan",
    "run",
    "run_async",
    "sample_tiles",
    "spawn",
    "spawn_demo",
    "stage",
    "stage_kinds",
    "unregister",
    "validate",
    "versions",
]


def validate(
    pipeline: PipelineLike,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[Limits] = None,
    env: bool = False,
) -> Validation:
    """Checks ``pipeline`` as ``warpline validate`` does, every tier in one
    pass (the file's shape, how its parts connect, this machine), and
    returns every problem with its key path; never raises for a problem.
    The arguments are :func:`spawn`'s."""
    sets = None if set is None else dict(set)
    return Validation(json.loads(_warpline.validate(pipeline, set=sets, limits=limits, env=env)))


def plan(
    pipeline: PipelineLike,
    *,
    set: Optional[Mapping[str, Any]] = None,
    limits: Optional[Limits] = None,
    env: bool = False,
) -> Plan:
    """The pipeline as it will run, every number resolved, as ``warpline
    plan`` shows it. Raises :class:`PipelineError`."""
    sets = None if set is None else dict(set)
    return Plan._from_native(_warpline.plan(pipeline, set=sets, limits=limits, env=env))


def sample_tiles(dir: "str | os.PathLike[str]", *, per_crs: int = 2, size: int = 256) -> List[Path]:
    """Writes ``per_crs`` small GeoTIFF tiles of ``size`` x ``size`` pixels
    in each of four CRSs (three Byte bands, a nodata border) to ``dir``,
    made on the spot (the demo's tiles); their paths."""
    return [Path(p) for p in _warpline.sample_tiles(Path(os.fspath(dir)), per_crs=per_crs, size=size)]


def versions() -> Dict[str, str]:
    """The GDAL and PROJ this module runs, and which loop warps and why."""
    gdal, proj, warp = _warpline.versions()
    return {"gdal": gdal, "proj": proj, "warp_path": warp}
