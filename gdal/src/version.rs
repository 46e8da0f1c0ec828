//! Which GDAL and PROJ this process runs: read once, for the start-up log
//! line, `warpline plan`, the report, and an accelerator's probe.

use std::ffi::CStr;
use std::fmt;
use std::sync::OnceLock;

use gdal_sys as sys;

/// A library version, `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// The major version.
    pub major: u32,
    /// The minor version.
    pub minor: u32,
    /// The patch level.
    pub patch: u32,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The GDAL and PROJ linked into this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    /// GDAL's version (`GDALVersionInfo("VERSION_NUM")`).
    pub gdal: Version,
    /// PROJ's version, as GDAL reports it (`OSRGetPROJVersion`).
    pub proj: Version,
}

impl fmt::Display for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GDAL {}, PROJ {}", self.gdal, self.proj)
    }
}

/// The versions of GDAL and PROJ this process runs, read once.
pub fn versions() -> Versions {
    static VERSIONS: OnceLock<Versions> = OnceLock::new();
    *VERSIONS.get_or_init(|| {
        let key = c"VERSION_NUM";
        // SAFETY: GDALVersionInfo returns a pointer to a static string.
        let text = unsafe { CStr::from_ptr(sys::GDALVersionInfo(key.as_ptr())) };
        // GDAL_VERSION_NUM is major*1000000 + minor*10000 + rev*100 + build.
        let n = text
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let gdal = Version {
            major: n / 1_000_000,
            minor: n / 10_000 % 100,
            patch: n / 100 % 100,
        };
        let (mut major, mut minor, mut patch) = (0, 0, 0);
        // SAFETY: three valid out-pointers for the call.
        unsafe { sys::OSRGetPROJVersion(&mut major, &mut minor, &mut patch) };
        let part = |v: i32| u32::try_from(v).unwrap_or(0);
        Versions {
            gdal,
            proj: Version {
                major: part(major),
                minor: part(minor),
                patch: part(patch),
            },
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_linked_gdal_is_at_least_3_4() {
        let v = super::versions();
        assert!(
            (v.gdal.major, v.gdal.minor) >= (3, 4),
            "warpline needs GDAL 3.4 or later; this is {v}"
        );
        assert!(v.proj.major >= 6, "{v}");
    }
}
