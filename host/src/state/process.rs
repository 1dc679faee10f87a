//! Is a process (a lock holder's, a run's) still alive? Only answerable on the holder's own
//! host: `kill(pid, 0)` says whether the pid exists, and `/proc/<pid>/stat` field
//! 22 (start time in clock ticks) says whether it is still the same process.
//!
//! The answer errs towards `Alive`/`Unknown`: a wrong `Gone` would let an operator
//! remove a live run's lock, a wrong `Alive` only delays them.

/// Whether a process still exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// It is running.
    Alive,
    /// It has exited (or its pid now belongs to another process).
    Gone,
    /// It cannot be told from here (another host, no permission to look).
    Unknown,
}

/// Whether process `pid` on `host` is alive, checked from this host. Another host
/// is `Unknown`. With `start_ticks`, a live pid that started at another time is a
/// reused pid, hence `Gone`; a zombie is `Gone` (it can no longer act).
pub fn process_liveness(host: &str, pid: u32, start_ticks: Option<u64>) -> Liveness {
    if host != super::host_name() {
        return Liveness::Unknown;
    }
    // pid 0 and negative pids address process groups for kill(); never probe them.
    let Ok(raw) = i32::try_from(pid) else {
        return Liveness::Unknown;
    };
    if raw <= 0 {
        return Liveness::Unknown;
    }
    match probe(raw) {
        Probe::Exists => {}
        Probe::NoSuchProcess => return Liveness::Gone,
        Probe::Error => return Liveness::Unknown,
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => match parse_stat(&stat) {
            Some((state, _)) if state == 'Z' || state == 'X' => Liveness::Gone,
            Some((_, ticks)) if start_ticks.is_some_and(|t| t != ticks) => Liveness::Gone,
            _ => Liveness::Alive,
        },
        // It exited between kill() and the read.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Liveness::Gone,
        // kill() said it exists; without /proc, believe that.
        Err(_) => Liveness::Alive,
    }
}

/// Field 22 of `/proc/<pid>/stat`, if readable.
pub fn pid_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|(_, ticks)| ticks)
}

/// (state, starttime) from a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may itself contain spaces and `)`, so fields are counted
/// from the last `)`.
fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // `state` is field 3; starttime is field 22, 19 fields further on.
    let ticks = fields.nth(18)?.parse().ok()?;
    Some((state, ticks))
}

enum Probe {
    Exists,
    NoSuchProcess,
    Error,
}

/// `kill(pid, 0)`: checks for existence without sending a signal.
#[allow(unsafe_code, reason = "kill(2) with signal 0 touches no memory")]
fn probe(pid: i32) -> Probe {
    // SAFETY: kill() with signal 0 performs only the existence and permission
    // check; it touches no memory of ours. `pid` is > 0 (checked by the caller),
    // so it cannot address a process group.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc == 0 {
        return Probe::Exists;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ESRCH) => Probe::NoSuchProcess,
        // The process exists but belongs to someone else.
        Some(libc::EPERM) => Probe::Exists,
        _ => Probe::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_counts_fields_after_a_tricky_command_name() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1 2";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_means_pid_reuse() {
        let host = crate::state::host_name();
        let pid = std::process::id();
        let ticks = pid_start_ticks(pid);
        assert!(ticks.is_some());
        assert_eq!(process_liveness(&host, pid, ticks), Liveness::Alive);
        let other = ticks.map(|t| t + 1);
        assert_eq!(process_liveness(&host, pid, other), Liveness::Gone);
        assert_eq!(process_liveness("elsewhere.invalid", pid, ticks), Liveness::Unknown);
        assert_eq!(process_liveness(&host, 0, None), Liveness::Unknown);
    }
}
