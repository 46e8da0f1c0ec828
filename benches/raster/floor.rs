//! The per-tile CPU floor: decode, reproject and write called one after the
//! other on one thread, no HTTP, for the tiles a scenario serves: the
//! uniform tiles (`floor`), or each kind of the mixed corpus.

use std::path::Path;

use super::corpus::{make_tile, DISTINCT, TILE};
use super::{machine_jiffies, mixed, pipeline_toml};

/// What one floor measured: CPU ms per tile (mean), split by stage
/// (decode, reproject, write), and every tile's time, sorted.
pub struct Floor {
    pub mean: f64,
    pub per: [f64; 3],
    pub times: Vec<f64>,
}

/// A blocking stage, as the engine holds it.
pub type Stage = std::sync::Arc<dyn warpline::BlockingStage>;

/// The bench pipeline's decode, reproject and write stages (output under
/// `work`), to be called as the engine calls them.
pub fn stage_handlers(work: &Path) -> [Stage; 3] {
    let out = work.join("floor");
    let toml = pipeline_toml(&work.join("unused.txt"), &out, "", "\"connections\"");
    let p = warpline::Pipeline::from_toml_str(&toml, &warpline::registry()).unwrap();
    let stages: Vec<Stage> = p.stages()[1..]
        .iter()
        .map(|s| match &s.handler {
            warpline::Handler::Blocking(h) => h.clone(),
            warpline::Handler::Async(_) => unreachable!("decode, reproject and write are blocking"),
        })
        .collect();
    stages
        .try_into()
        .unwrap_or_else(|_| unreachable!("the flow fetch, decode, reproject, write"))
}

/// An item as the fetch stage leaves it: `bytes` fetched.
pub fn fetched(id: String, bytes: &[u8]) -> warpline::Item {
    let mut item = warpline::Item::new(warpline::Input {
        id,
        source: "bench".into(),
        size_hint: None,
        meta: Default::default(),
    });
    item.set_payload(warpline::stages::fetch::Fetched::new(bytes.to_vec()));
    item
}

/// The floor of `tiles`: one untimed tile first (GDAL and PROJ open their
/// drivers and database once per thread), then `rounds` timed rounds. The
/// floor is the *mean* CPU per tile: N tiles cost N x mean, so that is
/// what the limit "floor x cores" must use.
pub fn floor_of(tiles: &[Vec<u8>], work: &Path, rounds: usize) -> Floor {
    let stages = stage_handlers(work);
    let run = |id: String, bytes: &[u8], per: &mut [f64; 3]| {
        let mut item = fetched(id, bytes);
        let cpu = warpline::engine::report::thread_cpu;
        let start = cpu();
        for (k, s) in stages.iter().enumerate() {
            let t = cpu();
            // As the engine calls a stage: its prepare step, then its work.
            s.demand(&mut item).unwrap();
            s.process(&mut item).unwrap();
            per[k] += (cpu() - t).as_secs_f64() * 1000.0;
        }
        (cpu() - start).as_secs_f64() * 1000.0
    };
    run("warm-up".to_owned(), &tiles[0], &mut [0.0; 3]);
    // Nothing written before (making the tiles, or a run) is left for this
    // floor's fsyncs to flush.
    // SAFETY: sync() takes no arguments and only flushes dirty pages.
    unsafe { libc::sync() };
    let mut times = Vec::new();
    let mut per = [0.0f64; 3];
    for round in 0..rounds {
        for (i, bytes) in tiles.iter().enumerate() {
            times.push(run(format!("f{round}-{i}"), bytes, &mut per));
        }
    }
    let n = times.len() as f64;
    times.sort_by(f64::total_cmp);
    Floor {
        mean: times.iter().sum::<f64>() / n,
        per: per.map(|p| p / n),
        times,
    }
}

/// The uniform tiles' floor (two rounds of the distinct tiles): CPU ms per
/// tile, with its split and spread on stderr. The median sits 2-3% below
/// the mean because a few fsyncs are slow, and those are part of the work.
pub fn floor(work: &Path) -> f64 {
    let tiles: Vec<Vec<u8>> = (0..DISTINCT)
        .map(|i| make_tile(i, TILE, false, work))
        .collect();
    let stat0 = machine_jiffies();
    let f = floor_of(&tiles, work, 2);
    let stat1 = machine_jiffies();
    let n = f.times.len() as f64;
    // The whole machine's busy time over the floor's rounds (jiffies of
    // 10 ms): the floor's thread, and the kernel's work for it elsewhere
    // (journal commits, writeback), and whatever else ran.
    eprintln!(
        "floor on the machine: busy {:.2} ms/tile (its thread {:.2})",
        (stat1.0 - stat0.0) as f64 * 10.0 / n,
        f.mean
    );
    let t = &f.times;
    eprintln!(
        "floor (ms per tile): mean {:.2} = decode {:.2} + reproject {:.2} + write {:.2}; median {:.2}, p10 {:.2}, p90 {:.2}",
        f.mean,
        f.per[0],
        f.per[1],
        f.per[2],
        t[t.len() / 2],
        t[t.len() / 10],
        t[t.len() * 9 / 10],
    );
    f.mean
}

/// The mixed corpus's tiles in `dir` (made by the parent), by kind: every
/// kind, or those `WARPLINE_BENCH_KINDS` names (comma-separated).
pub fn mixed_tiles(dir: &Path) -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let only = std::env::var("WARPLINE_BENCH_KINDS").unwrap_or_default();
    mixed::KINDS
        .iter()
        .filter(|k| only.is_empty() || only.split(',').any(|o| o == **k))
        .map(|kind| {
            let tiles = (0..mixed::PER_KIND)
                .map(|i| std::fs::read(dir.join(format!("{kind}-{i}.tif"))).unwrap())
                .collect();
            (*kind, tiles)
        })
        .collect()
}

/// The mixed corpus's floor, kind by kind (two rounds of each kind's
/// tiles), printed one line per kind on stderr: CPU ms per tile by stage.
/// Returns the mean over every kind (the corpus serves them equally) and
/// each kind's line.
pub fn mixed_floor(dir: &Path, work: &Path) -> (f64, Vec<String>) {
    let mut lines = Vec::new();
    let mut sum = 0.0;
    let kinds = mixed_tiles(dir);
    for (kind, tiles) in &kinds {
        let f = floor_of(tiles, work, 2);
        sum += f.mean;
        lines.push(format!(
            "floor {kind:<12} {:7.2} ms/tile = decode {:6.2} + reproject {:7.2} + write {:6.2}",
            f.mean, f.per[0], f.per[1], f.per[2]
        ));
    }
    (sum / kinds.len() as f64, lines)
}

/// The options the pipeline's reproject stage gives `GDALWarp`: the same
/// as `gdalwarp -t_srs EPSG:3857 -r bilinear -et 0.125 -wm 64MiB -of MEM`.
const GDALWARP_ARGS: [&str; 10] = [
    "-t_srs",
    "EPSG:3857",
    "-r",
    "bilinear",
    "-et",
    "0.125",
    "-wm",
    "67108864",
    "-of",
    "MEM",
];

/// GDAL's own warp of `tiles` (`GDALWarp` called in this thread, as
/// `gdal.Warp` calls it, with the stage's options, from an in-memory file
/// to a MEM dataset): CPU ms per tile of the call alone, over `rounds`
/// rounds after one untimed tile.
pub fn gdalwarp_of(tiles: &[Vec<u8>], rounds: usize) -> f64 {
    use gdal_sys as sys;
    let args: Vec<std::ffi::CString> = GDALWARP_ARGS
        .iter()
        .map(|a| std::ffi::CString::new(*a).unwrap())
        .collect();
    let mut argv: Vec<*mut std::ffi::c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let cpu = warpline::engine::report::thread_cpu;
    let mut spent = 0.0;
    let path = c"/vsimem/bench-gdalwarp.tif";
    let mut warp = |bytes: &[u8]| {
        // Over a buffer this closure owns, as the decode stage does
        // (GDAL-NOTES.md: not gdal's create_mem_file).
        let mut buffer = bytes.to_vec();
        // SAFETY: `buffer` outlives the file: GDAL never frees it
        // (bTakeOwnership 0) and the name is unlinked below, before it is
        // dropped; the handle returned is closed at once.
        unsafe {
            let fp = sys::VSIFileFromMemBuffer(
                path.as_ptr(),
                buffer.as_mut_ptr(),
                buffer.len() as u64,
                0,
            );
            assert!(!fp.is_null(), "GDAL refused the tile's bytes");
            sys::VSIFCloseL(fp);
        }
        let src = gdal::Dataset::open(path.to_str().unwrap()).unwrap();
        let t = cpu();
        // SAFETY: `argv` is a NULL-terminated list of C strings alive for
        // the call; GDAL copies what it needs.
        let options =
            unsafe { sys::GDALWarpAppOptionsNew(argv.as_mut_ptr(), std::ptr::null_mut()) };
        assert!(
            !options.is_null(),
            "GDALWarpAppOptionsNew refused {GDALWARP_ARGS:?}"
        );
        let mut handle = src.c_dataset();
        let mut usage = 0;
        // SAFETY: one valid source dataset, valid options; the MEM output
        // is ours and closed below.
        let out = unsafe {
            sys::GDALWarp(
                c"".as_ptr(),
                std::ptr::null_mut(),
                1,
                &mut handle,
                options,
                &mut usage,
            )
        };
        assert!(!out.is_null(), "GDALWarp failed");
        // SAFETY: made above, freed once; `out` is the dataset GDALWarp
        // handed us, closed once.
        unsafe {
            sys::GDALWarpAppOptionsFree(options);
            sys::GDALClose(out);
        }
        let ms = (cpu() - t).as_secs_f64() * 1000.0;
        drop(src);
        // SAFETY: unlinks the name registered above; `buffer` is freed after.
        unsafe { sys::VSIUnlink(path.as_ptr()) };
        drop(buffer);
        ms
    };
    warp(&tiles[0]);
    for _ in 0..rounds {
        for t in tiles {
            spent += warp(t);
        }
    }
    spent / (rounds * tiles.len()) as f64
}

/// Each kind's floor with GDAL's own warp beside its reproject stage, one
/// line per kind on stderr, and the mean over the kinds on stdout
/// (`mixed-floor`).
pub fn mixed_floor_lines(dir: &Path, work: &Path) {
    let mut sum = 0.0;
    let kinds = mixed_tiles(dir);
    for (kind, tiles) in &kinds {
        let f = floor_of(tiles, work, 2);
        let g = gdalwarp_of(tiles, 2);
        sum += f.mean;
        eprintln!(
            "floor {kind:<12} {:7.2} ms/tile = decode {:6.2} + reproject {:7.2} + write {:6.2}; GDALWarp alone {g:7.2}",
            f.mean, f.per[0], f.per[1], f.per[2]
        );
    }
    println!("mixed_floor_ms_per_tile={:.2}", sum / kinds.len() as f64);
}

/// warpline's resampling loop against GDAL's, kind by kind
/// (`mixed-kernel`): the floor's reproject stage with `kernel = "auto"`
/// and with `kernel = "gdal"`, in turn, `ROUNDS` times each, in one
/// process, so both see the same machine. One line per kind on stderr
/// (median reproject CPU ms per tile of each, and their ratio), the
/// means over the kinds on stdout.
pub fn mixed_kernel_lines(dir: &Path, work: &Path) {
    const ROUNDS: usize = 3;
    let kinds = mixed_tiles(dir);
    let (mut ours_sum, mut theirs_sum) = (0.0, 0.0);
    for (kind, tiles) in &kinds {
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            for (setting, into) in [("auto", &mut ours), ("gdal", &mut theirs)] {
                // SAFETY (of the environment): the bench runs this on its
                // only thread; pipeline_toml reads the variable.
                std::env::set_var("WARPLINE_BENCH_KERNEL", setting);
                into.push(floor_of(tiles, work, 1).per[1]);
            }
        }
        std::env::remove_var("WARPLINE_BENCH_KERNEL");
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (o, t) = (median(&mut ours), median(&mut theirs));
        ours_sum += o;
        theirs_sum += t;
        eprintln!(
            "kernel {kind:<12} reproject {o:7.2} ms/tile with warpline's loop, {t:7.2} with GDAL's ({:.2}x)",
            t / o
        );
    }
    let n = kinds.len() as f64;
    println!(
        "mixed_kernel_reproject_ms_per_tile={:.2} mixed_gdal_reproject_ms_per_tile={:.2}",
        ours_sum / n,
        theirs_sum / n
    );
}
