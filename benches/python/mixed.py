"""The mixed scenario's job written the way a Python team would: asyncio +
aiohttp to fetch, rasterio (GDAL) to decode, warp and write, in a thread
pool of one worker a core. The raster bench's `mixed-python` scenario runs
it against the same tile server as `mixed` (issue 23's comparison).

    python3 mixed.py LIST OUT_DIR

LIST holds one URL a line. Each tile is warped to EPSG:3857 at GDAL's
suggested resolution, bilinear, the source's nodata (or mask) honoured, and
written as an uncompressed GTiff. Prints one line of figures, as the bench's
children do: tiles, wall_s, tiles_per_s, cpu_ms_per_tile, peak_rss_mib, gdal.

Needs `pip install -r requirements.txt` (rasterio's wheel brings its own
GDAL, newer than Debian's).
"""

import asyncio
import os
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import numpy as np
import rasterio
from rasterio.io import MemoryFile
from rasterio.warp import Resampling, calculate_default_transform, reproject

DST_CRS = "EPSG:3857"
CONNECTIONS = 8


def warp(body: bytes, out: str) -> float:
    """Decode, warp and write one tile (GDAL releases the GIL throughout):
    the CPU seconds this thread spent on it."""
    start = time.thread_time()
    with MemoryFile(body) as mem, mem.open() as src:
        transform, width, height = calculate_default_transform(
            src.crs, DST_CRS, src.width, src.height, *src.bounds
        )
        dst = np.zeros((src.count, height, width), dtype=src.dtypes[0])
        reproject(
            source=rasterio.band(src, list(src.indexes)),
            destination=dst,
            dst_transform=transform,
            dst_crs=DST_CRS,
            dst_nodata=src.nodata,
            resampling=Resampling.bilinear,
        )
        profile = {
            "driver": "GTiff",
            "width": width,
            "height": height,
            "count": src.count,
            "dtype": src.dtypes[0],
            "crs": DST_CRS,
            "transform": transform,
            "nodata": src.nodata,
        }
        with rasterio.open(out, "w", **profile) as sink:
            sink.write(dst)
    return time.thread_time() - start


async def run(urls: list, out_dir: str) -> list:
    os.makedirs(out_dir, exist_ok=True)
    cores = os.cpu_count() or 1
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=cores)
    # As many tiles in flight as connections plus workers: a slow warp holds
    # the fetches back, as warpline's bounded mailboxes do.
    room = asyncio.Semaphore(CONNECTIONS + cores)
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int, url: str) -> float:
            async with room:
                async with session.get(url) as response:
                    response.raise_for_status()
                    body = await response.read()
                out = os.path.join(out_dir, f"{i:05}.tif")
                return await loop.run_in_executor(pool, warp, body, out)

        cpu = await asyncio.gather(*(one(i, u) for i, u in enumerate(urls)))
    pool.shutdown()
    return cpu


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def print_kinds(per_tile: list) -> None:
    """On stderr, the mean CPU ms of a tile's decode + warp + write by kind,
    when the bench names the kinds (tile i is of kind i % kinds)."""
    kinds = [k for k in os.environ.get("WARPLINE_BENCH_MIXED_KINDS", "").split(",") if k]
    if not kinds:
        return
    cells = []
    for k, kind in enumerate(kinds):
        mine = per_tile[k :: len(kinds)]
        cells.append(f"{kind}:{1000 * sum(mine) / max(1, len(mine)):.1f}")
    print("python per kind, decode+warp+write (mean CPU ms):", " ".join(cells), file=sys.stderr)


def main() -> None:
    list_path, out_dir = sys.argv[1], sys.argv[2]
    with open(list_path) as f:
        urls = [line.strip() for line in f if line.strip()]
    # One tile first, untimed: GDAL and PROJ open their drivers and database.
    asyncio.run(run(urls[:1], os.path.join(out_dir, "warm-up")))
    cpu0, t0 = cpu_seconds(), time.monotonic()
    per_tile = asyncio.run(run(urls, out_dir))
    wall, cpu = time.monotonic() - t0, cpu_seconds() - cpu0
    print_kinds(per_tile)
    n = len(urls)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"tiles={n} wall_s={wall:.2f} tiles_per_s={n / wall:.1f} "
        f"cpu_ms_per_tile={cpu * 1000 / n:.2f} peak_rss_mib={peak:.0f} "
        f"gdal={rasterio.__gdal_version__}"
    )


if __name__ == "__main__":
    main()
