"""Stages written in Python: the NDVI of examples/python/ndvi.py equals the
same NDVI computed here with numpy and warped by the system's gdalwarp,
pixel for pixel; an exception fails its item only; settings are checked
against the function's signature when the pipeline compiles; the memory
charge is the stage's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import threading
from xml.etree import ElementTree
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

import warpline

from conftest import TILES, gdalinfo, outputs, pipeline_dict, read_pixels

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "ndvi.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ndvi_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def numpy_ndvi_tiff(tile: Path, work: Path, ndvi_of: Any) -> Path:
    """The NDVI of `tile`'s bands 3 and 1, computed here with numpy, as a
    float32 raster with the tile's georeferencing (raw pixels and a VRT)."""
    info = gdalinfo(tile)
    pixels = read_pixels(tile, work)
    nodata: List[Optional[float]] = [b.get("noDataValue") for b in info["bands"]]
    ndvi = ndvi_of(pixels[2], pixels[0], nodata[2], nodata[0]).astype("<f4")
    raw = work / (tile.stem + "-ndvi.raw")
    ndvi.tofile(raw)
    w, h = info["size"]
    # The tile's georeferencing as GDAL writes it in a VRT (17 digits;
    # gdalinfo's JSON rounds the geotransform).
    like = work / (tile.stem + "-like.vrt")
    subprocess.run(["gdal_translate", "-q", "-of", "VRT", str(tile), str(like)], check=True)
    root = ElementTree.parse(like).getroot()
    srs, gt = root.find("SRS"), root.find("GeoTransform")
    assert srs is not None and gt is not None and srs.text and gt.text
    wkt = srs.text.replace("&", "&amp;").replace("<", "&lt;")
    gt_text = gt.text
    vrt = work / (tile.stem + "-ndvi.vrt")
    vrt.write_text(
        f"""<VRTDataset rasterXSize="{w}" rasterYSize="{h}">
  <SRS>{wkt}</SRS>
  <GeoTransform>{gt_text}</GeoTransform>
  <Metadata><MDI key="AREA_OR_POINT">Area</MDI></Metadata>
  <VRTRasterBand dataType="Float32" band="1" subClass="VRTRawRasterBand">
    <NoDataValue>nan</NoDataValue>
    <SourceFilename relativeToVRT="1">{raw.name}</SourceFilename>
    <ImageOffset>0</ImageOffset>
    <PixelOffset>4</PixelOffset>
    <LineOffset>{4 * w}</LineOffset>
    <ByteOrder>LSB</ByteOrder>
  </VRTRasterBand>
</VRTDataset>
"""
    )
    return vrt


def test_a_numpy_ndvi_stage_equals_numpy_and_gdalwarp_pixel_for_pixel(tmp_path: Path) -> None:
    example = load_example()
    out = tmp_path / "out"
    report = example.run(tmp_path, out)
    assert (report.items.done, report.items.failed) == (TILES, 0), str(report)
    assert report.stages.names() == ["fetch", "decode", "ndvi", "reproject", "write"]
    checked = 0
    for tile in sorted((tmp_path / "in").iterdir()):
        oracle = tmp_path / "oracle"
        oracle.mkdir(exist_ok=True)
        vrt = numpy_ndvi_tiff(tile, oracle, example.normalized_difference)
        theirs = oracle / (tile.stem + "-warped.tif")
        subprocess.run(
            ["gdalwarp", "-q", "-overwrite", "-of", "GTiff", "-t_srs", "EPSG:3857",
             "-r", "bilinear", str(vrt), str(theirs)],
            check=True,
        )
        ours = out / tile.name
        a, b = gdalinfo(ours), gdalinfo(theirs)
        assert a["size"] == b["size"], tile.name
        assert np.allclose(a["geoTransform"], b["geoTransform"], rtol=0, atol=1e-9), tile.name
        pa, pb = read_pixels(ours, oracle), read_pixels(theirs, oracle)
        assert pa.dtype == pb.dtype == np.float32
        assert np.array_equal(pa, pb, equal_nan=True), (
            f"{tile.name}: {np.sum(~((pa == pb) | (np.isnan(pa) & np.isnan(pb))))} pixels differ"
        )
        assert np.isfinite(pa).any()
        checked += 1
    assert checked == TILES


def test_an_exception_fails_its_item_and_the_others_finish(
    tiles: Path, tmp_path: Path, registered: List[str]
) -> None:
    seen: Dict[str, Any] = {}

    @warpline.stage("picky")
    def picky(raster: warpline.Raster, *, reject: str) -> None:
        seen[raster.id] = (raster.crs_wkt, raster.geo_transform, raster.nodata, raster.dtypes)
        if reject in raster.id:
            raise ValueError(f"{raster.width}x{raster.height} is not for me")
        return None  # the raster goes on as it was

    registered.append("picky")
    out = tmp_path / "out"
    report = warpline.run(pipeline_dict(tiles, out, {"kind": "picky", "reject": "laea-001"}))
    assert (report.items.done, report.items.failed) == (TILES - 1, 1), str(report)
    (failure,) = report.failures
    assert failure.stage == "extra" and "laea-001" in failure.id
    assert "ValueError: 256x256 is not for me" in failure.message
    assert len(outputs(out)) == TILES - 1
    wkt, gt, nodata, dtypes = seen[next(k for k in seen if "utm18n" in k)]
    assert "UTM zone 18N" in wkt and gt is not None and gt[1] == 30.0
    assert dtypes == ["uint8"] * 3 and len(nodata) == 3


def test_arrays_returned_become_the_raster_handed_on(
    tiles: Path, tmp_path: Path, registered: List[str]
) -> None:
    @warpline.stage("first-band")
    def first_band(raster: warpline.Raster) -> Any:
        return raster.read(1).astype(np.uint16) * 2

    registered.append("first-band")
    out = tmp_path / "out"
    report = warpline.run(pipeline_dict(tiles, out, {"kind": "first-band"}))
    assert report.items.done == TILES, str(report)
    info = gdalinfo(outputs(out)[0])
    assert [b["type"] for b in info["bands"]] == ["UInt16"]


def test_settings_are_checked_against_the_function_when_the_pipeline_compiles(
    tiles: Path, tmp_path: Path, registered: List[str]
) -> None:
    @warpline.stage("scale")
    def scale(raster: warpline.Raster, *, factor: float, offset: float = 0.0) -> None:
        return None

    registered.append("scale")
    v = warpline.validate(pipeline_dict(tiles, tmp_path / "o", {"kind": "scale", "factr": 2}))
    paths = sorted(p.path for p in v.problems)
    assert paths == ["stages.extra.factor", "stages.extra.factr"], v.problems
    with pytest.raises(ValueError, match="warpline ships"):
        warpline.stage("decode")(scale)


def test_the_memory_charge_is_the_stages_own(
    tiles: Path, tmp_path: Path, registered: List[str]
) -> None:
    calls = []
    lock = threading.Lock()

    @warpline.stage("greedy", memory=lambda w, h, bands: 1 << 40)
    def greedy(raster: warpline.Raster) -> None:
        with lock:
            calls.append(raster.id)

    registered.append("greedy")
    report = warpline.run(pipeline_dict(tiles, tmp_path / "o", {"kind": "greedy"}))
    # A terabyte per call is more than the 256 MiB budget: each item fails
    # before the function is called.
    assert (report.items.done, report.items.failed) == (0, TILES), str(report)
    assert calls == []
    assert all(f.stage == "extra" for f in report.failures)


def test_a_stage_after_write_sees_the_output_path(
    tiles: Path, tmp_path: Path, registered: List[str]
) -> None:
    written: List[str] = []

    @warpline.stage("record", takes="written", hands_on="written")
    def record(item: warpline.Item) -> None:
        assert item.path is not None
        written.append(item.path)

    registered.append("record")
    p = pipeline_dict(tiles, tmp_path / "o")
    p["stages"]["after"] = {"kind": "record"}
    p["pipeline"]["flow"].append("after")
    report = warpline.run(p)
    assert report.items.done == TILES
    assert sorted(Path(w).name for w in written) == [t.name for t in sorted(tiles.iterdir())]
    assert json.dumps(report.to_dict())
