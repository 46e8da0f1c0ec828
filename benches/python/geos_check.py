"""What gdalwarp's inverse check costs on the mixed corpus's GOES tiles,
and whether a newer GDAL/PROJ pays there (issue 23, item 3).

    python3 geos_check.py DATA_DIR

DATA_DIR is the shared real rasters (world.rgb.tif). The script cuts the
six `geos` tiles the raster bench cuts (benches/raster/mixed.rs), then
warps each to EPSG:3857 bilinear in memory and prints the thread CPU ms
per tile:

- with rasterio (its wheel's GDAL and PROJ, newer than Debian's), without
  and with CHECK_WITH_INVERT_PROJ (which gdalwarp 3.6 turns on for these
  tiles, rasterio does not);
- with Debian's GDAL 3.6.2 `gdal.Warp` (gdalwarp's own library), a fresh
  source dataset each time, as a pipeline decodes each tile anew.

Run it once with an interpreter that has rasterio and once with one that
has Debian's `osgeo` (python3-gdal, /usr/bin/python3); each measures what
it can import. The GDAL command line tools cut the tiles.
"""

import os
import subprocess
import sys
import tempfile
import time

GEOS = "+proj=geos +h=35786023 +lon_0=-75 +sweep=x +ellps=GRS80 +units=m +no_defs"
ROUNDS = 3


def tiles(data: str, work: str) -> list:
    full = os.path.join(work, "geos.tif")
    r = "5434894.885"
    env = dict(os.environ, GDAL_PAM_ENABLED="NO")
    subprocess.run(
        ["gdalwarp", "-q", "-t_srs", GEOS, "-te", "-" + r, "-" + r, r, r,
         "-ts", "1536", "1536", "-dstnodata", "0", "-r", "bilinear",
         os.path.join(data, "world.rgb.tif"), full],
        check=True, env=env)
    out = []
    for i, (x, y) in enumerate((x, y) for y in (0, 1024) for x in (0, 512, 1024)):
        t = os.path.join(work, f"geos-{i}.tif")
        subprocess.run(["gdal_translate", "-q", "-srcwin", str(x), str(y), "512", "512", full, t],
                       check=True, env=env)
        out.append(t)
    return out


def line(what: str, ms: list) -> None:
    print(f"{what}: mean {sum(ms) / len(ms):.1f} ms per tile over {len(ms)} warps "
          f"(min {min(ms):.1f}, max {max(ms):.1f})")


def with_rasterio(paths: list) -> None:
    import numpy as np
    import rasterio
    from rasterio.warp import Resampling, calculate_default_transform, reproject

    def warp(path: str) -> float:
        with rasterio.open(path) as src:
            t, w, h = calculate_default_transform(src.crs, "EPSG:3857", src.width,
                                                  src.height, *src.bounds)
            dst = np.zeros((src.count, h, w), dtype=src.dtypes[0])
            start = time.thread_time()
            reproject(source=rasterio.band(src, list(src.indexes)), destination=dst,
                      dst_transform=t, dst_crs="EPSG:3857", dst_nodata=src.nodata,
                      resampling=Resampling.bilinear)
            return (time.thread_time() - start) * 1000

    ms = {"NO": [], "YES": []}
    for _ in range(ROUNDS):
        for check in ms:
            with rasterio.Env(CHECK_WITH_INVERT_PROJ=check):
                ms[check] += [warp(p) for p in paths]
    gdal = f"rasterio {rasterio.__version__}, GDAL {rasterio.__gdal_version__}"
    line(f"{gdal}, without the check", ms["NO"])
    line(f"{gdal}, CHECK_WITH_INVERT_PROJ=YES", ms["YES"])


def with_osgeo(paths: list) -> None:
    from osgeo import gdal

    gdal.UseExceptions()
    gdal.PushErrorHandler("CPLQuietErrorHandler")
    ms = []
    for _ in range(ROUNDS):
        for p in paths:
            src = gdal.Translate("", p, format="MEM")
            start = time.thread_time()
            gdal.Warp("", src, format="MEM", dstSRS="EPSG:3857", resampleAlg="bilinear")
            ms.append((time.thread_time() - start) * 1000)
    line(f"GDAL {gdal.__version__} gdal.Warp (gdalwarp's library)", ms)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with tempfile.TemporaryDirectory() as work:
        paths = tiles(sys.argv[1], work)
        ran = False
        for measure in (with_rasterio, with_osgeo):
            try:
                measure(paths)
                ran = True
            except ImportError as e:
                print(f"{measure.__name__}: not measured ({e})")
        if not ran:
            sys.exit("neither rasterio nor osgeo can be imported")


if __name__ == "__main__":
    main()
