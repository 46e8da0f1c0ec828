"""Shared pieces of the suite: sample tiles made once, a small raster
pipeline on them (glob, fetch, decode, an optional stage of ours,
reproject, write), and GDAL's command-line tools to read what it wrote
(the system's gdalinfo, gdal_translate and gdalwarp: no Python GDAL
bindings needed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import numpy as np
import pytest

import warpline

TILES_PER_CRS = 2
TILE_SIZE = 256
TILES = 4 * TILES_PER_CRS


@pytest.fixture(scope="session")
def tiles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of 8 sample GeoTIFF tiles (2 in each of 4 CRSs)."""
    d = tmp_path_factory.mktemp("tiles")
    warpline.sample_tiles(d, per_crs=TILES_PER_CRS, size=TILE_SIZE)
    return d


def pipeline_dict(
    tiles: Path,
    out: Path,
    extra: Optional[Dict[str, Any]] = None,
    *,
    name: str = "local",
    workers: Any = 2,
    mailbox: Optional[int] = None,
) -> Dict[str, Any]:
    """The pipeline as a dict: `extra` (a stage's table, with `kind`) goes
    between decode and reproject, under the same limits."""
    heavy = {"limits": ["memory", "cpu"], "release": ["memory"], "carry": ["memory"]}
    stages: Dict[str, Any] = {
        "fetch": {"kind": "fetch", "memory": "memory", "workers": workers},
        "decode": {"kind": "decode", "workers": workers, **heavy},
    }
    flow = ["fetch", "decode"]
    if extra is not None:
        stages["extra"] = {"workers": workers, **heavy, **extra}
        flow.append("extra")
    stages["reproject"] = {
        "kind": "reproject",
        "crs": "EPSG:3857",
        "resampling": "bilinear",
        "workers": workers,
        **heavy,
    }
    stages["write"] = {"kind": "write", "dir": str(out)}
    flow += ["reproject", "write"]
    if mailbox is not None:
        for s in stages.values():
            s["mailbox"] = mailbox
    return {
        "pipeline": {"name": name, "flow": flow},
        "source": {"kind": "glob", "pattern": f"{tiles}/*.tif"},
        "limits": {"memory": {"budget": "256MiB"}, "cpu": {"permits": 2}},
        "stages": stages,
    }


def toml_text(d: Dict[str, Any]) -> str:
    """The dict as a TOML file says it (enough for `pipeline_dict`'s)."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(v)

    lines: List[str] = []

    def table(path: str, t: Dict[str, Any]) -> None:
        lines.append(f"[{path}]")
        for k, v in t.items():
            if not isinstance(v, dict) or k in ("retry", "creation_options"):
                lines.append(f"{k} = {value(v)}")
        for k, v in t.items():
            if isinstance(v, dict) and k not in ("retry", "creation_options"):
                table(f"{path}.{k}", v)

    for top, t in d.items():
        table(top, t)
    return "\n".join(lines) + "\n"


def gdalinfo(path: Path) -> Dict[str, Any]:
    out = subprocess.run(
        ["gdalinfo", "-json", str(path)], check=True, capture_output=True, text=True
    )
    info: Dict[str, Any] = json.loads(out.stdout)
    return info


def read_pixels(path: Path, tmp: Path) -> np.ndarray:
    """Every band of `path` as a (bands, height, width) array, through
    gdal_translate to raw ENVI (band after band)."""
    info = gdalinfo(path)
    w, h = info["size"]
    dtype = {"Byte": np.uint8, "Float32": np.float32, "Float64": np.float64}[
        info["bands"][0]["type"]
    ]
    raw = tmp / (path.stem + ".bin")
    subprocess.run(
        ["gdal_translate", "-q", "-of", "ENVI", "-co", "INTERLEAVE=BSQ", str(path), str(raw)], check=True
    )
    data = np.fromfile(raw, dtype=dtype)
    return data.reshape(len(info["bands"]), h, w)


def outputs(out: Path) -> List[Path]:
    """The files written in `out`, but the STAC items and collection that
    `write` puts beside COG outputs (`stac`, on for COG)."""
    return sorted(p for p in out.iterdir() if p.is_file() and p.suffix != ".json")


@pytest.fixture
def registered() -> Iterator[List[str]]:
    """Stage kinds a test registers, forgotten after it."""
    kinds: List[str] = []
    yield kinds
    for k in kinds:
        warpline.unregister(k)
