//! Code paths: on-CPU samples with their stacks, and the table that turns
//! stack ids (from the kernel's stack map, referenced by samples and
//! off-CPU records) into function names.
//!
//! The table is filled once per unique stack at the end of a run
//! (`symbols`) and stored in the run file, so a report needs neither the
//! process nor the machine it ran on.

use std::collections::BTreeMap;

use correlator_common::{Account, SampleRecord};
use serde::{Deserialize, Serialize};

/// What the sampled thread was doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleContext {
    /// Running its own code.
    User,
    /// In a syscall.
    Syscall,
    /// In the kernel outside syscalls and IRQs: fault handling (and the
    /// preemption paths around it).
    Fault,
    /// In a softirq on the thread's time.
    Irq,
}

impl SampleContext {
    fn from_account_slot(slot: u32) -> Self {
        match slot {
            s if s == Account::SamplesUser as u32 => Self::User,
            s if s == Account::SamplesSyscall as u32 => Self::Syscall,
            s if s == Account::SamplesIrq as u32 => Self::Irq,
            _ => Self::Fault,
        }
    }
}

/// One on-CPU sample of a target thread (`--stacks`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub tid: u32,
    pub ts: u64,
    pub context: SampleContext,
    /// Syscall in progress (number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<u32>,
    /// Stack ids in [`StackTable`] (absent: not captured; see the losses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kstack: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ustack: Option<u32>,
}

/// A stack id from the kernel: negative means none (not asked for, or a
/// failure the kernel side counted).
pub fn stack_id(raw: i32) -> Option<u32> {
    u32::try_from(raw).ok()
}

/// An id in the run's stack table, held plus one so that an
/// `Option<StackId>` takes 4 bytes, not 8: off-CPU records are kept by the
/// hundred thousand, with four of them each (a minute at 10,000 req/s:
/// 548,000 records, 8.8 MB more with plain `Option<u32>`s, which took the
/// report of that run to 149 MiB of its 150 MiB bound). Written as the id
/// itself, so run files are as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct StackId(std::num::NonZeroU32);

impl StackId {
    pub fn new(id: u32) -> Option<Self> {
        id.checked_add(1)
            .and_then(std::num::NonZeroU32::new)
            .map(Self)
    }

    pub fn get(self) -> u32 {
        self.0.get() - 1
    }

    /// From a kernel record's stack id (negative: none).
    pub fn from_raw(raw: i32) -> Option<Self> {
        stack_id(raw).and_then(Self::new)
    }
}

impl From<StackId> for u32 {
    fn from(s: StackId) -> u32 {
        s.get()
    }
}

impl TryFrom<u32> for StackId {
    type Error = &'static str;
    fn try_from(id: u32) -> Result<Self, Self::Error> {
        Self::new(id).ok_or("stack id out of range")
    }
}

impl From<&SampleRecord> for Sample {
    fn from(r: &SampleRecord) -> Self {
        Self {
            tid: r.tid,
            ts: r.ts,
            context: SampleContext::from_account_slot(r.context),
            syscall: r.syscall.checked_sub(1),
            kstack: stack_id(r.kstack),
            ustack: stack_id(r.ustack),
        }
    }
}

/// Whether a stack is the kernel's or the process's (they symbolize
/// differently and share one id space).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StackKind {
    Kernel,
    User,
}

/// Raw stacks read from the kernel's stack map: instruction pointers,
/// leaf first, by id.
#[derive(Clone, Debug, Default)]
pub struct RawStacks {
    pub kernel: BTreeMap<u32, Vec<u64>>,
    pub user: BTreeMap<u32, Vec<u64>>,
    /// Ids referenced by a record but gone from the map.
    pub missing: u64,
}

impl RawStacks {
    /// The ids `samples` and off-CPU records reference, by kind.
    pub fn wanted<'a>(
        samples: impl Iterator<Item = &'a Sample>,
        offcpu: impl Iterator<Item = &'a super::OffCpu>,
    ) -> (Vec<u32>, Vec<u32>) {
        let mut kernel = std::collections::BTreeSet::new();
        let mut user = std::collections::BTreeSet::new();
        for s in samples {
            kernel.extend(s.kstack);
            user.extend(s.ustack);
        }
        for o in offcpu {
            kernel.extend(o.kstack.map(StackId::get));
            user.extend(o.ustack.map(StackId::get));
            if let Some(w) = &o.waker {
                kernel.extend(w.kstack.map(StackId::get));
                user.extend(w.ustack.map(StackId::get));
            }
        }
        (kernel.into_iter().collect(), user.into_iter().collect())
    }
}

/// Every referenced stack, symbolized: frames are indices into `symbols`,
/// leaf first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StackTable {
    /// Function names; an address no symbol covers is written
    /// `[module+0xOFFSET]` or `[unknown 0xADDR]`.
    pub symbols: Vec<String>,
    pub kernel: BTreeMap<u32, Vec<u32>>,
    pub user: BTreeMap<u32, Vec<u32>>,
    /// Referenced stacks the map no longer held (not symbolized).
    #[serde(default)]
    pub missing: u64,
    /// Why user stacks may be short or unnamed, found while symbolizing
    /// (e.g. a binary without symbols).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl StackTable {
    pub fn is_empty(&self) -> bool {
        self.kernel.is_empty() && self.user.is_empty()
    }

    /// Frames of a stack, leaf first.
    pub fn frames(&self, kind: StackKind, id: u32) -> impl Iterator<Item = &str> {
        let stacks = match kind {
            StackKind::Kernel => &self.kernel,
            StackKind::User => &self.user,
        };
        stacks
            .get(&id)
            .into_iter()
            .flatten()
            .filter_map(|&i| self.symbols.get(i as usize).map(String::as_str))
    }

    /// Depth of a user stack (0: not in the table).
    pub fn user_depth(&self, id: u32) -> usize {
        self.user.get(&id).map_or(0, Vec::len)
    }
}

/// A short, readable form of a frame: generics dropped, a Rust path cut
/// to its last two segments, the kernel marker (`_[k]`) dropped.
pub fn short_frame(frame: &str) -> String {
    let mut s = String::new();
    let mut depth = 0usize;
    for c in frame.trim_end_matches("_[k]").chars() {
        match c {
            '<' => depth += 1,
            '>' => depth = depth.saturating_sub(1),
            c if depth == 0 => s.push(c),
            _ => {}
        }
    }
    let parts: Vec<&str> = s.split("::").filter(|p| !p.is_empty()).collect();
    parts[parts.len().saturating_sub(2)..].join("::")
}

/// Builds a [`StackTable`], interning names.
#[derive(Default)]
pub struct StackTableBuilder {
    table: StackTable,
    index: std::collections::HashMap<String, u32>,
}

impl StackTableBuilder {
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = u32::try_from(self.table.symbols.len()).unwrap_or(u32::MAX);
        self.table.symbols.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }

    pub fn add(&mut self, kind: StackKind, id: u32, frames: &[String]) {
        let frames = frames.iter().map(|f| self.intern(f)).collect();
        match kind {
            StackKind::Kernel => self.table.kernel.insert(id, frames),
            StackKind::User => self.table.user.insert(id, frames),
        };
    }

    pub fn note(&mut self, note: String) {
        if !self.table.notes.contains(&note) {
            self.table.notes.push(note);
        }
    }

    pub fn finish(mut self, missing: u64) -> StackTable {
        self.table.missing = missing;
        self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interns_names_and_reads_frames_back() {
        let mut b = StackTableBuilder::default();
        b.add(StackKind::User, 7, &["leaf".into(), "main".into()]);
        b.add(StackKind::Kernel, 7, &["schedule".into(), "leaf".into()]);
        let t = b.finish(0);
        assert_eq!(t.symbols.len(), 3);
        assert_eq!(
            t.frames(StackKind::User, 7).collect::<Vec<_>>(),
            ["leaf", "main"]
        );
        assert_eq!(
            t.frames(StackKind::Kernel, 7).collect::<Vec<_>>(),
            ["schedule", "leaf"]
        );
        assert_eq!(t.frames(StackKind::User, 8).count(), 0);
    }

    #[test]
    fn negative_ids_are_none() {
        assert_eq!(stack_id(-17), None);
        assert_eq!(stack_id(i32::MIN), None);
        assert_eq!(stack_id(0), Some(0));
    }
}
