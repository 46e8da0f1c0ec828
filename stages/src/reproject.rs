//! The `reproject` stage (blocking): `GDALWarp` (through `warpline-gdal`),
//! with the options of the `gdalwarp` command, warping to an in-memory
//! dataset (or, for an output over the memory budget, to a GTiff on disk:
//! see `disk.rs`).
//!
//! Everything that changes pixels is an explicit setting with gdalwarp's
//! default: the resampling method, the transformer error threshold (`-et`,
//! 0.125 px) and the warp memory (`-wm`, 64 MiB), which decides how the warp
//! is chunked. So an output is reproduced exactly by `gdalwarp` with the
//! arguments the settings map onto (see `args.rs`), and never depends on
//! memory pressure. The output size comes from `GDALSuggestedWarpOutput2`
//! before warping, to charge the `memory` limiter and check `max_pixels`.
//! The warp path (an accelerator's loops where proven equal to gdalwarp,
//! or GDAL's own) is `warpline-gdal`'s to choose: this stage says what to
//! warp (a typed `WarpSpec`), charges the budget for it, and picks memory
//! or disk.

use warpline_engine::{
    BlockingStage, Handler, Item, Outcome, Payload, Problem, Settings, StageError,
};
use warpline_gdal::{init, DataType, Raster, Sources, WarpError, WarpSpec};

mod args;
mod disk;

use args::Kernel;
pub use args::RESAMPLING;

/// The reproject stage.
#[derive(Debug)]
pub struct Reproject {
    spec: WarpSpec,
    target_wkt: String,
    src_crs_wkt: Option<String>,
    dtype: Option<DataType>,
    bands: Option<Vec<usize>>,
    max_pixels: u64,
    warp_memory: u64,
    /// Whether an output is warped in memory or on disk (`warp_to`).
    disk: disk::Disk,
    /// Whose resampling loop may warp (`kernel`).
    kernel: Kernel,
    /// The settings that decide the pixels, as recorded in an output's
    /// provenance (the table without `scratch`, `warp_to`, `kernel` and
    /// `max_pixels`, which change where and how fast, not what).
    recorded: serde_json::Value,
}

pub(crate) fn factory(s: &Settings) -> Result<Handler, Vec<Problem>> {
    init();
    let p = args::parse(s)?;
    let table = s
        .read::<serde_json::Value>(&mut Vec::new())
        .unwrap_or_default();
    let recorded =
        crate::provenance::settings_json(&table, &["scratch", "warp_to", "kernel", "max_pixels"]);
    Ok(Handler::from_blocking(Reproject {
        recorded,
        spec: p.spec,
        target_wkt: p.target_wkt,
        src_crs_wkt: p.src_crs_wkt,
        dtype: p.dtype,
        bands: p.bands,
        max_pixels: p.max_pixels,
        warp_memory: p.warp_memory,
        disk: disk::Disk::new(p.warp_to, p.scratch, s),
        kernel: p.kernel,
    }))
}

impl Reproject {
    /// The item's sources: its raster's datasets, or views of `bands`.
    fn sources<'r>(&self, raster: &'r Raster, id: &str) -> Result<Sources<'r>, StageError> {
        Sources::new(raster, self.bands.as_deref())
            .map_err(|e| StageError::permanent(format!("{id}: {e}")))
    }

    /// The warp of these sources: the stage's spec, with the area of
    /// interest every tile may share where the accelerator proves it.
    fn spec_for(&self, srcs: &Sources<'_>) -> WarpSpec {
        let mut spec = self.spec.clone();
        spec.area_of_interest = srcs.area_of_interest(&self.spec);
        spec
    }

    /// Bytes the warp's output will take, checked against `max_pixels`.
    fn output_bytes(
        &self,
        srcs: &Sources<'_>,
        spec: &WarpSpec,
        id: &str,
    ) -> Result<u64, StageError> {
        let (w, h) = srcs
            .output_size(spec, &self.target_wkt, self.src_crs_wkt.as_deref())
            .map_err(|e| StageError::permanent(format!("{id}: {e}")))?;
        let pixels = w.saturating_mul(h);
        if pixels > self.max_pixels {
            return Err(StageError::permanent(format!(
                "{id}: the warped output would be {w} x {h} = {pixels} pixels, over max_pixels ({})",
                self.max_pixels
            )));
        }
        Ok(pixels.saturating_mul(srcs.output_pixel_bytes(self.dtype, spec.dst_alpha)))
    }

    fn take_raster(item: &mut Item) -> Result<Raster, StageError> {
        item.take_payload::<Raster>().ok_or_else(|| {
            StageError::permanent(format!(
                "{}: reproject needs a decoded raster: put a `decode` stage before `reproject`",
                item.id
            ))
        })
    }
}

/// A raster whose warp output was sized (and found under `max_pixels`) in
/// `demand`, with the spec it is warped with (its area of interest
/// included), its output's bytes, and whether it is warped to disk.
struct Checked {
    raster: Raster,
    spec: WarpSpec,
    out: u64,
    to_disk: bool,
}

impl warpline_engine::Stage for Reproject {
    fn takes(&self) -> Payload {
        crate::payloads::raster()
    }

    fn hands_on(&self) -> Payload {
        crate::payloads::raster()
    }

    fn notes(&self) -> Vec<String> {
        let path = match self.kernel {
            Kernel::Auto => warpline_gdal::warp_path().to_string(),
            Kernel::Gdal => format!(
                "GDAL's warp loop (kernel = \"gdal\"; {})",
                warpline_gdal::versions()
            ),
        };
        vec![format!("warp path: {path}")]
    }

    fn demand(&self, item: &mut Item) -> Result<u64, StageError> {
        let id = item.id.clone();
        let raster = Self::take_raster(item)?;
        let planned = self.sources(&raster, &id).and_then(|srcs| {
            let spec = self.spec_for(&srcs);
            self.plan(&srcs, &raster, &spec, &id).map(|p| (p, spec))
        });
        let ((charge, out, to_disk), spec) = match planned {
            Ok(p) => p,
            Err(e) => {
                item.set_payload(raster);
                return Err(e);
            }
        };
        // `process` need not ask GDAL for the output size again.
        item.set_payload(Checked {
            raster,
            spec,
            out,
            to_disk,
        });
        Ok(charge)
    }
}

impl BlockingStage for Reproject {
    fn process(&self, item: &mut Item) -> Result<Outcome, StageError> {
        let id = item.id.clone();
        // The engine runs `demand` before every try, so the item is the
        // raster it checked and sized.
        let Some(Checked {
            raster,
            spec,
            out,
            to_disk,
        }) = item.take_payload::<Checked>()
        else {
            return Err(StageError::permanent(format!(
                "{id}: reproject was handed an item its demand did not prepare (a stage before it must hand on a decoded raster)"
            )));
        };
        let srcs = self.sources(&raster, &id)?;
        let out = if to_disk {
            item.took("disk");
            self.disk.warp(&srcs, &spec, &id, out)
        } else {
            srcs.warp(&spec, self.kernel == Kernel::Auto)
                .map(|(r, by)| {
                    item.took(by.label());
                    r
                })
                .map_err(|e| warp_failure(&id, e))
        };
        // An input read by ranges that could not be read: the server's
        // fault (maybe for a moment), said as such.
        let out = out.map_err(|e| match raster.remote_failure() {
            Some(m) => StageError::transient(format!("{id}: {m}")),
            None => e,
        })?;
        let input = srcs.pixel_bytes();
        drop(srcs);
        drop(raster);
        warpline_gdal::trim_heap_after(input);
        self.record(item, spec);
        item.set_payload(out);
        Ok(Outcome::Continue)
    }
}

impl Reproject {
    /// Records the settings and the warp as gdalwarp's arguments (see
    /// `provenance`). The area of interest an accelerator shares between
    /// tiles is left out: it changes no pixel (it is used only where that
    /// is proven) and differs between workers.
    fn record(&self, item: &mut Item, mut spec: WarpSpec) {
        spec.area_of_interest = None;
        let mut extra = serde_json::Map::new();
        extra.insert("gdalwarp".to_owned(), spec.gdalwarp_args().into());
        let settings = self.recorded.clone();
        crate::provenance::record_stage(item, "reproject", settings, extra);
    }

    /// What the item is charged, its output's bytes, and whether it is
    /// warped to disk. In memory, the input's bytes stay while the warp
    /// reads them, and the output lives beside its chunk buffers, which
    /// hold at most the source window and the output (full resolution, an
    /// upper bound when an overview is read) and never more than
    /// `warp_memory`; on disk, the output is not held.
    fn plan(
        &self,
        srcs: &Sources<'_>,
        raster: &Raster,
        spec: &WarpSpec,
        id: &str,
    ) -> Result<(u64, u64, bool), StageError> {
        let out = self.output_bytes(srcs, spec, id)?;
        let decoded = srcs.pixel_bytes();
        let files = raster.file_bytes();
        let buffers = (decoded + out).min(self.warp_memory);
        let (charge, to_disk) = self.disk.choose(files + out + buffers, files + buffers);
        if to_disk {
            self.disk.refuse(id, files, buffers)?;
            tracing::info!(
                "{id}: the output ({} MiB) is warped to disk in chunks of warp_memory",
                out >> 20
            );
        }
        Ok((charge, out, to_disk))
    }
}

/// A failed warp, as the item's error.
pub(crate) fn warp_failure(id: &str, e: WarpError) -> StageError {
    match e {
        // Not this input's fault: the machine's, maybe for a moment.
        WarpError::OutOfMemory(m) => {
            StageError::transient(format!("{id}: the warp ran out of memory: {m}"))
        }
        WarpError::Unreadable(m) => {
            StageError::permanent(format!("{id}: corrupt or truncated pixel data: {m}"))
        }
        WarpError::Failed(m) => StageError::permanent(format!("{id}: warp failed: {m}")),
    }
}
