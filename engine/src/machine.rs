//! What this machine offers a pipeline that does not say: its cores and
//! its memory, from which the defaults are sized (`docs/pipeline.md`,
//! "Defaults: the smallest pipeline").
//!
//! The cores are what `std::thread::available_parallelism` says, which
//! honours the CPU affinity mask and a cgroup's CPU quota. The memory is
//! the RAM (`MemTotal` in `/proc/meminfo`), or the cgroup's memory limit
//! when one is set below it, as in a container: cgroup v2 `memory.max` and
//! v1 `memory.limit_in_bytes`, of the process's own cgroup and of every
//! cgroup above it (a limit anywhere above binds too). The files are read
//! under a root directory, so a test can give a machine of its own
//! ([`Machine::read`]); the limit a child cgroup sets beyond its parent's
//! cannot be used, so the lowest limit found is the one that counts.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;

/// What a process may use of this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// CPUs this process may use (at least 1).
    pub cores: u32,
    /// The RAM, in bytes; `None` where it cannot be read (no
    /// `/proc/meminfo`).
    pub ram: Option<u64>,
    /// The lowest cgroup memory limit of the process's cgroup and those
    /// above it; `None` when no limit is set (`max`, or v1's "unlimited").
    pub cgroup_limit: Option<CgroupLimit>,
}

/// A cgroup's memory limit, and the file that sets it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupLimit {
    /// The limit, in bytes.
    pub bytes: u64,
    /// The file it was read from, relative to the root the machine was
    /// read under (`/sys/fs/cgroup/memory.max`).
    pub file: String,
}

/// The memory a pipeline may count on, and what says so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "of", rename_all = "snake_case")]
pub enum MachineMemory {
    /// The machine's RAM (no cgroup limit below it).
    Ram {
        /// Bytes.
        bytes: u64,
    },
    /// The cgroup's memory limit, lower than the RAM.
    Cgroup {
        /// Bytes.
        bytes: u64,
        /// The file that sets it.
        file: String,
    },
}

impl MachineMemory {
    /// The bytes.
    pub fn bytes(&self) -> u64 {
        match self {
            MachineMemory::Ram { bytes } | MachineMemory::Cgroup { bytes, .. } => *bytes,
        }
    }
}

/// A cgroup v1 limit at or above this is "unlimited" (the kernel writes
/// its page counter's maximum, 9223372036854771712 on 4 KiB pages).
const V1_UNLIMITED: u64 = 1 << 62;

impl Machine {
    /// This machine, read once per process (under `/`, with the cores
    /// `available_parallelism` gives).
    pub fn this() -> &'static Machine {
        static THIS: OnceLock<Machine> = OnceLock::new();
        THIS.get_or_init(|| Machine::read(Path::new("/"), crate::units::cores()))
    }

    /// The machine whose `/proc` and `/sys/fs/cgroup` are under `root`,
    /// with `cores` CPUs: `/` for this one, a directory of test files
    /// (`proc/meminfo`, `proc/self/cgroup`, `sys/fs/cgroup/...`) for a
    /// machine of a test's own. A file that is missing or does not read
    /// says nothing.
    pub fn read(root: &Path, cores: u32) -> Machine {
        let read = |p: &str| std::fs::read_to_string(root.join(p)).ok();
        Machine {
            cores: cores.max(1),
            ram: read("proc/meminfo").as_deref().and_then(mem_total),
            cgroup_limit: read("proc/self/cgroup")
                .as_deref()
                .and_then(|text| cgroup_limit(root, text)),
        }
    }

    /// The memory a pipeline may count on: the RAM, or the cgroup's
    /// limit when it is lower (or the RAM is not known).
    pub fn memory(&self) -> Option<MachineMemory> {
        match (self.ram, &self.cgroup_limit) {
            (Some(ram), Some(l)) if l.bytes >= ram => Some(MachineMemory::Ram { bytes: ram }),
            (_, Some(l)) => Some(MachineMemory::Cgroup {
                bytes: l.bytes,
                file: l.file.clone(),
            }),
            (Some(ram), None) => Some(MachineMemory::Ram { bytes: ram }),
            (None, None) => None,
        }
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A v2 `memory.max`: a number of bytes, or `max` (no limit).
fn v2_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// A v1 `memory.limit_in_bytes`: a number of bytes, "unlimited" when huge.
fn v1_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok().filter(|b| *b < V1_UNLIMITED)
}

/// The lowest memory limit of the cgroups `/proc/self/cgroup` (its text)
/// names, and of those above them, under `root`'s `sys/fs/cgroup` (v2) or
/// `sys/fs/cgroup/memory` (v1).
fn cgroup_limit(root: &Path, proc_self_cgroup: &str) -> Option<CgroupLimit> {
    let mut found = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            found.extend(limits_along(
                root,
                "sys/fs/cgroup",
                path,
                "memory.max",
                v2_limit,
            ));
        } else if controllers.split(',').any(|c| c == "memory") {
            found.extend(limits_along(
                root,
                "sys/fs/cgroup/memory",
                path,
                "memory.limit_in_bytes",
                v1_limit,
            ));
        }
    }
    found.into_iter().min_by_key(|l| l.bytes)
}

/// The limits `file` sets in the cgroup at `path` under the hierarchy
/// mounted at `mount`, and in every cgroup above it. A path that climbs
/// out of the namespace (`/../..`) is looked at from the mount's root
/// only: what lies above is not this process's to read.
fn limits_along(
    root: &Path,
    mount: &str,
    path: &str,
    file: &str,
    parse: fn(&str) -> Option<u64>,
) -> Vec<CgroupLimit> {
    let relative: PathBuf = Path::new(path)
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect();
    let relative = if Path::new(path)
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        PathBuf::new()
    } else {
        relative
    };
    relative
        .ancestors()
        .filter_map(|dir| {
            let shown = Path::new("/").join(mount).join(dir).join(file);
            let text = std::fs::read_to_string(root.join(mount).join(dir).join(file)).ok()?;
            parse(&text).map(|bytes| CgroupLimit {
                bytes,
                file: shown.display().to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(files: &[(&str, &str)]) -> (tempfile::TempDir, Machine) {
        let root = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = root.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let m = Machine::read(root.path(), 8);
        (root, m)
    }

    const MEMINFO: &str = "MemTotal:       16384000 kB\nMemFree:         1000 kB\n";

    #[test]
    fn ram_alone_without_a_cgroup_file() {
        let (_root, m) = machine(&[("proc/meminfo", MEMINFO)]);
        assert_eq!(m.cores, 8);
        assert_eq!(m.ram, Some(16_384_000 * 1024));
        assert_eq!(m.cgroup_limit, None);
        assert_eq!(
            m.memory(),
            Some(MachineMemory::Ram {
                bytes: 16_384_000 * 1024
            })
        );
    }

    #[test]
    fn a_v2_limit_in_a_container_namespace_binds() {
        let (_root, m) = machine(&[
            ("proc/meminfo", MEMINFO),
            ("proc/self/cgroup", "0::/\n"),
            ("sys/fs/cgroup/memory.max", "2147483648\n"),
        ]);
        assert_eq!(
            m.memory(),
            Some(MachineMemory::Cgroup {
                bytes: 2 << 30,
                file: "/sys/fs/cgroup/memory.max".into()
            })
        );
    }

    #[test]
    fn a_v2_max_is_no_limit_and_a_parent_limit_binds_the_child() {
        let (_root, m) = machine(&[
            ("proc/meminfo", MEMINFO),
            ("proc/self/cgroup", "0::/jobs/one\n"),
            ("sys/fs/cgroup/jobs/one/memory.max", "max\n"),
            ("sys/fs/cgroup/jobs/memory.max", "1073741824\n"),
        ]);
        let l = m.cgroup_limit.unwrap();
        assert_eq!(l.bytes, 1 << 30);
        assert_eq!(l.file, "/sys/fs/cgroup/jobs/memory.max");
    }

    #[test]
    fn a_v1_limit_binds_and_v1_unlimited_does_not() {
        let (_root, m) = machine(&[
            ("proc/meminfo", MEMINFO),
            ("proc/self/cgroup", "4:memory:/docker/abc\n1:cpu:/\n0::/\n"),
            (
                "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
                "536870912\n",
            ),
            (
                "sys/fs/cgroup/memory/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        assert_eq!(m.cgroup_limit.as_ref().unwrap().bytes, 512 << 20);
        let (_root, m) = machine(&[
            ("proc/meminfo", MEMINFO),
            ("proc/self/cgroup", "4:memory:/x\n"),
            (
                "sys/fs/cgroup/memory/x/memory.limit_in_bytes",
                "9223372036854771712\n",
            ),
        ]);
        assert_eq!(m.cgroup_limit, None);
    }

    #[test]
    fn a_limit_above_the_ram_leaves_the_ram() {
        let (_root, m) = machine(&[
            ("proc/meminfo", MEMINFO),
            ("proc/self/cgroup", "0::/\n"),
            ("sys/fs/cgroup/memory.max", "99999999999999\n"),
        ]);
        assert!(matches!(m.memory(), Some(MachineMemory::Ram { .. })));
    }

    #[test]
    fn nothing_readable_is_no_memory_and_a_path_out_of_the_namespace_stays_in() {
        let (_root, m) = machine(&[]);
        assert_eq!(m.memory(), None);
        let (_root, m) = machine(&[
            ("proc/self/cgroup", "0::/../../outside\n"),
            ("sys/fs/cgroup/memory.max", "1048576\n"),
            ("sys/fs/outside/memory.max", "1\n"),
        ]);
        assert_eq!(m.cgroup_limit.unwrap().bytes, 1 << 20);
    }

    #[test]
    fn this_machine_reads() {
        let m = Machine::this();
        assert!(m.cores >= 1);
        #[cfg(target_os = "linux")]
        assert!(m.memory().is_some(), "{m:?}");
    }
}
