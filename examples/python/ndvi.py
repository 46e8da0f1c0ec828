"""A raster stage written in Python between decode and reproject: a
normalized difference of two bands, ``(a - b) / (a + b)`` (NDVI with a =
near infrared, b = red), as one float32 band with NaN where either input
is nodata or both are 0. It is examples/ndvi.rs in numpy: the raster's
bands come as numpy arrays, the new raster keeps its georeferencing.

    python examples/python/ndvi.py OUT_DIR

runs it on the sample tiles (no network, no data files): fetch, decode,
``ndvi``, reproject to EPSG:3857, write. The Python suite runs it too
(python/tests/test_stage.py), and checks every pixel against the same
NDVI warped by gdalwarp.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

import warpline


def normalized_difference(
    a: np.ndarray, b: np.ndarray, na: Optional[float], nb: Optional[float]
) -> np.ndarray:
    """``(a - b) / (a + b)`` in float32, NaN where either is nodata or
    both are 0."""
    a = a.astype(np.float32)
    b = b.astype(np.float32)
    bad = a + b == 0
    if na is not None:
        bad |= a == np.float32(na)
    if nb is not None:
        bad |= b == np.float32(nb)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = (a - b) / (a + b)
    out[bad] = np.nan
    return out


# Registered by kind: a pipeline says `kind = "ndvi"` and `a`, `b` (bands
# from 1) are its settings. No `memory=`: the stage is charged an estimate
# (the input's files and every band twice over as float64) on the
# pipeline's `memory` budget before each call.
@warpline.stage("ndvi", takes="raster", hands_on="raster")
def ndvi(raster: warpline.Raster, *, a: int, b: int) -> warpline.Raster:
    if raster.count < max(a, b):
        raise ValueError(f"has {raster.count} bands; ndvi needs bands {a} and {b}")
    nodata = raster.nodata
    out = normalized_difference(
        raster.read(a, dtype="float32"),
        raster.read(b, dtype="float32"),
        nodata[a - 1],
        nodata[b - 1],
    )
    return raster.with_bands([out], nodata=float("nan"))


def pipeline(input_dir: Path, out_dir: Path) -> str:
    """The sample tiles in ``input_dir`` to EPSG:3857 NDVI in ``out_dir``,
    under a 256 MiB budget that every stage charges."""
    heavy = 'limits = ["memory", "cpu"]\nrelease = ["memory"]\ncarry = ["memory"]'
    return f"""
[pipeline]
name = "ndvi"
flow = ["fetch", "decode", "ndvi", "reproject", "write"]
[source]
kind = "glob"
pattern = "{input_dir}/*.tif"
[limits.memory]
budget = "256MiB"
[limits.cpu]
permits = "cores"
[stages.fetch]
kind = "fetch"
memory = "memory"
[stages.decode]
kind = "decode"
{heavy}
[stages.ndvi]
kind = "ndvi"
a = 3
b = 1
{heavy}
[stages.reproject]
kind = "reproject"
crs = "EPSG:3857"
resampling = "bilinear"
{heavy}
[stages.write]
kind = "write"
dir = "{out_dir}"
"""


def run(work: Path, out_dir: Path) -> warpline.Report:
    """Writes the sample tiles to ``work/in``, runs the pipeline into
    ``out_dir`` and returns its report."""
    tiles = work / "in"
    warpline.sample_tiles(tiles, per_crs=2, size=256)
    return warpline.run(pipeline(tiles, out_dir))


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "out/ndvi")
    with tempfile.TemporaryDirectory() as work:
        print(run(Path(work), out))
