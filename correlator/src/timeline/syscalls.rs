//! Syscalls by number: their names (from the `syscalls` crate, which
//! tracks the kernel's tables) and where a thread that sleeps inside each
//! one waits. The kernel side classifies short waits with the table built
//! here ([`site_table`], loaded into `SYSCALL_SITES`), records carry the
//! syscall number, and userspace names both the same way.

use correlator_common::{NUM_WAIT_SITES, SITE_BY_STATE, SYSCALL_SLOTS, WaitSite};
use serde::{Deserialize, Serialize};
use syscalls::Sysno;

/// Where a blocked thread waited (userspace twin of [`WaitSite`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Site {
    /// Waiting for input (epoll, poll, accept, a socket read): the server
    /// had nothing to do. Never a cause of its latency.
    Idle,
    Lock,
    Io,
    Fault,
    Sleep,
    Migration,
    Other,
}

impl Site {
    pub const ALL: [Site; NUM_WAIT_SITES] = [
        Site::Idle,
        Site::Lock,
        Site::Io,
        Site::Fault,
        Site::Sleep,
        Site::Migration,
        Site::Other,
    ];

    /// From the kernel's [`WaitSite`] number (unknown numbers: `Other`).
    pub fn from_raw(raw: u32) -> Self {
        Self::ALL.get(raw as usize).copied().unwrap_or(Site::Other)
    }

    pub fn name(self) -> &'static str {
        match self {
            Site::Idle => "idle",
            Site::Lock => "lock",
            Site::Io => "io",
            Site::Fault => "fault",
            Site::Sleep => "sleep",
            Site::Migration => "migration",
            Site::Other => "other",
        }
    }
}

const _: () = assert!(WaitSite::Other as usize == NUM_WAIT_SITES - 1);

/// The syscall's name, or `syscall N` for a number this build does not know.
pub fn name(nr: u32) -> String {
    Sysno::new(nr as usize).map_or_else(|| format!("syscall {nr}"), |s| s.name().to_string())
}

/// Waiting for input: nothing to do until a client sends something.
const IDLE: &[Sysno] = &[
    Sysno::epoll_wait,
    Sysno::epoll_pwait,
    Sysno::epoll_pwait2,
    Sysno::poll,
    Sysno::ppoll,
    Sysno::select,
    Sysno::pselect6,
    Sysno::accept,
    Sysno::accept4,
    Sysno::recvfrom,
    Sysno::recvmsg,
    Sysno::recvmmsg,
];

/// Lock waits.
const LOCK: &[Sysno] = &[
    Sysno::futex,
    Sysno::futex_waitv,
    Sysno::flock,
    Sysno::semop,
    Sysno::semtimedop,
];

/// Storage I/O whatever the sleep state.
const IO: &[Sysno] = &[
    Sysno::pread64,
    Sysno::preadv,
    Sysno::preadv2,
    Sysno::pwrite64,
    Sysno::pwritev,
    Sysno::pwritev2,
    Sysno::fsync,
    Sysno::fdatasync,
    Sysno::sync,
    Sysno::syncfs,
    Sysno::sync_file_range,
    Sysno::io_getevents,
    Sysno::io_pgetevents,
    Sysno::msync,
];

/// Timed sleeps.
const SLEEP: &[Sysno] = &[Sysno::nanosleep, Sysno::clock_nanosleep, Sysno::pause];

/// Calls that move the calling thread to another CPU.
const MIGRATION: &[Sysno] = &[Sysno::sched_setaffinity];

/// read-like calls on any fd: on a socket or pipe an interruptible sleep
/// (waiting for input), on a file an uninterruptible one (disk I/O).
const BY_STATE: &[Sysno] = &[Sysno::read, Sysno::readv, Sysno::write, Sysno::writev];

/// Site of a sleep inside syscall `nr` ([`SITE_BY_STATE`]: decided by the
/// sleep state, see [`BY_STATE`]).
pub fn site_raw(nr: u32) -> u32 {
    let Some(s) = Sysno::new(nr as usize) else {
        return WaitSite::Other as u32;
    };
    let lists: [(&[Sysno], u32); 6] = [
        (IDLE, WaitSite::Idle as u32),
        (LOCK, WaitSite::Lock as u32),
        (IO, WaitSite::Io as u32),
        (SLEEP, WaitSite::Sleep as u32),
        (MIGRATION, WaitSite::Migration as u32),
        (BY_STATE, SITE_BY_STATE),
    ];
    lists
        .iter()
        .find(|(list, _)| list.contains(&s))
        .map_or(WaitSite::Other as u32, |&(_, site)| site)
}

/// Whether `nr` moves the calling thread between CPUs.
pub fn migrates(nr: u32) -> bool {
    Sysno::new(nr as usize).is_some_and(|s| MIGRATION.contains(&s))
}

/// The kernel side's table: site per syscall number.
pub fn site_table() -> Vec<u32> {
    (0..SYSCALL_SLOTS).map(site_raw).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sites_of_common_calls() {
        assert_eq!(name(Sysno::futex as u32), "futex");
        assert_eq!(site_raw(Sysno::epoll_wait as u32), WaitSite::Idle as u32);
        assert_eq!(site_raw(Sysno::futex as u32), WaitSite::Lock as u32);
        assert_eq!(site_raw(Sysno::pread64 as u32), WaitSite::Io as u32);
        assert_eq!(site_raw(Sysno::read as u32), SITE_BY_STATE);
        assert_eq!(
            site_raw(Sysno::clock_nanosleep as u32),
            WaitSite::Sleep as u32
        );
        assert_eq!(site_raw(Sysno::clone as u32), WaitSite::Other as u32);
        assert!(migrates(Sysno::sched_setaffinity as u32));
        assert_eq!(name(100_000), "syscall 100000");
        assert_eq!(site_table().len(), SYSCALL_SLOTS as usize);
    }
}
