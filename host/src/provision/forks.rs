//! How many VMs a command works on at once: what `--forks` asks for, capped by
//! what this process can hold.
//!
//! Every VM in flight holds open files (its journal, HTTP connections, an SSH
//! session's socket and pipes, an `ssh` child's pipes) and one thread of the
//! blocking pool running its workflow. Past the open-files limit a VM would fail
//! with "too many open files" in the middle of its run, after some of its side
//! effects; past the pool's size the extra forks only queue. So the count is
//! capped before the first run starts, with a warning naming the limit, never a
//! crash. [`raise_open_files_limit`] first lifts the soft limit to the hard one
//! (what the administrator allows), as servers commonly do.

/// Open files one VM in flight may hold at its peak (its journal, a few HTTP
/// connections, an `ssh` child's three pipes and an SSH session's socket and
/// pipes at once), with room to spare.
pub const FILES_PER_FORK: u64 = 24;

/// Open files kept for everything that is not a VM in flight: the runtime,
/// the plugin cache, the state directory, an in-process simulator's listeners.
pub const FILES_RESERVED: u64 = 256;

/// Open files an in-process simulator keeps for every VM, in flight or not:
/// the running guest's sshd listener and the server side of its connection.
pub const SIM_FILES_PER_VM: u64 = 3;

/// The blocking threads a workflow runs on (tokio's default pool size).
pub const MAX_FORKS: usize = 512;

/// The forks granted, and why fewer than asked when that is so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forks {
    /// VMs worked on at once.
    pub granted: usize,
    /// The warning to show when `granted` is below what was asked.
    pub warning: Option<String>,
}

/// `requested` capped by the open-files limit `nofile` and [`MAX_FORKS`]; at
/// least one. `files_per_vm` are files held for every VM of the command, in
/// flight or not (an in-process simulator keeps each running guest's sshd).
pub fn cap(requested: usize, vms: usize, nofile: u64, files_per_vm: u64) -> Forks {
    let requested = requested.max(1);
    let spare = nofile.saturating_sub(FILES_RESERVED + files_per_vm.saturating_mul(vms as u64));
    let by_files = usize::try_from(spare / FILES_PER_FORK).unwrap_or(usize::MAX).max(1);
    let granted = requested.min(by_files).min(MAX_FORKS);
    let warning = (granted < requested).then(|| {
        let why = if granted == by_files && by_files < MAX_FORKS {
            format!(
                "the open-files limit is {nofile} (`ulimit -n`) and each VM in flight may hold {FILES_PER_FORK}; \
                 raise the limit to run more at once"
            )
        } else {
            format!("workflows run on at most {MAX_FORKS} threads at once")
        };
        format!("--forks {requested} is more than this process can hold: {why}; working on {granted} VMs at once")
    });
    Forks { granted, warning }
}

/// Raises the soft open-files limit to the hard limit; returns the soft limit
/// in force afterwards (unchanged when it cannot be raised).
#[allow(unsafe_code, reason = "getrlimit/setrlimit only read or write the struct passed")]
pub fn raise_open_files_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read or write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_within_the_limits_are_granted_without_a_warning() {
        assert_eq!(cap(100, 1000, 20_000, 3), Forks { granted: 100, warning: None });
        assert_eq!(cap(0, 1, 1024, 0).granted, 1, "at least one");
    }

    #[test]
    fn forks_past_the_open_files_limit_are_capped_with_a_warning_naming_it() {
        let f = cap(1000, 1000, 1024, 0);
        assert_eq!(f.granted, ((1024 - FILES_RESERVED) / FILES_PER_FORK) as usize);
        let w = f.warning.expect("a warning");
        assert!(w.contains("--forks 1000") && w.contains("1024") && w.contains("ulimit -n"), "{w}");
        // Files held per VM (a simulator's guests) leave less for the forks.
        assert!(cap(1000, 3000, 20_000, 3).granted < cap(1000, 0, 20_000, 3).granted);
        // A limit too small for even one VM still runs one at a time.
        assert_eq!(cap(10, 10_000, 1024, 3).granted, 1);
    }

    #[test]
    fn forks_past_the_thread_pool_are_capped_with_a_warning_naming_it() {
        let f = cap(5000, 10, 1 << 20, 0);
        assert_eq!(f.granted, MAX_FORKS);
        assert!(f.warning.expect("a warning").contains("512 threads"));
    }

    #[test]
    #[allow(unsafe_code, reason = "getrlimit only writes the struct passed")]
    fn the_soft_open_files_limit_is_raised_to_the_hard_one() {
        let soft = raise_open_files_limit();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!((soft, lim.rlim_cur), (lim.rlim_max, lim.rlim_max));
    }
}
