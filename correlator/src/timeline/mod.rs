//! The timeline of a run: kernel event counts per time bucket (summed over
//! CPUs) and the off-CPU intervals of the target's threads, all on
//! CLOCK_MONOTONIC.
//!
//! Memory is bounded by run length: buckets are sparse (only buckets with
//! events are stored) and off-CPU records are capped; records beyond the cap
//! are counted, never silently dropped.

pub mod columns;
pub mod ipis;
pub mod irqs;
pub mod memory;
pub mod pauses;
pub mod stacks;
pub mod steal;
pub mod syscalls;
pub mod upstreams;

use std::collections::{BTreeMap, BTreeSet};

use correlator_common::{
    NUM_ACCOUNT, NUM_COUNTERS, OffCpuKind, OffCpuRecord, SyscallRecord, ThreadBucket,
};
use serde::{Deserialize, Serialize};

use syscalls::Site;

/// A task name as the kernel keeps it (at most 16 bytes, TASK_COMM_LEN),
/// stored inline: a minute of a fast server holds half a million off-CPU
/// records, and a heap string in each was a fifth of a report's memory.
/// Reads and writes as a JSON string.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Comm {
    bytes: [u8; 16],
    len: u8,
}

impl Comm {
    /// The name, cut to 16 bytes at a character boundary.
    pub fn new(name: &str) -> Self {
        let mut len = name.len().min(16);
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let mut bytes = [0u8; 16];
        bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        Self {
            bytes,
            len: len as u8,
        }
    }

    /// From the kernel's NUL-padded bytes (invalid UTF-8 replaced).
    pub fn from_kernel(raw: &[u8; 16]) -> Self {
        let len = raw.iter().position(|&b| b == 0).unwrap_or(16);
        Self::new(&String::from_utf8_lossy(&raw[..len]))
    }

    pub fn as_str(&self) -> &str {
        // Only ever filled from a &str cut at a character boundary.
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl From<&str> for Comm {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl std::fmt::Display for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl Serialize for Comm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Comm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Ok(Self::new(&s))
    }
}

/// An off-CPU interval of one target thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpu {
    pub tid: u32,
    pub tgid: u32,
    pub preempted: bool,
    pub cpu_out: u32,
    pub cpu_in: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub runnable_ns: u64,
    pub blocked_ns: u64,
    /// While the thread waited runnable: the task that ran longest in one go
    /// on the CPU it waited for (empty if unknown).
    pub next_pid: u32,
    pub next_comm: Comm,
    /// Syscall the thread was in when it left the CPU (None: user mode,
    /// or a fault). Absent in run files from before it was recorded.
    #[serde(default)]
    pub syscall: Option<u32>,
    /// Where the blocked part waited.
    #[serde(default = "site_other")]
    pub site: Site,
    /// `--stacks`: kernel and user stacks at the switch-out (ids in the
    /// run's stack table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kstack: Option<stacks::StackId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ustack: Option<stacks::StackId>,
    /// Who ended the blocked part (None: preempted, woken before the probes
    /// saw it, or a run file from before wakers were recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waker: Option<Waker>,
    /// The part of `runnable_ns` after the queued thread was last moved to
    /// another CPU (load balancing); 0 in runs from before it was kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moved_ns: u32,
}

/// A run holds up to millions of these: kept within two cache lines.
const _: () = assert!(std::mem::size_of::<OffCpu>() <= 128);

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The task or interrupt that woke a blocked thread: the other end of its
/// wait (who released the lock, signalled the condvar, wrote the pipe,
/// completed the I/O).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waker {
    /// The current task at the wakeup: the waker itself in a task's
    /// context; in an interrupt's, only whoever it interrupted.
    pub tid: u32,
    pub tgid: u32,
    /// Its name, read from /proc when the record arrived ("pid N" when the
    /// task was gone by then, "swapper" for the idle task; empty in run
    /// files built without names).
    pub comm: Comm,
    pub context: WakeContext,
    /// `--stacks`: its kernel stack at the wakeup (the release site), and
    /// its user stack when it is a target thread waking in its own context
    /// (ids in the run's stack table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kstack: Option<stacks::StackId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ustack: Option<stacks::StackId>,
}

/// The context a wakeup ran in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WakeContext {
    /// A task's own code: the task is the waker.
    Task,
    /// A hard IRQ handler (a device's completion, an IPI).
    HardIrq,
    /// A softirq, by vector number (`correlator_common::SOFTIRQ_NAMES`):
    /// NET_RX for a packet's arrival, BLOCK for a disk's completion,
    /// TIMER/HRTIMER for a timeout.
    Softirq(u8),
}

impl Waker {
    /// From the kernel's encoding (`correlator_common::WakeContext`);
    /// None when no waking was seen.
    fn from_raw(tid: u32, tgid: u32, context: u32) -> Option<Self> {
        use correlator_common::WakeContext as Raw;
        let context = match context {
            c if c == Raw::Task as u32 => WakeContext::Task,
            c if c == Raw::HardIrq as u32 => WakeContext::HardIrq,
            c if c >= Raw::Softirq as u32 => {
                WakeContext::Softirq(u8::try_from(c - Raw::Softirq as u32).ok()?)
            }
            _ => return None,
        };
        Some(Self {
            tid,
            tgid,
            comm: Comm::default(),
            context,
            kstack: None,
            ustack: None,
        })
    }

    /// "demo-injector (tid 12)", "a NET_RX softirq (interrupting swapper/1)".
    pub fn describe(&self) -> String {
        let who = if self.comm.is_empty() {
            format!("tid {}", self.tid)
        } else {
            format!("{} (tid {})", self.comm, self.tid)
        };
        match self.context {
            WakeContext::Task => who,
            WakeContext::HardIrq => format!("a hard IRQ (interrupting {who})"),
            WakeContext::Softirq(v) => format!(
                "a {} softirq (interrupting {who})",
                correlator_common::SOFTIRQ_NAMES
                    .get(usize::from(v))
                    .copied()
                    .unwrap_or("unknown")
            ),
        }
    }
}

fn site_other() -> Site {
    Site::Other
}

impl From<&OffCpuRecord> for OffCpu {
    fn from(r: &OffCpuRecord) -> Self {
        Self {
            tid: r.tid,
            tgid: r.tgid,
            preempted: r.kind == OffCpuKind::Preempted as u32,
            cpu_out: r.cpu_out,
            cpu_in: r.cpu_in,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            runnable_ns: r.runnable_ns,
            blocked_ns: r.blocked_ns,
            next_pid: r.next_pid,
            next_comm: Comm::from_kernel(&r.next_comm),
            syscall: r.syscall.checked_sub(1),
            site: Site::from_raw(r.site),
            kstack: stacks::StackId::from_raw(r.kstack),
            ustack: stacks::StackId::from_raw(r.ustack),
            waker: Waker::from_raw(r.waker_tid, r.waker_tgid, r.waker_context).map(|w| Waker {
                kstack: stacks::StackId::from_raw(r.waker_kstack),
                ustack: stacks::StackId::from_raw(r.waker_ustack),
                ..w
            }),
            moved_ns: r.moved_ns,
        }
    }
}

/// One target thread's account of one bucket (see `correlator_common::Account`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadAccount {
    pub tid: u32,
    pub epoch: u64,
    /// The short syscall that ran longest in the kernel in this bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_syscall: Option<(u32, u64)>,
    /// Indexed by `correlator_common::Account`.
    #[serde(deserialize_with = "account_slots")]
    pub ns: [u64; NUM_ACCOUNT],
}

/// Reads a bucket's slots; run files written before a slot was added (new
/// slots go last) have fewer, the missing ones zero.
fn account_slots<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[u64; NUM_ACCOUNT], D::Error> {
    let read = Vec::<u64>::deserialize(d)?;
    if read.len() > NUM_ACCOUNT {
        return Err(serde::de::Error::invalid_length(
            read.len(),
            &"at most NUM_ACCOUNT account slots",
        ));
    }
    let mut ns = [0; NUM_ACCOUNT];
    ns[..read.len()].copy_from_slice(&read);
    Ok(ns)
}

impl From<&ThreadBucket> for ThreadAccount {
    fn from(b: &ThreadBucket) -> Self {
        Self {
            tid: b.tid,
            epoch: b.epoch,
            top_syscall: b
                .top_syscall
                .checked_sub(1)
                .map(|nr| (nr, b.top_syscall_ns)),
            ns: b.ns,
        }
    }
}

/// A syscall of a target thread at least the record minimum long.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallSpan {
    pub tid: u32,
    pub nr: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Off the CPU inside the call, and in IRQs on it; the rest is the
    /// call's own work in the kernel.
    pub offcpu_ns: u64,
    #[serde(default)]
    pub irq_ns: u64,
    /// Taken by the hypervisor inside the call. Absent in older run files.
    #[serde(default)]
    pub steal_ns: u64,
    /// Spinning on contended kernel spinlocks inside the call: a lock
    /// wait, not the call's work. Absent in older run files.
    #[serde(default)]
    pub spin_ns: u64,
    /// On-CPU samples of the thread inside the call (absent in older run
    /// files: no silence is then found in the call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u32>,
}

impl SyscallSpan {
    pub fn on_cpu_ns(&self) -> u64 {
        (self.end_ns.saturating_sub(self.start_ns))
            .saturating_sub(self.offcpu_ns)
            .saturating_sub(self.irq_ns)
            .saturating_sub(self.steal_ns)
            .saturating_sub(self.spin_ns)
    }

    /// The part of the call's on-CPU time in which the CPU's sampling
    /// timer was silent (interrupts off, or the host holding the vCPU
    /// without booking steal): a lower bound, 0 when it cannot be told.
    ///
    /// The sampling timer fires on a fixed grid of `period_ns`; a late
    /// expiry fires once when the CPU takes interrupts again, and the grid
    /// goes on. A call that stayed on the CPU (no time off it) for W holds
    /// at least ⌊W/P⌋ − ⌊S/P⌋ samples when the timer was silent for S in
    /// it, so S ≥ W − (samples + 1)·P. Steal and hard-IRQ time inside are
    /// silence already booked, and W less them and softirqs is the call's
    /// on-CPU time, so the silence not yet booked is at least
    /// on − (samples + 1)·P. Measured here: a clean demo server's
    /// `epoll_wait` held 2-5 ms "on the CPU" with 0-1 samples, its samples
    /// landing at the `spin_unlock_irq` that ended each stretch, and the
    /// steal clock silent; between-sample silence (over 2.1 periods)
    /// saw none of them.
    pub fn silent_ns(&self, period_ns: u64) -> u64 {
        match self.samples {
            Some(n) if period_ns > 0 && self.offcpu_ns == 0 => self
                .on_cpu_ns()
                .saturating_sub((u64::from(n) + 1) * period_ns),
            _ => 0,
        }
    }
}

impl From<&SyscallRecord> for SyscallSpan {
    fn from(r: &SyscallRecord) -> Self {
        Self {
            tid: r.tid,
            nr: r.nr,
            start_ns: r.start_ns,
            end_ns: r.end_ns,
            offcpu_ns: r.offcpu_ns,
            irq_ns: r.irq_ns,
            steal_ns: r.steal_ns,
            spin_ns: r.spin_ns,
            samples: Some(r.samples),
        }
    }
}

/// Counts of one bucket, indexed by `correlator_common::Counter`.
pub type Counts = [u64; NUM_COUNTERS];

#[derive(Clone, Debug)]
pub struct Timeline {
    bucket_ns: u64,
    buckets: BTreeMap<u64, Counts>,
    /// Running sum of every bucket (kept, not recomputed: read on every drain).
    sum: Counts,
    offcpu: Vec<OffCpu>,
    accounts: Vec<ThreadAccount>,
    syscalls: Vec<SyscallSpan>,
    samples: Vec<stacks::Sample>,
    upstreams: Vec<upstreams::UpstreamExchange>,
    mem_stalls: Vec<memory::MemStall>,
    runtime_pauses: Vec<pauses::RuntimePause>,
    ipi_senders: Vec<ipis::IpiSender>,
    device_irqs: Vec<irqs::DeviceIrq>,
    max_records: usize,
    records_over_cap: u64,
    /// Buckets changed since [`Timeline::take_touched`] last ran, when a
    /// run-file journal asks for them (`None`: nobody does, nothing kept).
    touched: Option<BTreeSet<u64>>,
}

impl Timeline {
    pub fn new(bucket_ns: u64, max_records: usize) -> Self {
        Self {
            bucket_ns,
            buckets: BTreeMap::new(),
            sum: [0; NUM_COUNTERS],
            offcpu: Vec::new(),
            accounts: Vec::new(),
            syscalls: Vec::new(),
            samples: Vec::new(),
            upstreams: Vec::new(),
            mem_stalls: Vec::new(),
            runtime_pauses: Vec::new(),
            ipi_senders: Vec::new(),
            device_irqs: Vec::new(),
            max_records,
            records_over_cap: 0,
            touched: None,
        }
    }

    /// Keeps the set of buckets changed between calls of
    /// [`Timeline::take_touched`] (for a journal written while recording).
    pub fn track_touched(&mut self) {
        self.touched.get_or_insert_with(BTreeSet::new);
    }

    /// The current counts of every bucket changed since the last call
    /// (a bucket gets counts from several CPUs' drains, late ones too).
    pub fn take_touched(&mut self) -> Vec<(u64, Counts)> {
        let Some(touched) = self.touched.as_mut() else {
            return Vec::new();
        };
        std::mem::take(touched)
            .into_iter()
            .filter_map(|e| self.buckets.get(&e).map(|c| (e, *c)))
            .collect()
    }

    pub fn bucket_ns(&self) -> u64 {
        self.bucket_ns
    }

    /// Adds one CPU's counts for bucket `epoch` (time `epoch * bucket_ns`).
    pub fn add_bucket(&mut self, epoch: u64, counts: &Counts) {
        if counts.iter().all(|&c| c == 0) {
            return;
        }
        if let Some(t) = &mut self.touched {
            t.insert(epoch);
        }
        let slot = self.buckets.entry(epoch).or_insert([0; NUM_COUNTERS]);
        for ((s, total), c) in slot.iter_mut().zip(self.sum.iter_mut()).zip(counts) {
            *s += c;
            *total += c;
        }
    }

    pub fn push_offcpu(&mut self, interval: OffCpu) {
        Self::capped(
            &mut self.offcpu,
            interval,
            self.max_records,
            &mut self.records_over_cap,
        );
    }

    /// Each kind of record is capped at `max_records`; the rest are counted.
    fn capped<T>(v: &mut Vec<T>, item: T, max: usize, over: &mut u64) {
        if v.len() < max {
            v.push(item);
        } else {
            *over += 1;
        }
    }

    pub fn push_account(&mut self, account: ThreadAccount) {
        Self::capped(
            &mut self.accounts,
            account,
            self.max_records,
            &mut self.records_over_cap,
        );
    }

    pub fn push_syscall(&mut self, span: SyscallSpan) {
        Self::capped(
            &mut self.syscalls,
            span,
            self.max_records,
            &mut self.records_over_cap,
        );
    }

    pub fn push_sample(&mut self, sample: stacks::Sample) {
        Self::capped(
            &mut self.samples,
            sample,
            self.max_records,
            &mut self.records_over_cap,
        );
    }

    pub fn push_upstream(&mut self, exchange: upstreams::UpstreamExchange) {
        Self::capped(
            &mut self.upstreams,
            exchange,
            self.max_records,
            &mut self.records_over_cap,
        );
    }

    /// Adds a stall, less the stalls of its thread already held inside it
    /// (they ended first: a swap-in spans its fault, reclaims in it
    /// included; see `memory::cut_around`).
    pub fn push_mem_stall(&mut self, stall: memory::MemStall) {
        // Records arrive about in the order they ended: the nested ones
        // are at the tail (a second of slack for other CPUs' records).
        let mut nested: Vec<(u64, u64)> = self
            .mem_stalls
            .iter()
            .rev()
            .take_while(|m| m.end_ns + 1_000_000_000 >= stall.start_ns)
            .filter(|m| {
                m.tid == stall.tid && m.start_ns >= stall.start_ns && m.end_ns <= stall.end_ns
            })
            .map(|m| (m.start_ns, m.end_ns))
            .collect();
        for piece in memory::cut_around(&stall, &mut nested) {
            Self::capped(
                &mut self.mem_stalls,
                piece,
                self.max_records,
                &mut self.records_over_cap,
            );
        }
    }

    pub fn mem_stalls(&self) -> &[memory::MemStall] {
        &self.mem_stalls
    }

    pub fn push_runtime_pause(&mut self, pause: pauses::RuntimePause) {
        Self::capped(
            &mut self.runtime_pauses,
            pause,
            self.max_records,
            &mut self.records_over_cap,
        );
    }

    pub fn runtime_pauses(&self) -> &[pauses::RuntimePause] {
        &self.runtime_pauses
    }

    /// Who sent cross-CPU calls to the target's CPUs over the run (read at
    /// its end).
    pub fn ipi_senders(&self) -> &[ipis::IpiSender] {
        &self.ipi_senders
    }

    pub fn set_ipi_senders(&mut self, senders: Vec<ipis::IpiSender>) {
        self.ipi_senders = senders;
    }

    /// Device IRQs that took time from target threads, most first.
    pub fn device_irqs(&self) -> &[irqs::DeviceIrq] {
        &self.device_irqs
    }

    pub fn set_device_irqs(&mut self, irqs: Vec<irqs::DeviceIrq>) {
        self.device_irqs = irqs;
    }

    pub fn upstreams(&self) -> &[upstreams::UpstreamExchange] {
        &self.upstreams
    }

    pub fn samples(&self) -> &[stacks::Sample] {
        &self.samples
    }

    pub fn accounts(&self) -> &[ThreadAccount] {
        &self.accounts
    }

    pub fn syscalls(&self) -> &[SyscallSpan] {
        &self.syscalls
    }

    /// Buckets with events, in time order, as (epoch, counts).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, &Counts)> {
        self.buckets.iter().map(|(e, c)| (*e, c))
    }

    pub fn offcpu(&self) -> &[OffCpu] {
        &self.offcpu
    }

    /// Off-CPU records not kept because of the memory cap.
    pub fn records_over_cap(&self) -> u64 {
        self.records_over_cap
    }

    /// Sum of every bucket.
    pub fn sum(&self) -> Counts {
        self.sum
    }

    /// Forgets everything before `ts` (buckets that start before it,
    /// records that end before it), for a recorder that keeps only the
    /// last minutes. The running sum drops the forgotten buckets too, so
    /// it stays the sum of what is kept; the over-cap count is kept whole.
    pub fn prune_before(&mut self, ts: u64) {
        let first = ts / self.bucket_ns.max(1);
        let kept = self.buckets.split_off(&first);
        for counts in std::mem::replace(&mut self.buckets, kept).values() {
            for (total, c) in self.sum.iter_mut().zip(counts) {
                *total -= c;
            }
        }
        self.offcpu.retain(|o| o.end_ns >= ts);
        self.syscalls.retain(|s| s.end_ns >= ts);
        self.accounts.retain(|a| a.epoch >= first);
        self.samples.retain(|s| s.ts >= ts);
        self.upstreams.retain(|u| u.read_ns >= ts);
        self.mem_stalls.retain(|m| m.end_ns >= ts);
        self.runtime_pauses.retain(|p| p.end_ns >= ts);
    }

    /// Forgets everything after `ts` (buckets that start after it, records
    /// that start after it): a window cut out of a longer recording.
    pub fn prune_after(&mut self, ts: u64) {
        let last = ts / self.bucket_ns.max(1);
        for counts in self.buckets.split_off(&(last + 1)).values() {
            for (total, c) in self.sum.iter_mut().zip(counts) {
                *total -= c;
            }
        }
        self.offcpu.retain(|o| o.start_ns <= ts);
        self.syscalls.retain(|s| s.start_ns <= ts);
        self.accounts.retain(|a| a.epoch <= last);
        self.samples.retain(|s| s.ts <= ts);
        self.upstreams.retain(|u| u.sent_ns <= ts);
        self.mem_stalls.retain(|m| m.start_ns <= ts);
        self.runtime_pauses.retain(|p| p.start_ns <= ts);
    }

    /// An empty timeline with this one's bucket width and record cap.
    pub fn empty_like(&self) -> Self {
        Self::new(self.bucket_ns, self.max_records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_cpus_and_skips_empty_buckets() {
        let mut t = Timeline::new(1_000_000, 10);
        let mut a = [0; NUM_COUNTERS];
        a[0] = 2;
        t.add_bucket(5, &a);
        t.add_bucket(5, &a);
        t.add_bucket(6, &[0; NUM_COUNTERS]);
        assert_eq!(t.buckets().count(), 1);
        assert_eq!(t.sum()[0], 4);
    }

    #[test]
    fn pruning_keeps_the_window_and_its_sum() {
        let mut t = Timeline::new(1_000, 10);
        let mut a = [0; NUM_COUNTERS];
        a[0] = 1;
        for epoch in 0..10 {
            t.add_bucket(epoch, &a);
            // One upstream exchange per bucket, sent at its start and
            // read back 600 ns later.
            t.push_upstream(upstreams::UpstreamExchange {
                tid: 1,
                reader_tid: 1,
                peer: "127.0.0.1:1".into(),
                conn: 0,
                bytes_out: 1,
                sent_ns: epoch * 1_000,
                arrived_ns: None,
                read_ns: epoch * 1_000 + 600,
            });
        }
        t.prune_before(3_500);
        t.prune_after(7_200);
        // The exchanges that reach into the window: read after 3,500 and
        // sent before 7,200.
        assert_eq!(
            t.upstreams().iter().map(|u| u.sent_ns).collect::<Vec<_>>(),
            vec![3_000, 4_000, 5_000, 6_000, 7_000]
        );
        // Buckets 3..=7 (bucket 3 starts before 3,500 but reaches into it).
        assert_eq!(
            t.buckets().map(|(e, _)| e).collect::<Vec<_>>(),
            vec![3, 4, 5, 6, 7]
        );
        assert_eq!(t.sum()[0], 5);
    }

    #[test]
    fn counts_records_over_cap() {
        let mut t = Timeline::new(1, 1);
        let rec = OffCpu {
            tid: 1,
            tgid: 1,
            preempted: true,
            cpu_out: 0,
            cpu_in: 0,
            start_ns: 0,
            end_ns: 1,
            runnable_ns: 1,
            blocked_ns: 0,
            next_pid: 0,
            next_comm: Comm::default(),
            syscall: None,
            site: Site::Other,
            kstack: None,
            ustack: None,
            waker: None,
            moved_ns: 0,
        };
        t.push_offcpu(rec.clone());
        t.push_offcpu(rec);
        assert_eq!(t.offcpu().len(), 1);
        assert_eq!(t.records_over_cap(), 1);
    }
}
