//! What a pipeline gets where it says nothing, and where each figure came
//! from: the workers of the kinds that work on the CPU (one per core) and
//! a memory budget taken from the machine (half of its memory, or of its
//! cgroup's limit), charged by the stages as a declared budget is. Whatever
//! the file declares wins. `warpline plan` shows the result and its
//! origins; docs/pipeline.md ("Defaults: the smallest pipeline") says why.

use serde::Serialize;

use crate::machine::MachineMemory;
use crate::units::{parse_size, SizeValue, ValueError};

/// The name of the default memory budget, as `plan` and the report show
/// it and as a file would declare it (`[limits.memory]`).
pub const MEMORY: &str = "memory";

/// The share of the machine's memory (or of its cgroup's limit) the
/// default budget takes: one half. The rest is for the process around the
/// budget (its libraries, GDAL's block cache, the heap's free pages: about
/// 100-200 MiB, docs/design/memory-budget.md) and for the machine's other
/// work.
pub const SHARE_DIVISOR: u64 = 2;

/// The default budget on a machine with `memory` bytes.
pub fn budget_of(memory: u64) -> u64 {
    memory / SHARE_DIVISOR
}

/// `[pipeline] memory`: the default memory budget's size: `"auto"` (the
/// default: half of the machine's memory), a size (`"2GiB"`), or
/// `"unbounded"` (no default budget: memory is bounded by nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(try_from = "SizeValue")]
pub enum MemorySetting {
    /// Half of the machine's memory.
    #[default]
    Auto,
    /// This many bytes.
    Size(u64),
    /// No default budget.
    Unbounded,
}

impl TryFrom<SizeValue> for MemorySetting {
    type Error = ValueError;
    fn try_from(value: SizeValue) -> Result<Self, ValueError> {
        let bytes = match value {
            SizeValue::Text(t) if t.trim() == "auto" => return Ok(MemorySetting::Auto),
            SizeValue::Text(t) if t.trim() == "unbounded" => return Ok(MemorySetting::Unbounded),
            SizeValue::Text(t) => parse_size(&t).map_err(|_| ValueError::Word {
                expected: "\"auto\", \"unbounded\" or a size such as \"2GiB\"".to_owned(),
                text: t.clone(),
            })?,
            SizeValue::Bytes(n) => n,
        };
        if bytes == 0 {
            return Err(ValueError::Word {
                expected: "\"auto\", \"unbounded\" or a size above 0 (such as \"2GiB\")".to_owned(),
                text: "0".to_owned(),
            });
        }
        Ok(MemorySetting::Size(bytes))
    }
}

/// Where a stage's worker count came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum WorkersFrom {
    /// The pipeline said (`workers = ...`, in the file or an override).
    Declared,
    /// Its kind's default, one per core: this many cores.
    Cores {
        /// The cores.
        cores: u32,
    },
    /// Its kind's default: one.
    One,
}

impl std::fmt::Display for WorkersFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkersFrom::Declared => write!(f, "declared"),
            WorkersFrom::Cores { cores } => write!(
                f,
                "default: {cores} core{}",
                if *cores == 1 { "" } else { "s" }
            ),
            WorkersFrom::One => write!(f, "default"),
        }
    }
}

/// What bounds the pipeline's memory, and where that came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum MemoryFrom {
    /// Byte budgets the pipeline declares (`[limits.NAME] budget`, or
    /// shared): the default does not apply.
    Declared {
        /// Their names.
        limiters: Vec<String>,
    },
    /// The default budget [`MEMORY`]: half of the machine's memory.
    Machine {
        /// The budget, in bytes.
        budget: u64,
        /// What it is half of.
        memory: MachineMemory,
    },
    /// The default budget [`MEMORY`], sized by `[pipeline] memory`.
    Setting {
        /// The budget, in bytes.
        budget: u64,
    },
    /// Nothing bounds it.
    Unbounded {
        /// Why, in a sentence that says how to bound it.
        why: String,
    },
}

impl MemoryFrom {
    /// The default budget's size, when the pipeline has one.
    pub fn default_budget(&self) -> Option<u64> {
        match self {
            MemoryFrom::Machine { budget, .. } | MemoryFrom::Setting { budget } => Some(*budget),
            _ => None,
        }
    }

    /// Whether no byte budget bounds the pipeline.
    pub fn is_unbounded(&self) -> bool {
        matches!(self, MemoryFrom::Unbounded { .. })
    }
}

impl std::fmt::Display for MemoryFrom {
    /// Where the bound came from, as `plan` says it after the figure.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let size = |b: u64| bytesize::ByteSize(b).display().iec().to_string();
        match self {
            MemoryFrom::Declared { limiters } => write!(
                f,
                "declared: {}",
                limiters
                    .iter()
                    .map(|l| format!("[limits.{l}]"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            MemoryFrom::Machine {
                memory: MachineMemory::Ram { bytes },
                ..
            } => write!(f, "default: half of RAM {}", size(*bytes)),
            MemoryFrom::Machine {
                memory: MachineMemory::Cgroup { bytes, file },
                ..
            } => write!(
                f,
                "default: half of the cgroup limit {} ({file})",
                size(*bytes)
            ),
            MemoryFrom::Setting { .. } => write!(f, "default, sized by [pipeline] memory"),
            MemoryFrom::Unbounded { why } => write!(f, "not bounded: {why}"),
        }
    }
}

/// What to say when the default budget is turned off.
pub(crate) const TURNED_OFF: &str = "[pipeline] memory = \"unbounded\" turns the default budget \
    off; remove it (the default is half of the machine's memory) or give a size, such as \
    memory = \"2GiB\"";

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(v: SizeValue) -> Result<MemorySetting, ValueError> {
        MemorySetting::try_from(v)
    }

    #[test]
    fn the_memory_setting_reads_auto_unbounded_and_sizes() {
        assert_eq!(
            setting(SizeValue::Text("auto".into())),
            Ok(MemorySetting::Auto)
        );
        assert_eq!(
            setting(SizeValue::Text("unbounded".into())),
            Ok(MemorySetting::Unbounded)
        );
        assert_eq!(
            setting(SizeValue::Text("2GiB".into())),
            Ok(MemorySetting::Size(2 << 30))
        );
        assert_eq!(
            setting(SizeValue::Bytes(4096)),
            Ok(MemorySetting::Size(4096))
        );
        let e = setting(SizeValue::Text("lots".into())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "expected \"auto\", \"unbounded\" or a size such as \"2GiB\", got \"lots\""
        );
        assert!(setting(SizeValue::Bytes(0)).is_err());
    }

    #[test]
    fn origins_read_as_plan_says_them() {
        let ram = MemoryFrom::Machine {
            budget: 8 << 30,
            memory: MachineMemory::Ram { bytes: 16 << 30 },
        };
        assert_eq!(ram.to_string(), "default: half of RAM 16.0 GiB");
        let cg = MemoryFrom::Machine {
            budget: 1 << 30,
            memory: MachineMemory::Cgroup {
                bytes: 2 << 30,
                file: "/sys/fs/cgroup/memory.max".into(),
            },
        };
        assert_eq!(
            cg.to_string(),
            "default: half of the cgroup limit 2.0 GiB (/sys/fs/cgroup/memory.max)"
        );
        assert_eq!(
            WorkersFrom::Cores { cores: 2 }.to_string(),
            "default: 2 cores"
        );
        assert_eq!(WorkersFrom::Declared.to_string(), "declared");
    }
}
