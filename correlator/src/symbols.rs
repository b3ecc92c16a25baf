//! Symbolization: stack addresses to function names, once per unique
//! address at the end of a run, with blazesym (kernel through kallsyms;
//! user through the process's maps and its ELF symbols or DWARF, which also
//! covers deleted or replaced binaries through `/proc/PID/map_files`).
//!
//! What blazesym cannot name keeps a usable label: `[module+0xOFFSET]`
//! for an address in a mapped file (from `/proc/PID/maps`), so a stripped
//! binary's frames can still be told apart and symbolized later by hand.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use blazesym::{
    MaybeDefault, Pid,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Kernel, Process, Source},
    },
};

use crate::timeline::stacks::{RawStacks, StackKind, StackTable, StackTableBuilder};

/// Kernel frames above the scheduler that the tracing itself adds to a
/// switch-out's stack (the BPF trampoline and tracepoint plumbing).
fn is_tracing_frame(name: &str) -> bool {
    name.starts_with("bpf_")
        || name.starts_with("__bpf_")
        || name.starts_with("__traceiter_")
        || name.starts_with("trace_call_bpf")
        || name.starts_with("perf_trace_")
}

/// One file mapping of the process (`/proc/PID/maps`).
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    executable: bool,
    file: String,
}

fn mappings(pid: u32) -> Vec<Mapping> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let (range, perms, offset) = (parts.next()?, parts.next()?, parts.next()?);
            let path = parts.nth(2).unwrap_or("");
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: u64::from_str_radix(a, 16).ok()?,
                end: u64::from_str_radix(b, 16).ok()?,
                offset: u64::from_str_radix(offset, 16).ok()?,
                executable: perms.contains('x'),
                file: path.rsplit('/').next().unwrap_or(path).to_string(),
            })
        })
        .collect()
}

/// Names for `addrs` from `src`; `None` where blazesym found no symbol.
fn names(symbolizer: &Symbolizer, src: &Source<'_>, addrs: &[u64]) -> Vec<Option<String>> {
    match symbolizer.symbolize(src, Input::AbsAddr(addrs)) {
        Ok(syms) => syms
            .into_iter()
            .map(|s| match s {
                Symbolized::Sym(sym) => Some(sym.name.into_owned()),
                Symbolized::Unknown(_) => None,
            })
            .collect(),
        Err(e) => {
            log::debug!("symbolization failed: {e:#}");
            vec![None; addrs.len()]
        }
    }
}

/// Symbolizes every stack of `raw`, for process `pid` (still running).
pub fn symbolize(pid: u32, raw: &RawStacks) -> StackTable {
    let symbolizer = Symbolizer::new();
    let mut table = StackTableBuilder::default();

    let kernel_addrs: Vec<u64> = unique(raw.kernel.values());
    let kernel_src = Source::Kernel(Kernel {
        // kallsyms is enough for function names and fast; searching for a
        // vmlinux with DWARF costs seconds and finds none on most hosts.
        vmlinux: MaybeDefault::None,
        ..Kernel::default()
    });
    let kernel_names: HashMap<u64, String> = kernel_addrs
        .iter()
        .copied()
        .zip(names(&symbolizer, &kernel_src, &kernel_addrs))
        .map(|(a, n)| (a, n.unwrap_or_else(|| format!("[kernel 0x{a:x}]"))))
        .collect();
    for (&id, ips) in &raw.kernel {
        let frames: Vec<String> = ips
            .iter()
            .filter_map(|a| kernel_names.get(a).cloned())
            .skip_while(|n| is_tracing_frame(n))
            .collect();
        table.add(StackKind::Kernel, id, &frames);
    }

    let maps = mappings(pid);
    if maps.is_empty() && !raw.user.is_empty() {
        table.note(format!(
            "process {pid} was gone before its stacks were symbolized: user frames are addresses"
        ));
    }
    // Return addresses point after the call; one byte back is inside the
    // calling function even when the call is its last instruction.
    let lookup = |(i, &ip): (usize, &u64)| if i == 0 { ip } else { ip.saturating_sub(1) };
    let user_addrs: Vec<u64> = {
        let set: BTreeSet<u64> = raw
            .user
            .values()
            .flat_map(|ips| ips.iter().enumerate().map(lookup))
            .collect();
        set.into_iter().collect()
    };
    let user_src = Source::Process(Process::new(Pid::from(pid)));
    let user_names: HashMap<u64, Option<String>> = user_addrs
        .iter()
        .copied()
        .zip(names(&symbolizer, &user_src, &user_addrs))
        .collect();
    let mut unnamed_files: BTreeMap<String, u64> = BTreeMap::new();
    for (&id, ips) in &raw.user {
        let mut frames = Vec::new();
        for (i, ip) in ips.iter().enumerate() {
            let addr = lookup((i, ip));
            let mapping = maps.iter().find(|m| m.start <= addr && addr < m.end);
            // A frame-pointer walk through code built without frame
            // pointers reads garbage: an address in no executable mapping
            // ends the stack (nothing past it can be trusted).
            if !maps.is_empty() && !mapping.is_some_and(|m| m.executable) {
                break;
            }
            let name = match (user_names.get(&addr).cloned().flatten(), mapping) {
                (Some(n), _) => n,
                (None, Some(m)) => {
                    *unnamed_files.entry(m.file.clone()).or_default() += 1;
                    format!("[{}+0x{:x}]", m.file, addr - m.start + m.offset)
                }
                (None, None) => format!("[unknown 0x{addr:x}]"),
            };
            frames.push(name);
        }
        table.add(StackKind::User, id, &frames);
    }
    for (file, n) in unnamed_files {
        table.note(format!(
            "{n} user frames in {file} have no symbol (a stripped binary: install its debug-symbol package, e.g. the -dbgsym one, or build with symbols)"
        ));
    }
    table.finish(raw.missing)
}

fn unique<'a>(stacks: impl Iterator<Item = &'a Vec<u64>>) -> Vec<u64> {
    let set: BTreeSet<u64> = stacks.flatten().copied().collect();
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_named_function() -> u64 {
        std::hint::black_box(42)
    }

    #[test]
    fn names_a_function_of_this_process() {
        let addr = a_named_function as *const () as u64;
        let mut raw = RawStacks::default();
        raw.user.insert(1, vec![addr]);
        let table = symbolize(std::process::id(), &raw);
        let frames: Vec<&str> = table.frames(StackKind::User, 1).collect();
        assert_eq!(frames.len(), 1, "{table:?}");
        assert!(frames[0].contains("a_named_function"), "{frames:?}");
    }

    #[test]
    fn tracing_frames_are_recognised() {
        assert!(is_tracing_frame("bpf_trace_run4"));
        assert!(is_tracing_frame("__traceiter_sched_switch"));
        assert!(!is_tracing_frame("schedule"));
    }
}
