//! The pipeline a `warpline warp` command line means, as the TOML text a
//! user would write: a source for the inputs (a `list` for `@LIST`, a
//! `glob` for one pattern, else `inline`), fetch, decode, reproject with
//! the keys of gdalwarp's flags, and write into the output directory.
//! `warpline warp` compiles and runs this text, and `--print-pipeline`
//! prints it, so the two cannot differ.

use std::path::Path;

use super::flags::Warp;
use super::toml::string;

/// The pipeline's TOML; `command` is the command line it is made from
/// (its gdalwarp arguments), quoted in its first comment.
pub(super) fn text(w: &Warp, command: &[String]) -> Result<String, String> {
    let source = source(&w.inputs)?;
    let mut t = format!(
        "# The pipeline of:\n#   warpline warp {}\n# Run it with `warpline run FILE.toml`; \
         docs/pipeline.md says what each key does.\n",
        shell_words(command)
    );
    for note in &w.left_out {
        t.push_str(&format!("# {note}\n"));
    }
    t.push_str(&format!(
        r#"
[pipeline]
name = "warp"
flow = ["fetch", "decode", "reproject", "write"]

[source]
{source}
[limits.connections]
permits = 8

[limits.memory]
budget = "1GiB"

[limits.cpu]
permits = "cores"

[stages.fetch]
kind = "fetch"
workers = 8
limits = ["connections"]
memory = "memory"

[stages.decode]
{decode}{decode_keys}
[stages.reproject]
{reproject}{reproject_keys}
[stages.write]
kind = "write"
workers = 2
dir = {dir}
format = {format}
{creation_options}exists = {exists}
"#,
        decode = cpu_stage("decode"),
        decode_keys = w.decode.lines(),
        reproject = cpu_stage("reproject"),
        reproject_keys = w.reproject.lines(),
        dir = string(&w.outdir),
        format = w.write.get("format").unwrap_or_else(|| string("GTiff")),
        creation_options = w
            .write
            .get("creation_options")
            .map(|c| format!("creation_options = {c}\n"))
            .unwrap_or_default(),
        exists = w.write.get("exists").unwrap_or_else(|| string("skip")),
    ));
    Ok(t)
}

/// A CPU stage under the memory budget and the `cpu` permits, a worker
/// per core.
fn cpu_stage(kind: &str) -> String {
    format!(
        "kind = \"{kind}\"\nworkers = \"cores\"\nlimits = [\"memory\", \"cpu\"]\n\
         release = [\"memory\"]\ncarry = [\"memory\"]\n"
    )
}

/// The `[source]` table's keys: one `@LIST` is a `list` source, one
/// pattern a `glob` source, any number of files and URLs an `inline`
/// one; a mix is refused (a pipeline has one source).
fn source(inputs: &[String]) -> Result<String, String> {
    match inputs {
        [one] if list_file(one).is_some() => Ok(format!(
            "kind = \"list\"\npath = {}\n",
            string(list_file(one).unwrap_or_default())
        )),
        [one] if is_pattern(one) => Ok(format!("kind = \"glob\"\npattern = {}\n", string(one))),
        many => {
            if let Some(odd) = many
                .iter()
                .find(|s| list_file(s).is_some() || is_pattern(s))
            {
                return Err(format!(
                    "{odd}: give one @LIST, one pattern, or files and URLs, not a mix (a \
                     pipeline has one source)"
                ));
            }
            let lines: String = many
                .iter()
                .map(|s| format!("    {},\n", string(s)))
                .collect();
            Ok(format!("kind = \"inline\"\ninputs = [\n{lines}]\n"))
        }
    }
}

/// `LIST` of `@LIST`.
fn list_file(s: &str) -> Option<&str> {
    s.strip_prefix('@')
}

/// A pattern for the `glob` source: wildcards in a local path or an
/// object URL, and no file of that name (a URL's `?` is its query).
fn is_pattern(s: &str) -> bool {
    let url = ["http://", "https://", "file://"]
        .iter()
        .any(|p| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p)));
    !url && s.contains(['*', '?', '[']) && !Path::new(s).is_file()
}

/// The arguments as a POSIX shell reads them back.
fn shell_words(args: &[String]) -> String {
    let quote = |a: &String| {
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c));
        if plain {
            a.clone()
        } else if a.chars().any(char::is_control) {
            // Never a line break in the comment.
            format!("{a:?}")
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    args.iter().map(quote).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_source_fits_the_inputs() {
        assert_eq!(
            source(&strings(&["@tiles.txt"])).unwrap(),
            "kind = \"list\"\npath = \"tiles.txt\"\n"
        );
        assert_eq!(
            source(&strings(&["s3://b/scenes/*.tif"])).unwrap(),
            "kind = \"glob\"\npattern = \"s3://b/scenes/*.tif\"\n"
        );
        assert_eq!(
            source(&strings(&["a.tif", "https://h/b.tif?x=1"])).unwrap(),
            "kind = \"inline\"\ninputs = [\n    \"a.tif\",\n    \"https://h/b.tif?x=1\",\n]\n"
        );
        let mix = source(&strings(&["a.tif", "@more.txt"])).unwrap_err();
        assert!(mix.starts_with("@more.txt: give one @LIST"), "{mix}");
        assert!(source(&strings(&["*.tif", "b/*.tif"])).is_err());
    }

    #[test]
    fn the_command_is_quoted_as_a_shell_reads_it() {
        let args = strings(&[
            "-t_srs",
            "EPSG:3857",
            "-srcnodata",
            "0 0 0",
            "it's",
            "*.tif",
        ]);
        assert_eq!(
            shell_words(&args),
            r#"-t_srs EPSG:3857 -srcnodata '0 0 0' 'it'\''s' '*.tif'"#
        );
        assert_eq!(shell_words(&strings(&["a\nb"])), r#""a\nb""#);
    }
}
