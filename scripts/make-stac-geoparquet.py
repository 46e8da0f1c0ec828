"""Writes tests/data/stac/items.parquet, the stac-geoparquet fixture of the
`stac` source's tests, with the reference implementation (the
`stac-geoparquet` package, which brings pyarrow):

    python3 -m venv /tmp/sgp && /tmp/sgp/bin/pip install stac-geoparquet
    /tmp/sgp/bin/python scripts/make-stac-geoparquet.py

Five Sentinel-2-like items in two row groups of 3 and 2: an absolute, a
relative and an s3:// asset href, a `self` link, times as instants and as
an interval, and one item without the `B08` asset (a failed input)."""

import pathlib

import pyarrow as pa
import pyarrow.parquet as pq
import stac_geoparquet.arrow as sgpa


def item(i, hrefs, *, self_link=None, interval=False):
    props = {"platform": "sentinel-2b", "eo:cloud_cover": 10.0 + i}
    if interval:
        props.update(
            datetime=None,
            start_datetime="2024-06-0%dT00:00:00Z" % (i + 1),
            end_datetime="2024-06-0%dT23:59:59Z" % (i + 1),
        )
    else:
        props["datetime"] = "2024-06-0%dT10:20:30.5Z" % (i + 1)
    links = [{"rel": "collection", "href": "https://stac.test/collections/s2", "type": "application/json"}]
    if self_link:
        links.append({"rel": "self", "href": self_link, "type": "application/geo+json"})
    return {
        "type": "Feature",
        "stac_version": "1.0.0",
        "stac_extensions": [],
        "id": "S2B_T33_%d" % i,
        "collection": "s2",
        "geometry": {
            "type": "Polygon",
            "coordinates": [[[11, 46], [11.5, 46], [11.5, 46.5], [11, 46.5], [11, 46]]],
        },
        "bbox": [11.0, 46.0, 11.5, 46.5],
        "properties": props,
        "links": links,
        "assets": {
            key: {"href": href, "type": "image/tiff; application=geotiff", "roles": ["data"]}
            for key, href in hrefs.items()
        },
    }


ITEMS = [
    item(0, {"B04": "https://data.test/s2/0/B04.tif", "B08": "https://data.test/s2/0/B08.tif"}),
    item(1, {"B04": "B04.tif", "B08": "B08.tif"}, self_link="https://data.test/s2/1/item.json"),
    item(2, {"B04": "s3://bucket/s2/2/B04.tif", "B08": "s3://bucket/s2/2/B08.tif"}, interval=True),
    item(3, {"B04": "https://data.test/s2/3/B04.tif"}),
    item(4, {"B04": "https://data.test/s2/4/B04.tif", "B08": "https://data.test/s2/4/B08.tif"}),
]

out = pathlib.Path(__file__).resolve().parent.parent / "tests/data/stac/items.parquet"
out.parent.mkdir(parents=True, exist_ok=True)
table = sgpa.parse_stac_items_to_arrow(ITEMS).read_all()
# Each batch written is a row group.
batches = table.to_batches(max_chunksize=3)
sgpa.to_parquet(pa.RecordBatchReader.from_batches(table.schema, batches), out)
print(out, pq.ParquetFile(out).metadata.num_row_groups, "row groups")
