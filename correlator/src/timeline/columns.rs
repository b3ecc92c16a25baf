//! Off-CPU records and thread accounts as columns in the compact run file
//! (see [`crate::columnar`]). The longest lists of a run: read back column
//! by column straight into the rows ([`StreamedRows`]), so loading never
//! holds them twice.

use serde::{Deserialize, Serialize, de::MapAccess};

use super::{Comm, OffCpu, ThreadAccount, Waker, syscalls::Site};
use crate::columnar::{ArrayColumns, StreamedRows, fill, fill_steps, rows_or_columns, steps};
use correlator_common::NUM_ACCOUNT;

rows_or_columns!(streamed offcpu, OffCpu, OffCpuColumns);
rows_or_columns!(streamed accounts, ThreadAccount, AccountColumns);

/// Written as these columns; read back by `OffCpu`'s `StreamedRows`, whose
/// keys are these field names.
#[derive(Serialize)]
pub struct OffCpuColumns {
    tid: Vec<u32>,
    tgid: Vec<u32>,
    preempted: Vec<bool>,
    cpu_out: Vec<u32>,
    cpu_in: Vec<u32>,
    start_steps: Vec<i64>,
    runnable_ns: Vec<u64>,
    blocked_ns: Vec<u64>,
    /// `end - start - runnable - blocked` (wrapping): almost always 0,
    /// where the length itself is one more random-looking number.
    rest_ns: Vec<u64>,
    next_pid: Vec<u32>,
    next_comm: Vec<Comm>,
    syscall: Vec<Option<u32>>,
    site: Vec<Site>,
    kstack: Vec<Option<super::stacks::StackId>>,
    ustack: Vec<Option<super::stacks::StackId>>,
    waker: Vec<Option<Waker>>,
    moved_ns: Vec<u32>,
}

impl From<&[OffCpu]> for OffCpuColumns {
    fn from(rows: &[OffCpu]) -> Self {
        Self {
            tid: rows.iter().map(|r| r.tid).collect(),
            tgid: rows.iter().map(|r| r.tgid).collect(),
            preempted: rows.iter().map(|r| r.preempted).collect(),
            cpu_out: rows.iter().map(|r| r.cpu_out).collect(),
            cpu_in: rows.iter().map(|r| r.cpu_in).collect(),
            start_steps: steps(rows.iter().map(|r| r.start_ns)),
            runnable_ns: rows.iter().map(|r| r.runnable_ns).collect(),
            blocked_ns: rows.iter().map(|r| r.blocked_ns).collect(),
            rest_ns: rows
                .iter()
                .map(|r| {
                    r.end_ns
                        .wrapping_sub(r.start_ns)
                        .wrapping_sub(r.runnable_ns)
                        .wrapping_sub(r.blocked_ns)
                })
                .collect(),
            next_pid: rows.iter().map(|r| r.next_pid).collect(),
            next_comm: rows.iter().map(|r| r.next_comm).collect(),
            syscall: rows.iter().map(|r| r.syscall).collect(),
            site: rows.iter().map(|r| r.site).collect(),
            kstack: rows.iter().map(|r| r.kstack).collect(),
            ustack: rows.iter().map(|r| r.ustack).collect(),
            waker: rows.iter().map(|r| r.waker).collect(),
            moved_ns: rows.iter().map(|r| r.moved_ns).collect(),
        }
    }
}

impl StreamedRows for OffCpu {
    fn blank() -> Self {
        Self {
            tid: 0,
            tgid: 0,
            preempted: false,
            cpu_out: 0,
            cpu_in: 0,
            start_ns: 0,
            end_ns: 0,
            runnable_ns: 0,
            blocked_ns: 0,
            next_pid: 0,
            next_comm: Comm::default(),
            syscall: None,
            site: Site::Other,
            kstack: None,
            ustack: None,
            waker: None,
            moved_ns: 0,
        }
    }

    fn column<'de, A: MapAccess<'de>>(
        key: &str,
        rows: &mut Vec<Self>,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key {
            "tid" => fill(rows, map, |r: &mut Self, v| r.tid = v),
            "tgid" => fill(rows, map, |r: &mut Self, v| r.tgid = v),
            "preempted" => fill(rows, map, |r: &mut Self, v| r.preempted = v),
            "cpu_out" => fill(rows, map, |r: &mut Self, v| r.cpu_out = v),
            "cpu_in" => fill(rows, map, |r: &mut Self, v| r.cpu_in = v),
            "start_steps" => fill_steps(rows, map, |r: &mut Self, t| r.start_ns = t),
            "runnable_ns" => fill(rows, map, |r: &mut Self, v| r.runnable_ns = v),
            "blocked_ns" => fill(rows, map, |r: &mut Self, v| r.blocked_ns = v),
            // Kept in `end_ns` until `finish` adds the rest of the length.
            "rest_ns" => fill(rows, map, |r: &mut Self, v| r.end_ns = v),
            "next_pid" => fill(rows, map, |r: &mut Self, v| r.next_pid = v),
            "next_comm" => fill(rows, map, |r: &mut Self, v| r.next_comm = v),
            "syscall" => fill(rows, map, |r: &mut Self, v| r.syscall = v),
            "site" => fill(rows, map, |r: &mut Self, v| r.site = v),
            "kstack" => fill(rows, map, |r: &mut Self, v| r.kstack = v),
            "ustack" => fill(rows, map, |r: &mut Self, v| r.ustack = v),
            "waker" => fill(rows, map, |r: &mut Self, v| r.waker = v),
            "moved_ns" => fill(rows, map, |r: &mut Self, v| r.moved_ns = v),
            _ => map.next_value::<serde::de::IgnoredAny>().map(drop),
        }
    }

    fn finish(rows: &mut [Self]) {
        for r in rows {
            r.end_ns = r
                .start_ns
                .wrapping_add(r.runnable_ns)
                .wrapping_add(r.blocked_ns)
                .wrapping_add(r.end_ns);
        }
    }
}

/// Slot-major: each account slot is one column, mostly zeros.
#[derive(Serialize)]
pub struct AccountColumns {
    tid: Vec<u32>,
    epoch_steps: Vec<i64>,
    top_syscall: Vec<Option<(u32, u64)>>,
    slots: Vec<Vec<u64>>,
}

impl From<&[ThreadAccount]> for AccountColumns {
    fn from(rows: &[ThreadAccount]) -> Self {
        Self {
            tid: rows.iter().map(|r| r.tid).collect(),
            epoch_steps: steps(rows.iter().map(|r| r.epoch)),
            top_syscall: rows.iter().map(|r| r.top_syscall).collect(),
            slots: (0..NUM_ACCOUNT)
                .map(|k| rows.iter().map(|r| r.ns[k]).collect())
                .collect(),
        }
    }
}

impl StreamedRows for ThreadAccount {
    fn blank() -> Self {
        Self {
            tid: 0,
            epoch: 0,
            top_syscall: None,
            ns: [0; NUM_ACCOUNT],
        }
    }

    fn column<'de, A: MapAccess<'de>>(
        key: &str,
        rows: &mut Vec<Self>,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key {
            "tid" => fill(rows, map, |r: &mut Self, v| r.tid = v),
            "epoch_steps" => fill_steps(rows, map, |r: &mut Self, e| r.epoch = e),
            "top_syscall" => fill(rows, map, |r: &mut Self, v| r.top_syscall = v),
            // Slots beyond this version's (a newer file) are skipped.
            "slots" => map.next_value_seed(ArrayColumns {
                rows,
                slots: |r: &mut Self| &mut r.ns[..],
                beyond: None,
            }),
            _ => map.next_value::<serde::de::IgnoredAny>().map(drop),
        }
    }
}
