//! Outputs larger than the memory budget: warped in chunks to a GTiff on
//! disk instead of a MEM dataset, as `gdalwarp -of GTiff -wm N` does, so
//! the item holds its input and the warp's chunk buffers (at most
//! `warp_memory`), never the whole output. `write` then finishes the file
//! (moves it into place, or copies it to its format).
//!
//! The choice (`warp_to`): `"auto"` warps in memory when the item's charge
//! for it (input + output + chunk buffers) fits the smallest byte budget
//! in the stage's `limits`, else on disk; `"memory"` always in memory (an
//! output over the budget then meets the budget's `oversize` policy, as
//! before); `"disk"` always on disk. Either way the pixels are gdalwarp's:
//! the warp's options, chunking included, are the same.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;
use warpline_engine::limit::Oversize;
use warpline_engine::{Limiter, LimiterKind, Settings, StageError};
use warpline_gdal::{Raster, ScratchFile, Sources, WarpError, WarpSpec};

use crate::ids::file_name_id;
use crate::space::{failed as disk_failed, SpaceWatch};
use crate::temps::{temporary_name, Sweeper};

/// Where the warp's output is made (`warp_to`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum WarpTo {
    /// In memory when it fits the budget, else on disk.
    #[default]
    Auto,
    /// Always a MEM dataset.
    Memory,
    /// Always a GTiff on disk.
    Disk,
}

/// The stage's choice between memory and disk, and where it writes.
#[derive(Debug, Default)]
pub(crate) struct Disk {
    warp_to: WarpTo,
    /// The smallest byte budget the stage's `limits` charge, and whether
    /// an item over it fails (`oversize = "fail"`).
    budget: Option<u64>,
    oversize_fails: bool,
    /// `scratch`, if set; else the write stage's default staging directory.
    configured: Option<PathBuf>,
    dir: OnceLock<Result<PathBuf, String>>,
    temps: Sweeper,
}

impl Disk {
    pub(crate) fn new(warp_to: WarpTo, scratch: Option<PathBuf>, s: &Settings) -> Self {
        let smallest = s
            .stage_limits()
            .iter()
            .filter(|l| l.kind() == LimiterKind::Bytes)
            .min_by_key(|l| l.capacity());
        Disk {
            warp_to,
            budget: smallest.map(Limiter::capacity),
            oversize_fails: smallest.and_then(Limiter::oversize) == Some(Oversize::Fail),
            configured: scratch,
            ..Disk::default()
        }
    }

    /// What the item is charged, and whether it warps to disk: `memory`
    /// is the charge of a warp in memory, `disk` of a warp to disk.
    pub(crate) fn choose(&self, memory: u64, disk: u64) -> (u64, bool) {
        let to_disk = match self.warp_to {
            WarpTo::Memory => false,
            WarpTo::Disk => true,
            WarpTo::Auto => self.budget.is_some_and(|b| memory > b),
        };
        if to_disk {
            (disk, true)
        } else {
            (memory, false)
        }
    }

    /// A warp to disk whose charge (`files`: the inputs, `buffers`: the
    /// chunk buffers) is still over a budget whose oversize items fail:
    /// the error says what to change.
    pub(crate) fn refuse(&self, id: &str, files: u64, buffers: u64) -> Result<(), StageError> {
        let mib = |b: u64| b.div_ceil(1 << 20);
        match self.budget {
            Some(budget) if self.oversize_fails && files + buffers > budget => {
                Err(StageError::new(
                    warpline_engine::ErrorKind::OverBudget,
                    format!(
                        "{id}: even warped to disk, the item needs its inputs ({} MiB) and the \
                         warp's chunk buffers ({} MiB, at most warp_memory), over the whole \
                         budget ({} MiB): lower reproject's warp_memory, raise the budget, or \
                         set oversize = \"alone\"",
                        mib(files),
                        mib(buffers),
                        mib(budget)
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The directory scratch files go to, made once.
    fn dir(&self) -> Result<&Path, String> {
        self.dir
            .get_or_init(|| match &self.configured {
                Some(d) => std::fs::create_dir_all(d)
                    .map(|()| d.clone())
                    .map_err(|e| format!("cannot create {}: {e}", d.display())),
                None => crate::store::default_staging(),
            })
            .as_ref()
            .map(PathBuf::as_path)
            .map_err(String::clone)
    }

    /// `gdalwarp -of GTiff <spec> srcs... FILE` into a new hidden file in
    /// the scratch directory, which the returned raster removes when
    /// dropped. `out_bytes` is the output's size, for the message of a full
    /// disk.
    pub(crate) fn warp(
        &self,
        srcs: &Sources<'_>,
        spec: &WarpSpec,
        id: &str,
        out_bytes: u64,
    ) -> Result<Raster, StageError> {
        let dir = self
            .dir()
            .map_err(|m| StageError::permanent(format!("{id}: scratch directory: {m}")))?;
        // Files a killed run left here go before this one adds its own.
        self.temps.once(dir);
        let name = format!("{}.warp.tif", file_name_id(id));
        let file = ScratchFile::new(temporary_name(&dir.join(name), std::process::id()));
        let watch = SpaceWatch::start();
        let warped = srcs.warp_to_file(spec, file);
        let said_full = watch.said_full();
        warped.map_err(|e| match e {
            WarpError::Failed(m) => disk_failed(
                id,
                dir,
                out_bytes,
                format!("warp to {} failed: {m}", dir.display()),
                said_full,
            ),
            other => super::warp_failure(id, other),
        })
    }
}
