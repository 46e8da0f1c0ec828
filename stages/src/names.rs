//! Names for GDAL: an input's file name made safe, the member of an
//! archive (`tiles.zip!/N45E006.hgt`), and the sibling files GDAL reads
//! beside a raster. Pure string work: nothing here touches a file.
//!
//! Some drivers need a raster's own name (SRTM `.hgt`: the tile's position
//! is its name) or its container (`.zip`, `.gz`, `.tar`), and GDAL finds a
//! raster's external mask, overviews, metadata and world file by names
//! derived from the raster's. So decode opens the bytes under the input's
//! own file name, made one safe path component: letters, digits, `.`, `_`
//! and `-`, anything else replaced by `_`, never starting with a dot.

/// The local path of an input: a `file://` URL as RFC 8089 reads it
/// (`Url::to_file_path`: percent-decoded, host empty or `localhost`), any
/// other text as a path. `None` for a `file:` URL that names no local path.
pub fn local_path(source: &str) -> Option<std::path::PathBuf> {
    if !source.starts_with("file:") {
        return Some(source.into());
    }
    url::Url::parse(source).ok()?.to_file_path().ok()
}

/// Archive extensions after which `!/` starts a member's path.
const ARCHIVES: &[&str] = &[".zip", ".tar", ".tgz", ".tar.gz", ".gz"];

/// Splits `archive.zip!/member` into the archive's source and the
/// member's path; any other source is returned whole.
pub fn split_member(source: &str) -> (&str, Option<&str>) {
    for (at, _) in source.match_indices("!/") {
        let base = &source[..at];
        let lower = base.to_ascii_lowercase();
        if ARCHIVES.iter().any(|ext| lower.ends_with(ext)) {
            return (base, Some(&source[at + 2..]));
        }
    }
    (source, None)
}

/// A member path that could leave its archive, or is empty.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a path inside the archive (no empty, `.` or `..` parts)")]
pub struct BadMember(pub String);

/// Refuses a member path that could leave the archive or is empty.
pub fn check_member(member: &str) -> Result<(), BadMember> {
    let bad = member.is_empty()
        || member.starts_with('/')
        || member.contains(['\\', '\0'])
        || member
            .split('/')
            .any(|part| part.is_empty() || part == "." || part == "..");
    if bad {
        Err(BadMember(member.to_owned()))
    } else {
        Ok(())
    }
}

/// The last path component of a source (a path or a URL, without its
/// query or fragment).
pub fn last_component(source: &str) -> &str {
    let end = source.find(['?', '#']).unwrap_or(source.len());
    let path = &source[..end];
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// `name` as one safe path component, at most 120 bytes, `input` when
/// nothing usable is left.
pub fn safe_file_name(name: &str) -> String {
    let mut safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    while safe.starts_with('.') {
        safe.remove(0);
    }
    if safe.len() > 120 {
        // Keep the end: it holds the extensions drivers look at.
        safe = safe[safe.len() - 120..].to_owned();
    }
    if safe.is_empty() {
        "input".to_owned()
    } else {
        safe
    }
}

/// A container GDAL reads through one of its virtual file systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Archive {
    /// `/vsizip/`
    Zip,
    /// `/vsigzip/`: one gzipped file.
    Gzip,
    /// `/vstar/`: a tar file, gzipped or not.
    Tar,
}

impl Archive {
    /// The archive the bytes are, by their first bytes (and by name for a
    /// gzipped tar).
    pub fn of(name: &str, head: &[u8]) -> Option<Archive> {
        let lower = name.to_ascii_lowercase();
        if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            Some(Archive::Zip)
        } else if head.starts_with(&[0x1f, 0x8b]) {
            if lower.ends_with(".tar.gz") || lower.ends_with(".tgz") {
                Some(Archive::Tar)
            } else {
                Some(Archive::Gzip)
            }
        } else if head.len() >= 262 && &head[257..262] == b"ustar" {
            Some(Archive::Tar)
        } else {
            None
        }
    }

    /// GDAL's prefix for it.
    pub fn prefix(self) -> &'static str {
        match self {
            Archive::Zip => "/vsizip/",
            Archive::Gzip => "/vsigzip/",
            Archive::Tar => "/vstar/",
        }
    }
}

/// What follows a raster's name in the siblings GDAL reads beside it:
/// its external mask, overviews and metadata.
pub const APPENDED: &[&str] = &[".msk", ".ovr", ".aux.xml"];

/// The world-file and projection extensions GDAL reads beside a raster
/// named `name` (in place of its extension): the short form (`.tfw` for
/// `.tif`), the long form (`.tifw`), `.wld`, and `.prj`.
pub fn replaced_extensions(name: &str) -> Vec<String> {
    let Some((_, ext)) = name.rsplit_once('.') else {
        return vec!["wld".to_owned(), "prj".to_owned()];
    };
    let ext = ext.to_ascii_lowercase();
    let mut out = Vec::new();
    if ext.len() >= 2 && ext.is_ascii() {
        let b = ext.as_bytes();
        out.push(format!("{}{}w", b[0] as char, b[b.len() - 1] as char));
    }
    out.push(format!("{ext}w"));
    out.push("wld".to_owned());
    out.push("prj".to_owned());
    out.dedup();
    out
}

/// The names a sibling may have beside a raster named `name`, each with
/// its suffix (what follows `name`, or its stem): lower case first, then
/// upper case, as GDAL tries them.
pub fn sibling_candidates(name: &str) -> Vec<(String, String)> {
    let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
    let mut out = Vec::new();
    for upper in [false, true] {
        let case = |s: &str| {
            if upper {
                s.to_ascii_uppercase()
            } else {
                s.to_owned()
            }
        };
        for suffix in APPENDED {
            let suffix = case(suffix);
            out.push((format!("{name}{suffix}"), suffix));
        }
        for ext in replaced_extensions(name) {
            let ext = case(&ext);
            out.push((format!("{stem}.{ext}"), format!(".{ext}")));
        }
    }
    out
}

/// The number of entries a zip's end-of-central-directory record says it
/// holds; `None` if there is none, or it is a ZIP64 count (65535).
pub fn zip_entries(bytes: &[u8]) -> Option<usize> {
    // The record is 22 bytes plus a comment of at most 65535.
    let from = bytes.len().saturating_sub(22 + 65535);
    let tail = &bytes[from..];
    let at = tail.windows(4).rposition(|w| w == b"PK\x05\x06")?;
    let total = tail.get(at + 10..at + 12)?;
    let n = u16::from_le_bytes([total[0], total[1]]);
    (n != u16::MAX).then_some(usize::from(n))
}

/// Whether a file in an archive goes with a raster rather than being one:
/// metadata, masks, overviews, world files, projection and text files.
pub fn is_companion(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    APPENDED
        .iter()
        .chain(&[
            ".aux", ".prj", ".wld", ".tfw", ".tifw", ".xml", ".txt", ".md",
        ])
        .any(|s| lower.ends_with(s))
}

pub use warpline_gdal::files::is_tiff;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_read_as_rfc_8089_says() {
        let path = |s: &str| local_path(s).map(|p| p.display().to_string());
        assert_eq!(path("file:///data/a.tif").as_deref(), Some("/data/a.tif"));
        assert_eq!(
            path("file://localhost/data/a.tif").as_deref(),
            Some("/data/a.tif")
        );
        assert_eq!(
            path("file:///data/a%20b.tif").as_deref(),
            Some("/data/a b.tif")
        );
        assert_eq!(path("/data/a%20b.tif").as_deref(), Some("/data/a%20b.tif"));
        assert_eq!(path("tiles/a.tif").as_deref(), Some("tiles/a.tif"));
        assert_eq!(path("file://elsewhere/data/a.tif"), None);
    }

    #[test]
    fn members_split_only_after_an_archive() {
        assert_eq!(
            split_member("/data/srtm.zip!/N45E006.hgt"),
            ("/data/srtm.zip", Some("N45E006.hgt"))
        );
        assert_eq!(
            split_member("https://h/x.tar.gz!/a/b.tif"),
            ("https://h/x.tar.gz", Some("a/b.tif"))
        );
        assert_eq!(
            split_member("https://h/a!/b.tif"),
            ("https://h/a!/b.tif", None)
        );
        assert!(check_member("a/b.tif").is_ok());
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "a\\b"] {
            assert!(check_member(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_are_one_safe_component() {
        assert_eq!(safe_file_name("N45E006.hgt"), "N45E006.hgt");
        assert_eq!(safe_file_name("../../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe_file_name("my tile (1).tif"), "my_tile__1_.tif");
        assert_eq!(safe_file_name("..."), "input");
        assert_eq!(safe_file_name(""), "input");
        assert_eq!(last_component("https://h/a/b.tif?sig=x#f"), "b.tif");
        assert_eq!(last_component("/a/b/c.tif"), "c.tif");
        let long = format!("{}.tif", "a".repeat(300));
        assert!(safe_file_name(&long).ends_with(".tif") && safe_file_name(&long).len() == 120);
    }

    #[test]
    fn archives_are_known_by_their_bytes() {
        assert_eq!(Archive::of("x.bin", b"PK\x03\x04rest"), Some(Archive::Zip));
        assert_eq!(
            Archive::of("x.tif.gz", &[0x1f, 0x8b, 8]),
            Some(Archive::Gzip)
        );
        assert_eq!(Archive::of("x.tgz", &[0x1f, 0x8b, 8]), Some(Archive::Tar));
        let mut tar = vec![0u8; 300];
        tar[257..262].copy_from_slice(b"ustar");
        assert_eq!(Archive::of("x", &tar), Some(Archive::Tar));
        assert_eq!(Archive::of("x.zip", b"II*\0"), None);
    }

    #[test]
    fn siblings_are_the_names_gdal_looks_for() {
        let names: Vec<String> = sibling_candidates("a.tif")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for n in [
            "a.tif.msk",
            "a.tif.ovr",
            "a.tif.aux.xml",
            "a.tfw",
            "a.tifw",
            "a.wld",
        ] {
            assert!(names.contains(&n.to_owned()), "{n} in {names:?}");
        }
        assert!(names.contains(&"a.TFW".to_owned()));
        assert!(replaced_extensions("b.png").contains(&"pgw".to_owned()));
        assert!(is_tiff(b"II*\0...") && !is_tiff(b"<VRTDataset>"));
        assert!(is_companion("N45E006.hgt.aux.xml") && is_companion("a.TFW"));
        assert!(!is_companion("N45E006.hgt") && !is_companion("a.tif"));
    }
}
