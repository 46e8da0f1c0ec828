"""The mixed scenario's pipeline run from Python through the ``warpline``
package: the raster bench's ``mixed-pyapi`` and ``mixed-pystage``
scenarios (``benches/raster/pyapi.rs``), whose figures are set beside the
same pipeline run by the ``warpline`` binary (``mixed-cli``).

    python3 pyapi.py run PIPELINE      # warpline.run(PIPELINE)
    python3 pyapi.py stage PIPELINE    # the same with a pass-through stage
                                       # written in Python after reproject

PIPELINE is the TOML file the bench wrote. ``stage`` adds ``passthrough``,
registered with ``@warpline.stage``: it reads every band as a numpy array
and hands them back as a new raster (``with_bands``), under the same
limits as reproject. Prints one line of figures, as the bench's children
do: tiles, wall_s (around ``warpline.run``: compiling, the run, the report
made a Python object), tiles_per_s, engine_wall_s and engine_tiles_per_s
(the run as the engine timed it), cpu_ms_per_tile, page_faults_per_tile
(minor faults), peak_rss_mib, and with
``stage`` the stage's own busy and CPU ms per tile from the report.

Needs Python 3.11 (tomllib) and the ``warpline`` package built with
``--release`` (``scripts/wheel.sh VENV`` makes such a venv).
"""

from __future__ import annotations

import resource
import sys
import time
import tomllib
from typing import Any, Dict, List

import numpy as np

import warpline

STAGE = "passthrough"


@warpline.stage(STAGE, takes="raster", hands_on="raster")
def passthrough(raster: warpline.Raster) -> warpline.Raster:
    """Every band in as a numpy array, and out again as a new raster."""
    bands: List[np.ndarray] = [raster.read(b) for b in range(1, raster.count + 1)]
    return raster.with_bands(bands, nodata=raster.nodata[0])


def with_stage(path: str) -> Dict[str, Any]:
    """The pipeline of ``path`` with ``passthrough`` between reproject and
    write, limited as reproject is."""
    with open(path, "rb") as f:
        pipeline = tomllib.load(f)
    flow: List[str] = pipeline["pipeline"]["flow"]
    flow.insert(flow.index("write"), STAGE)
    reproject = pipeline["stages"]["reproject"]
    pipeline["stages"][STAGE] = {
        "kind": STAGE,
        **{k: reproject[k] for k in ("workers", "limits", "release", "carry")},
    }
    return pipeline


def usage() -> "tuple[float, int]":
    """CPU seconds and minor page faults of this process so far."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime, u.ru_minflt


def main() -> None:
    mode, path = sys.argv[1], sys.argv[2]
    if mode not in ("run", "stage"):
        sys.exit(f"pyapi.py: the mode is `run` or `stage`, not {mode!r}")
    pipeline: Any = with_stage(path) if mode == "stage" else path
    print(f"pyapi: warpline {warpline.__version__}, {warpline.versions()}", file=sys.stderr)
    (cpu0, faults0), t0 = usage(), time.monotonic()
    report = warpline.run(pipeline)
    wall, (cpu1, faults1) = time.monotonic() - t0, usage()
    cpu = cpu1 - cpu0
    items = report.items
    n = items.total
    if items.done != n or n == 0:
        sys.exit(f"pyapi.py: {items.done} of {n} items done\n{report}")
    figures = (
        f"tiles={n} wall_s={wall:.2f} tiles_per_s={n / wall:.1f} "
        f"engine_wall_s={report.elapsed_s:.2f} engine_tiles_per_s={n / report.elapsed_s:.1f} "
        f"cpu_ms_per_tile={cpu * 1000 / n:.2f} page_faults_per_tile={(faults1 - faults0) / n:.0f} "
        f"peak_rss_mib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f}"
    )
    if mode == "stage":
        s = report.stages[STAGE]
        figures += f" stage_busy_ms_per_tile={s.busy_s * 1000 / n:.2f}"
        figures += f" stage_cpu_ms_per_tile={(s.cpu_s or 0.0) * 1000 / n:.2f}"
    print(
        "pipeline per stage (mean CPU ms): "
        + " ".join(f"{s.name}:{(s.cpu_s or 0.0) * 1000 / max(1, s.processed):.2f}" for s in report.stages),
        file=sys.stderr,
    )
    print(figures)


if __name__ == "__main__":
    main()
