//! gdalwarp's command line read as gdalwarp reads it: flags in any case
//! and any order among the file names, each with its values (`-tr xres
//! yres`, `-te xmin ymin xmax ymax`, `-srcnodata "0 0 0"` as one value;
//! `-wo`, `-to`, `-co`, `-oo` repeated), into the keys of the decode,
//! reproject and write stages. One table, [`FLAGS`], says what each flag
//! becomes (docs/pipeline.md lists the same, a test holds them together);
//! [`REFUSED`] names the flags warpline cannot honour and why. Values are
//! checked here only for their count and form: the stages check the keys
//! when the pipeline compiles, as they check a file's.

use super::toml::{float, string, Table};

/// A gdalwarp request: the stages' keys, the inputs and the directory.
#[derive(Debug, Default)]
pub(super) struct Warp {
    pub(super) decode: Table,
    pub(super) reproject: Table,
    pub(super) write: Table,
    /// The inputs as given: files, URLs, objects, a pattern or `@LIST`.
    pub(super) inputs: Vec<String>,
    /// The last file name: the output directory.
    pub(super) outdir: String,
    /// `-q`: no progress.
    pub(super) quiet: bool,
    /// `-h`: the help is asked for.
    pub(super) help: bool,
    /// Flags taken but left out of the pipeline, and why.
    pub(super) left_out: Vec<String>,
}

/// How many values a flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Values {
    /// Exactly this many.
    Exactly(usize),
    /// One, and a second when it starts with a digit (`-refine_gcps`).
    OneOrADigit,
}

/// A flag warpline honours.
pub(super) struct Flag {
    /// gdalwarp's name (matched in any case, as gdalwarp does).
    pub(super) name: &'static str,
    pub(super) values: Values,
    /// What it becomes: the stage's key (docs/pipeline.md's table).
    pub(super) key: &'static str,
    apply: fn(&mut Warp, &[String]) -> Result<(), String>,
}

impl std::fmt::Debug for Flag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} -> {}", self.name, self.key)
    }
}

const fn flag(
    name: &'static str,
    values: usize,
    key: &'static str,
    apply: fn(&mut Warp, &[String]) -> Result<(), String>,
) -> Flag {
    Flag {
        name,
        values: Values::Exactly(values),
        key,
        apply,
    }
}

/// Every gdalwarp flag warpline honours, in gdalwarp's usage order.
pub(super) const FLAGS: &[Flag] = &[
    flag("-s_srs", 1, "reproject.src_crs", |w, v| {
        text(&mut w.reproject, "src_crs", v)
    }),
    flag("-t_srs", 1, "reproject.crs", |w, v| {
        text(&mut w.reproject, "crs", v)
    }),
    flag("-ct", 1, "reproject.coordinate_operation", |w, v| {
        text(&mut w.reproject, "coordinate_operation", v)
    }),
    flag("-to", 1, "reproject.transformer_options", |w, v| {
        w.reproject.option("transformer_options", &v[0])
    }),
    flag("-vshift", 0, "reproject.vertical_shift = true", |w, _| {
        put(&mut w.reproject, "vertical_shift", "true".into())
    }),
    flag(
        "-novshift",
        0,
        "reproject.vertical_shift = false",
        |w, _| put(&mut w.reproject, "vertical_shift", "false".into()),
    ),
    flag("-s_coord_epoch", 1, "reproject.src_coord_epoch", |w, v| {
        a_number(&mut w.reproject, "src_coord_epoch", v)
    }),
    flag("-t_coord_epoch", 1, "reproject.dst_coord_epoch", |w, v| {
        a_number(&mut w.reproject, "dst_coord_epoch", v)
    }),
    flag(
        "-order",
        1,
        "reproject.transformer = \"polynomial\", order",
        |w, v| {
            let n = whole(&v[0])?;
            w.reproject.set("transformer", string("polynomial"));
            put(&mut w.reproject, "order", n.to_string())
        },
    ),
    flag("-tps", 0, "reproject.transformer = \"tps\"", |w, _| {
        put(&mut w.reproject, "transformer", string("tps"))
    }),
    flag("-rpc", 0, "reproject.transformer = \"rpc\"", |w, _| {
        put(&mut w.reproject, "transformer", string("rpc"))
    }),
    flag(
        "-geoloc",
        0,
        "reproject.transformer = \"geoloc\"",
        |w, _| put(&mut w.reproject, "transformer", string("geoloc")),
    ),
    flag("-et", 1, "reproject.error_threshold", |w, v| {
        a_number(&mut w.reproject, "error_threshold", v)
    }),
    Flag {
        name: "-refine_gcps",
        values: Values::OneOrADigit,
        key: "reproject.refine_gcps",
        apply: |w, v| list_of_numbers(&mut w.reproject, "refine_gcps", v),
    },
    flag("-te", 4, "reproject.extent", |w, v| {
        list_of_numbers(&mut w.reproject, "extent", v)
    }),
    flag("-te_srs", 1, "reproject.extent_crs", |w, v| {
        text(&mut w.reproject, "extent_crs", v)
    }),
    flag("-tr", 2, "reproject.resolution", |w, v| {
        // gdalwarp takes the y resolution's absolute value.
        let (x, y) = (number(&v[0])?, number(&v[1])?.abs());
        put(
            &mut w.reproject,
            "resolution",
            format!("[{}, {}]", float(x), float(y)),
        )
    }),
    flag("-tap", 0, "reproject.tap = true", |w, _| {
        put(&mut w.reproject, "tap", "true".into())
    }),
    flag("-ts", 2, "reproject.size", |w, v| {
        let (x, y) = (whole(&v[0])?, whole(&v[1])?);
        put(&mut w.reproject, "size", format!("[{x}, {y}]"))
    }),
    flag("-ovr", 1, "reproject.overview", |w, v| {
        let value = match v[0].parse::<u32>() {
            Ok(n) => n.to_string(),
            Err(_) => string(&v[0]),
        };
        put(&mut w.reproject, "overview", value)
    }),
    flag("-wo", 1, "reproject.warp_options", |w, v| {
        warp_option(w, &v[0])
    }),
    flag("-ot", 1, "reproject.dtype", |w, v| {
        text(&mut w.reproject, "dtype", v)
    }),
    flag("-wt", 1, "reproject.working_type", |w, v| {
        text(&mut w.reproject, "working_type", v)
    }),
    flag("-srcnodata", 1, "reproject.src_nodata", |w, v| {
        text(&mut w.reproject, "src_nodata", v)
    }),
    flag("-dstnodata", 1, "reproject.dst_nodata", |w, v| {
        text(&mut w.reproject, "dst_nodata", v)
    }),
    flag("-srcalpha", 0, "reproject.src_alpha = true", |w, _| {
        put(&mut w.reproject, "src_alpha", "true".into())
    }),
    flag("-nosrcalpha", 0, "reproject.src_alpha = false", |w, _| {
        put(&mut w.reproject, "src_alpha", "false".into())
    }),
    flag("-dstalpha", 0, "reproject.dst_alpha = true", |w, _| {
        put(&mut w.reproject, "dst_alpha", "true".into())
    }),
    flag("-r", 1, "reproject.resampling", |w, v| {
        text(&mut w.reproject, "resampling", v)
    }),
    flag("-wm", 1, "reproject.warp_memory", |w, v| {
        put(&mut w.reproject, "warp_memory", warp_memory(&v[0])?)
    }),
    flag("-multi", 0, "(left out: only speed)", |w, _| {
        w.left_out.push(format!("-multi: {ONLY_SPEED}"));
        Ok(())
    }),
    flag("-q", 0, "--progress off", |w, _| {
        w.quiet = true;
        Ok(())
    }),
    flag("-quiet", 0, "--progress off", |w, _| {
        w.quiet = true;
        Ok(())
    }),
    flag("-cutline", 1, "reproject.cutline", |w, v| {
        text(&mut w.reproject, "cutline", v)
    }),
    flag("-cl", 1, "reproject.cutline_layer", |w, v| {
        text(&mut w.reproject, "cutline_layer", v)
    }),
    flag("-cwhere", 1, "reproject.cutline_where", |w, v| {
        text(&mut w.reproject, "cutline_where", v)
    }),
    flag("-csql", 1, "reproject.cutline_sql", |w, v| {
        text(&mut w.reproject, "cutline_sql", v)
    }),
    flag("-cblend", 1, "reproject.cutline_blend", |w, v| {
        a_number(&mut w.reproject, "cutline_blend", v)
    }),
    flag(
        "-crop_to_cutline",
        0,
        "reproject.crop_to_cutline = true",
        |w, _| put(&mut w.reproject, "crop_to_cutline", "true".into()),
    ),
    flag("-if", 1, "decode.drivers", |w, v| {
        push(&mut w.decode, "drivers", string(&v[0]))
    }),
    flag("-of", 1, "write.format", |w, v| {
        let format = match v[0].to_ascii_lowercase().as_str() {
            "gtiff" => "GTiff",
            "cog" => "COG",
            _ => return Err("warpline writes GTiff or COG (the write stage's `format`)".into()),
        };
        put(&mut w.write, "format", string(format))
    }),
    flag("-co", 1, "write.creation_options", |w, v| {
        w.write.option("creation_options", &v[0])
    }),
    flag("-overwrite", 0, "write.exists = \"overwrite\"", |w, _| {
        put(&mut w.write, "exists", string("overwrite"))
    }),
    flag("-nomd", 0, "reproject.metadata = false", |w, _| {
        put(&mut w.reproject, "metadata", "false".into())
    }),
    flag("-cvmd", 1, "reproject.conflicting_metadata", |w, v| {
        text(&mut w.reproject, "conflicting_metadata", v)
    }),
    flag("-oo", 1, "decode.open_options", |w, v| {
        w.decode.option("open_options", &v[0])
    }),
    flag("-b", 1, "reproject.bands", |w, v| {
        push(&mut w.reproject, "bands", whole(&v[0])?.to_string())
    }),
    flag("-srcband", 1, "reproject.bands", |w, v| {
        push(&mut w.reproject, "bands", whole(&v[0])?.to_string())
    }),
];

/// Why `-multi` and `-wo NUM_THREADS` are left out.
const ONLY_SPEED: &str = "left out: it changes only speed; warps run in parallel across the \
                          reproject stage's workers under the `cpu` limiter";

/// Flags warpline cannot honour: the name, how many values it takes (to
/// read on and report every problem at once) and why.
pub(super) const REFUSED: &[(&str, usize, &str)] = &[
    (
        "-doo",
        1,
        "warpline never opens an existing output: each is written new, under a temporary \
         name renamed into place",
    ),
    (
        "-setci",
        0,
        "it sets an existing output's colour interpretation; warpline never warps into an \
         existing output, and a new one has the source's",
    ),
    (
        "-dstband",
        1,
        "no key maps source bands onto other output bands; `-b` chooses the source bands, \
         which become the output's in that order",
    ),
    (
        "--config",
        2,
        "set GDAL configuration options in the environment, where GDAL reads them \
         (`GDAL_CACHEMAX=512 warpline warp ...`)",
    ),
    (
        "--debug",
        1,
        "GDAL's messages are in the log: WARPLINE_LOG=gdal=debug",
    ),
    (
        "--optfile",
        1,
        "give the options on the command line, or grow the pipeline `--print-pipeline` \
         prints",
    ),
];

/// Reads gdalwarp's arguments: every problem at once, or the request.
pub(super) fn parse(args: &[String]) -> Result<Warp, Vec<String>> {
    let mut w = Warp::default();
    let mut names = Vec::new();
    let mut problems = Vec::new();
    let mut rest = args;
    while let Some((arg, after)) = rest.split_first() {
        rest = after;
        if !is_flag(arg) {
            names.push(arg.clone());
            continue;
        }
        let lower = arg.to_ascii_lowercase();
        if lower == "-h" || lower == "-help" {
            w.help = true;
            continue;
        }
        if let Some(f) = FLAGS.iter().find(|f| f.name == lower) {
            let n = match f.values {
                Values::Exactly(n) => n,
                Values::OneOrADigit => {
                    let digit = |v: &String| v.starts_with(|c: char| c.is_ascii_digit());
                    1 + usize::from(rest.len() > 1 && digit(&rest[1]))
                }
            };
            if rest.len() < n {
                problems.push(format!("{arg} takes {n} value{}", plural(n)));
                break;
            }
            let (values, after) = rest.split_at(n);
            rest = after;
            if let Err(e) = (f.apply)(&mut w, values) {
                problems.push(format!("{arg} {}: {e}", values.join(" ")));
            }
        } else if let Some((_, n, why)) = REFUSED.iter().find(|(name, ..)| *name == lower) {
            problems.push(format!("{arg} is not supported: {why}"));
            rest = rest.get(*n..).unwrap_or_default();
        } else {
            // Its values are unknown: what follows cannot be read.
            problems.push(format!(
                "{arg}: not a gdalwarp option warpline knows (`warpline warp --help` lists them)"
            ));
            return Err(problems);
        }
    }
    if w.help {
        return Ok(w);
    }
    if let Err(e) = inputs_and_outdir(&mut w, names) {
        problems.push(e);
    }
    if w.reproject.get("crs").is_none() {
        problems.push(
            "-t_srs is required: warpline reprojects to a CRS you name (gdalwarp without it \
             keeps each input's own)"
                .to_owned(),
        );
    }
    if problems.is_empty() {
        Ok(w)
    } else {
        Err(problems)
    }
}

/// gdalwarp's test: any argument starting with `-` is a flag (a lone `-`
/// is not).
fn is_flag(arg: &str) -> bool {
    arg.len() > 1 && arg.starts_with('-')
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The last file name is the output directory; the others are inputs.
fn inputs_and_outdir(w: &mut Warp, mut names: Vec<String>) -> Result<(), String> {
    let (Some(outdir), false) = (names.pop(), names.is_empty()) else {
        return Err("give the inputs, then the output directory: INPUTS... OUTDIR".into());
    };
    let path = std::path::Path::new(&outdir);
    let looks_like_a_file = path.is_file()
        || (!path.is_dir()
            && path.extension().is_some_and(|e| {
                ["tif", "tiff", "vrt", "img", "nc", "jp2"]
                    .iter()
                    .any(|x| e.eq_ignore_ascii_case(x))
            }));
    if looks_like_a_file {
        return Err(format!(
            "{outdir:?} is a file name, but warpline warp writes one output per input into \
             a directory, each named after its input (gdalwarp's last argument is one output \
             file; many inputs into one output is the `mosaic` source, docs/pipeline.md)"
        ));
    }
    w.inputs = names;
    w.outdir = outdir;
    Ok(())
}

/// Sets `key`; for the table's one-line closures.
fn put(table: &mut Table, key: &str, value: String) -> Result<(), String> {
    table.set(key, value);
    Ok(())
}

/// Adds to the list at `key`.
fn push(table: &mut Table, key: &str, value: String) -> Result<(), String> {
    table.push(key, value);
    Ok(())
}

fn text(table: &mut Table, key: &str, v: &[String]) -> Result<(), String> {
    table.set(key, string(&v[0]));
    Ok(())
}

/// One number.
fn a_number(table: &mut Table, key: &str, v: &[String]) -> Result<(), String> {
    table.set(key, float(number(&v[0])?));
    Ok(())
}

fn list_of_numbers(table: &mut Table, key: &str, v: &[String]) -> Result<(), String> {
    let values: Result<Vec<String>, String> = v.iter().map(|s| number(s).map(float)).collect();
    table.set(key, format!("[{}]", values?.join(", ")));
    Ok(())
}

fn number(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .map_err(|_| format!("{text:?} is not a number"))
}

fn whole(text: &str) -> Result<u32, String> {
    text.trim()
        .parse::<u32>()
        .map_err(|_| format!("{text:?} is not a whole number"))
}

/// `-wm`: as gdalwarp reads it, megabytes below 10000, else bytes.
fn warp_memory(text: &str) -> Result<String, String> {
    let n = number(text)?;
    Ok(if n < 10_000.0 && n.fract() == 0.0 && n >= 0.0 {
        string(&format!("{n}MiB"))
    } else if n < 10_000.0 {
        format!("{}", (n * 1_048_576.0).max(0.0) as u64)
    } else {
        format!("{}", n as u64)
    })
}

/// `-wo NAME=VALUE`, but `NUM_THREADS`, which changes only speed.
fn warp_option(w: &mut Warp, name_value: &str) -> Result<(), String> {
    let is_threads = name_value
        .split_once('=')
        .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case("NUM_THREADS"));
    if is_threads {
        w.left_out.push(format!("-wo {name_value}: {ONLY_SPEED}"));
        return Ok(());
    }
    w.reproject.option("warp_options", name_value)
}

#[cfg(test)]
#[path = "flags_tests.rs"]
mod tests;
