//! What the benchmarks say about the machine they ran on: cores, CPU use, load, memory. Shared
//! by `engine/benches/engine.rs` and `cli/benches/api.rs` (included with `#[path]`), since both
//! print their figures beside how busy this shared, noisy machine was.
// Each benchmark uses a part of this module.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// A field of `/proc/self/status` (`VmRSS`, `VmHWM`) in MB (10^6 bytes).
pub fn proc_mb(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib * 1024.0 / 1e6)
}

/// Cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// CPU time so far, in clock ticks (USER_HZ, 100 a second on Linux): this process's, and the
/// whole machine's busy and total.
#[derive(Clone, Copy, Default)]
pub struct Cpu {
    process: f64,
    busy: f64,
    total: f64,
}

impl Cpu {
    /// Reads `/proc/self/stat` and `/proc/stat`.
    pub fn now() -> Self {
        let process = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| {
                let fields: Vec<f64> =
                    stat.rsplit_once(')')?.1.split_whitespace().filter_map(|field| field.parse().ok()).collect();
                // After the command: state (not a number), ppid, ... utime is the 14th field
                // of the line, stime the 15th: the 11th and 12th numbers after the state.
                Some(fields.get(10)? + fields.get(11)?)
            })
            .unwrap_or(0.0);
        let (busy, total) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| {
                let line = stat.lines().next()?;
                let ticks: Vec<f64> = line.split_whitespace().skip(1).filter_map(|field| field.parse().ok()).collect();
                let total: f64 = ticks.iter().take(8).sum();
                let idle = ticks.get(3)? + ticks.get(4)?;
                Some((total - idle, total))
            })
            .unwrap_or((0.0, 0.0));
        Self { process, busy, total }
    }

    /// Cores this process used, and cores the machine was busy, from `self` to `later`.
    pub fn used(self, later: Cpu, wall: Duration) -> (f64, f64) {
        let process = (later.process - self.process) / 100.0 / wall.as_secs_f64();
        (process, self.machine_busy(later))
    }

    /// How many cores the machine was busy, from `self` to `later`.
    pub fn machine_busy(self, later: Cpu) -> f64 {
        let total = later.total - self.total;
        if total > 0.0 { (later.busy - self.busy) / total * cores() as f64 } else { f64::NAN }
    }
}

/// Cores, CPU model, memory and kernel, on one line.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("model name")?.split_once(':').map(|(_, model)| model.trim().to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:").map(|rest| rest.trim().to_owned()))
        .unwrap_or_default();
    format!("{} cores ({cpu}), {memory} of memory, Linux {}", cores(), kernel.trim())
}

/// The 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|load| load.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// PASS or MISS.
pub fn verdict(pass: bool) -> &'static str {
    if pass { "PASS" } else { "MISS" }
}
