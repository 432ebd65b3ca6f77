//! What Linux's `/proc` says of another process: its resident set, threads and CPU time.
//! Zero where it cannot be read (the process is gone, or this is not Linux).

/// Clock ticks per second in `/proc/PID/stat` (`USER_HZ`, 100 on Linux).
const TICKS: f64 = 100.0;

/// The value of `name` (e.g. `VmRSS:`) in `/proc/PID/status`.
fn status_field(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Resident set size, in KiB.
#[must_use]
pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS:")
}

/// Threads.
#[must_use]
pub fn threads(pid: u32) -> u64 {
    status_field(pid, "Threads:")
}

/// CPU seconds used so far, user and system.
#[must_use]
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// CPU seconds each thread of `pid` has used so far, by the thread's name (`comm`); threads
/// of one name are added up.
#[must_use]
pub fn thread_cpu_seconds(pid: u32) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for task in tasks.flatten() {
        let dir = task.path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let cpu = stat_cpu_seconds(&dir.join("stat").to_string_lossy());
        *out.entry(name.trim().to_owned()).or_insert(0.0) += cpu;
    }
    out
}

/// utime + stime of a `stat` file, in seconds.
fn stat_cpu_seconds(path: &str) -> f64 {
    // utime and stime are fields 14 and 15; the command name (field 2) may hold spaces, so
    // count from the ')' that ends it.
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / TICKS
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_a_resident_set_threads_and_cpu_time() {
        let me = std::process::id();
        // Work until the process has used more than two of /proc's 10 ms ticks, and this
        // thread some of them: the process's time alone can come from other tests' threads,
        // gone (and their time with them from the per-thread counts) when read.
        let mut x = 0u64;
        for _ in 0..100_000 {
            if crate::cpu::process_time() >= std::time::Duration::from_millis(30)
                && thread_cpu_seconds(me).values().sum::<f64>() > 0.0
            {
                break;
            }
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
        }
        assert!(rss_kib(me) > 0);
        assert!(threads(me) >= 1);
        assert!(cpu_seconds(me) > 0.0);
        let by_thread = thread_cpu_seconds(me);
        assert!(by_thread.values().sum::<f64>() > 0.0, "{by_thread:?}");
        assert_eq!((rss_kib(0), cpu_seconds(0)), (0, 0.0), "no such process");
    }
}
