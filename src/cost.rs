//! What a task cost: CPU time, peak memory and wall time, each with the
//! source it was read from. procman measures it when the task's worker is
//! gone (its cgroup's counters where it has one, else the rusage wait4
//! returned for the worker); the task table keeps it and puts it in the
//! task's metadata under [`COST_KEY`]; the client and the MCP bridge show
//! it ([`describe`]). The manual gives the exact JSON:
//!
//! ```json
//! "agentd.dev/cost": {"wallMs": 612,
//!   "cpu": {"userUsec": 498000, "systemUsec": 14000, "source": "cgroup2:cpu.stat"},
//!   "memory": {"peakBytes": 70254592, "source": "wait4:ru_maxrss"}}
//! ```
//! There is no count of the processes a task started: the kernel keeps none
//! per cgroup or per process tree (the manual says why no stand-in is one).

use serde::Serialize;
use serde_json::Value;

/// The task metadata key agentd keeps a task's cost under.
pub const COST_KEY: &str = "agentd.dev/cost";

/// CPU time from the task cgroup's v2 `cpu.stat` (`user_usec`,
/// `system_usec`): everything that ran in the cgroup.
pub const CPU_CGROUP2: &str = "cgroup2:cpu.stat";
/// CPU time from the worker's rusage at its reap (`ru_utime`, `ru_stime`):
/// the worker and every descendant that was waited for.
pub const CPU_RUSAGE: &str = "wait4:rusage";
/// Peak memory from the task cgroup's v2 `memory.peak`: the cgroup's
/// charged memory (anonymous, page cache, kernel) at its highest.
pub const MEMORY_CGROUP2: &str = "cgroup2:memory.peak";
/// Peak memory from the task cgroup's v1 `memory.max_usage_in_bytes`.
pub const MEMORY_CGROUP1: &str = "cgroup1:memory.max_usage_in_bytes";
/// Peak memory from the worker's rusage (`ru_maxrss`): the largest
/// resident set of any one process of the task, not a sum.
pub const MEMORY_RUSAGE: &str = "wait4:ru_maxrss";

/// CPU time, user and system.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user_usec: u64,
    pub system_usec: u64,
}

impl CpuTimes {
    /// What was counted after `before` (a slot's reading at the end of its
    /// previous task). A counter that went backwards (it cannot, but a
    /// cgroup made anew under the same name starts from 0) counts as 0.
    pub fn since(self, before: CpuTimes) -> CpuTimes {
        CpuTimes {
            user_usec: self.user_usec.saturating_sub(before.user_usec),
            system_usec: self.system_usec.saturating_sub(before.system_usec),
        }
    }

    pub fn total_usec(self) -> u64 {
        self.user_usec.saturating_add(self.system_usec)
    }
}

/// A task's cost, as it is kept on the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// From the worker taking the task to the last of its processes gone.
    pub wall_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    pub user_usec: u64,
    pub system_usec: u64,
    /// [`CPU_CGROUP2`] or [`CPU_RUSAGE`].
    pub source: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    pub peak_bytes: u64,
    /// [`MEMORY_CGROUP2`], [`MEMORY_CGROUP1`] or [`MEMORY_RUSAGE`].
    pub source: &'static str,
}

impl Cost {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// One line for a person, from the JSON a task carries (a client reads
/// whatever daemon it talks to, so this reads the JSON, not [`Cost`]):
/// `cpu 0.512 s (user 0.498 s, system 0.014 s; cgroup2:cpu.stat), peak
/// memory 67.0 MiB (wait4:ru_maxrss), wall 0.612 s`. None when there is
/// no cost (the task has not ended, or never ran).
pub fn describe(cost: &Value) -> Option<String> {
    let wall = cost.get("wallMs")?.as_u64()?;
    let mut parts = Vec::new();
    let cpu = &cost["cpu"];
    if let (Some(user), Some(system)) = (cpu["userUsec"].as_u64(), cpu["systemUsec"].as_u64()) {
        parts.push(format!(
            "cpu {} (user {}, system {}; {})",
            seconds(user.saturating_add(system), 1_000_000),
            seconds(user, 1_000_000),
            seconds(system, 1_000_000),
            cpu["source"].as_str().unwrap_or("?")
        ));
    }
    let memory = &cost["memory"];
    if let Some(peak) = memory["peakBytes"].as_u64() {
        parts.push(format!(
            "peak memory {} ({})",
            mebibytes(peak),
            memory["source"].as_str().unwrap_or("?")
        ));
    }
    parts.push(format!("wall {}", seconds(wall, 1_000)));
    Some(parts.join(", "))
}

/// `n` of `per_second` units as seconds with three decimals (integers
/// only: no float formatting is linked in for this).
fn seconds(n: u64, per_second: u64) -> String {
    let ms = n / (per_second / 1_000);
    format!("{}.{:03} s", ms / 1_000, ms % 1_000)
}

/// Bytes as MiB with one decimal.
fn mebibytes(bytes: u64) -> String {
    let tenths = bytes.saturating_mul(10) / (1 << 20);
    format!("{}.{} MiB", tenths / 10, tenths % 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_json_is_what_the_manual_shows() {
        let cost = Cost {
            wall_ms: 612,
            cpu: Some(Cpu {
                user_usec: 498_000,
                system_usec: 14_000,
                source: CPU_CGROUP2,
            }),
            memory: Some(Memory {
                peak_bytes: 70_254_592,
                source: MEMORY_RUSAGE,
            }),
        };
        assert_eq!(
            cost.to_json(),
            json!({"wallMs": 612,
                "cpu": {"userUsec": 498000, "systemUsec": 14000, "source": "cgroup2:cpu.stat"},
                "memory": {"peakBytes": 70254592, "source": "wait4:ru_maxrss"}})
        );
        assert_eq!(
            describe(&cost.to_json()).unwrap(),
            "cpu 0.512 s (user 0.498 s, system 0.014 s; cgroup2:cpu.stat), \
             peak memory 67.0 MiB (wait4:ru_maxrss), wall 0.612 s"
        );
        let bare = Cost {
            wall_ms: 5,
            cpu: None,
            memory: None,
        };
        assert_eq!(bare.to_json(), json!({"wallMs": 5}));
        assert_eq!(describe(&bare.to_json()).unwrap(), "wall 0.005 s");
        assert_eq!(describe(&Value::Null), None);
        assert_eq!(describe(&json!({"cpu": {}})), None, "no wall time: not a cost");
    }

    #[test]
    fn a_counter_that_went_backwards_counts_nothing() {
        let before = CpuTimes {
            user_usec: 500,
            system_usec: 100,
        };
        let now = CpuTimes {
            user_usec: 800,
            system_usec: 50,
        };
        assert_eq!(
            now.since(before),
            CpuTimes {
                user_usec: 300,
                system_usec: 0
            }
        );
        assert_eq!(now.total_usec(), 850);
    }
}
