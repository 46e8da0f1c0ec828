//! Writes a stac-geoparquet file of generated items, for the memory figure
//! of the `stac` source (docs/performance.md):
//!
//!     cargo run --release -p warpline-testkit --example stac-geoparquet -- OUT.parquet ITEMS [PER_GROUP]
//!
//! Items `item-0000000` on, asset `B04` at `https://data.test/...`,
//! `PER_GROUP` rows a row group (default 10,000), zstd-compressed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(out), Some(items)) = (args.first(), args.get(1)) else {
        return Err("usage: stac-geoparquet OUT.parquet ITEMS [PER_GROUP]".into());
    };
    let items: u64 = items.parse()?;
    let per_group: u64 = args.get(2).map_or(Ok(10_000), |g| g.parse())?;
    let href = warpline_testkit::geoparquet::data_test_href;
    warpline_testkit::geoparquet::write_items(out.as_ref(), items, per_group, &href)?;
    println!("{out}: {items} items, {per_group} a row group");
    Ok(())
}
