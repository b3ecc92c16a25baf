//! USDT probes (SystemTap SDT notes) of managed runtimes, found in the
//! target's mapped binaries and attached with their semaphores raised.
//!
//! A runtime's USDT probe is a `nop` the compiler placed in the code, with
//! an ELF note (`.note.stapsdt`) giving its address and, for most probes,
//! a semaphore: a 16-bit counter the runtime reads before it even computes
//! the probe's arguments (CPython's `if (PyDTrace_GC_START_ENABLED())`).
//! A uprobe on the `nop` alone never fires while the semaphore is 0.
//!
//! Written by hand because no crate does both halves here: aya 0.16 attaches
//! uprobes at file offsets but cannot pass the semaphore's offset
//! (`ref_ctr_offset`; its multi-attach path has the field internally but
//! does not expose it), and blazesym reads symbols, not SDT notes. The
//! notes are read with `object`. The probe is attached through the
//! kernel's uprobe PMU (`perf_event_open` with `ref_ctr_offset` in
//! `config`'s high bits), which raises the semaphore in the target while
//! the event exists and lowers it when its descriptor is closed, on every
//! exit path of ours, a crash included: nothing of the target's is left
//! changed. (Writing the semaphore through /proc/PID/mem would not be.)

use std::{
    ffi::CString,
    os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use anyhow::{Context, Result, bail};
use object::{
    Endianness,
    elf::{FileHeader64, PT_LOAD},
    read::elf::{FileHeader, ProgramHeader, SectionHeader},
};

/// One SDT probe of a binary: where to attach (file offsets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usdt {
    pub provider: String,
    pub name: String,
    /// File offset of the probe's `nop`.
    pub offset: u64,
    /// File offset of its semaphore (0: none).
    pub semaphore: u64,
}

/// A runtime whose threads run its garbage collector themselves, by the
/// provider and names of its gc start/done probes.
struct RuntimeGc {
    runtime: &'static str,
    provider: &'static str,
    start: &'static str,
    done: &'static str,
}

/// CPython collects on the thread that allocates (Python/gcmodule.c fires
/// `gc__start` and `gc__done` around every collection, of any generation).
/// The JVM's collections run on its own threads; they are named by the
/// waker (`analysis::runtimes`), not here.
const RUNTIME_GCS: [RuntimeGc; 1] = [RuntimeGc {
    runtime: "CPython",
    provider: "python",
    start: "gc__start",
    done: "gc__done",
}];

/// A runtime's gc probes found in one of the target's binaries.
#[derive(Clone, Debug)]
pub struct RuntimeGcProbes {
    pub runtime: &'static str,
    /// The binary as the target sees it (`/proc/PID/root/…`).
    pub binary: PathBuf,
    pub start: Usdt,
    pub done: Usdt,
}

impl RuntimeGcProbes {
    /// The binary's path in the target's own file system.
    pub fn shown_binary(&self) -> String {
        let s = self.binary.display().to_string();
        match s.strip_prefix("/proc/").and_then(|r| r.split_once("/root")) {
            Some((_, path)) => path.to_string(),
            None => s,
        }
    }
}

/// The SDT probes of the 64-bit ELF file `data`.
pub fn probes_in(data: &[u8]) -> Result<Vec<Usdt>> {
    let header = FileHeader64::<Endianness>::parse(data).context("not a 64-bit ELF file")?;
    let endian = header.endian().context("ELF byte order")?;
    let sections = header.sections(endian, data).context("ELF sections")?;
    let segments: Vec<(u64, u64, u64)> = header
        .program_headers(endian, data)
        .context("ELF program headers")?
        .iter()
        .filter(|p| p.p_type(endian) == PT_LOAD)
        .map(|p| (p.p_vaddr(endian), p.p_offset(endian), p.p_filesz(endian)))
        .collect();
    // Where `.stapsdt.base` really is, against where each note says it
    // was when the note was written (prelink moves both).
    let base_now = sections
        .iter()
        .find(|s| sections.section_name(endian, s).ok() == Some(b".stapsdt.base".as_slice()))
        .map(|s| s.sh_addr(endian));
    let to_offset = |vaddr: u64| {
        segments
            .iter()
            .find(|&&(v, _, size)| vaddr >= v && vaddr < v + size)
            .map(|&(v, off, _)| vaddr - v + off)
    };
    let mut found = Vec::new();
    for section in sections.iter() {
        if sections.section_name(endian, section).ok() != Some(b".note.stapsdt".as_slice()) {
            continue;
        }
        let Some(mut notes) = section.notes(endian, data).context("SDT notes")? else {
            continue;
        };
        while let Some(note) = notes.next().context("SDT note")? {
            // NT_STAPSDT
            if note.name() != b"stapsdt" || note.n_type(endian).0 != 3 {
                continue;
            }
            let Some(mut probe) = parse_note(note.desc()) else {
                continue;
            };
            if let Some(now) = base_now {
                let shift = now.wrapping_sub(probe.base);
                probe.pc = probe.pc.wrapping_add(shift);
                if probe.semaphore != 0 {
                    probe.semaphore = probe.semaphore.wrapping_add(shift);
                }
            }
            let Some(offset) = to_offset(probe.pc) else {
                continue;
            };
            let semaphore = if probe.semaphore == 0 {
                0
            } else {
                match to_offset(probe.semaphore) {
                    Some(o) => o,
                    None => continue,
                }
            };
            found.push(Usdt {
                provider: probe.provider,
                name: probe.name,
                offset,
                semaphore,
            });
        }
    }
    Ok(found)
}

/// An SDT note's descriptor as written: addresses then NUL-ended strings.
struct RawNote {
    pc: u64,
    base: u64,
    semaphore: u64,
    provider: String,
    name: String,
}

fn parse_note(desc: &[u8]) -> Option<RawNote> {
    let word = |i: usize| {
        desc.get(i * 8..i * 8 + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let (pc, base, semaphore) = (word(0)?, word(1)?, word(2)?);
    let mut strings = desc.get(24..)?.split(|&b| b == 0);
    let provider = String::from_utf8_lossy(strings.next()?).into_owned();
    let name = String::from_utf8_lossy(strings.next()?).into_owned();
    Some(RawNote {
        pc,
        base,
        semaphore,
        provider,
        name,
    })
}

/// The first runtime whose gc probes one of `pid`'s executable mappings
/// holds (each file read once; files that are not ELF are skipped).
pub fn find_runtime_gc(pid: u32) -> Result<Option<RuntimeGcProbes>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("reading /proc/{pid}/maps"))?;
    let mut seen = std::collections::HashSet::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let perms = fields.nth(1).unwrap_or("");
        let Some(path) = fields.nth(3) else { continue };
        if !perms.contains('x') || !path.starts_with('/') || !seen.insert(path.to_string()) {
            continue;
        }
        let binary = PathBuf::from(format!("/proc/{pid}/root{path}"));
        let Ok(data) = std::fs::read(&binary) else {
            continue;
        };
        let Ok(probes) = probes_in(&data) else {
            continue;
        };
        for rt in &RUNTIME_GCS {
            let find = |name: &str| {
                probes
                    .iter()
                    .find(|p| p.provider == rt.provider && p.name == name)
                    .cloned()
            };
            if let (Some(start), Some(done)) = (find(rt.start), find(rt.done)) {
                return Ok(Some(RuntimeGcProbes {
                    runtime: rt.runtime,
                    binary,
                    start,
                    done,
                }));
            }
        }
    }
    Ok(None)
}

/// Attaches the loaded uprobe program `prog` to `probe` in `binary` for
/// process `pid`, with the probe's semaphore raised while the returned
/// descriptor lives.
pub fn attach(prog: BorrowedFd<'_>, binary: &Path, probe: &Usdt, pid: u32) -> Result<OwnedFd> {
    use perf_event_open_sys as sys;
    let pmu: u32 = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")
        .context("this kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe/type)")?
        .trim()
        .parse()
        .context("uprobe PMU type")?;
    let shift = ref_ctr_shift()?;
    let path = CString::new(binary.as_os_str().as_encoded_bytes()).context("binary path")?;
    let mut attr = sys::bindings::perf_event_attr {
        type_: pmu,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        config: probe.semaphore << shift,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.__bindgen_anon_2.wakeup_events = 1;
    attr.__bindgen_anon_3.uprobe_path = path.as_ptr() as u64;
    attr.__bindgen_anon_4.probe_offset = probe.offset;
    let pid = i32::try_from(pid).context("PID out of range")?;
    // SAFETY: a valid attr whose path outlives the call; one task, any CPU.
    let fd = unsafe {
        sys::perf_event_open(
            &mut attr,
            pid,
            -1,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
        )
    };
    if fd < 0 {
        bail!(
            "cannot attach to USDT {}:{} in {}: {}",
            probe.provider,
            probe.name,
            binary.display(),
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a descriptor the kernel just returned, owned from here on.
    let event = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ioctls on our perf event with a loaded program's descriptor.
    let set = unsafe { sys::ioctls::SET_BPF(event.as_raw_fd(), prog.as_raw_fd() as u32) };
    // SAFETY: as above.
    if set < 0 || unsafe { sys::ioctls::ENABLE(event.as_raw_fd(), 0) } < 0 {
        bail!(
            "cannot attach the program to USDT {}:{}: {}",
            probe.provider,
            probe.name,
            std::io::Error::last_os_error()
        );
    }
    Ok(event)
}

/// Where the uprobe PMU takes `ref_ctr_offset` in `config` (its format
/// file says `config:32-63` on Linux 4.20 and later).
fn ref_ctr_shift() -> Result<u32> {
    let format = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset")
        .context("this kernel's uprobes take no semaphore (no uprobe/format/ref_ctr_offset; Linux 4.20 or later has it)")?;
    format
        .trim()
        .strip_prefix("config:")
        .and_then(|bits| bits.split('-').next())
        .and_then(|low| low.parse().ok())
        .with_context(|| format!("unexpected ref_ctr_offset format {format:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's python3.11 carries CPython's SDT notes; readelf -n lists
    /// them (gc__start with its semaphore in `.probes`).
    #[test]
    fn cpython_gc_probes_are_found_with_their_semaphores() {
        let Ok(data) = std::fs::read("/usr/bin/python3.11") else {
            assert!(std::env::var("CI").is_err(), "CI has Debian's python3.11");
            return;
        };
        let probes = probes_in(&data).expect("parse");
        let start = probes
            .iter()
            .find(|p| p.provider == "python" && p.name == "gc__start")
            .expect("gc__start");
        assert_ne!(start.semaphore, 0);
        assert_ne!(start.offset, 0);
        assert!(probes.iter().any(|p| p.name == "gc__done"));
    }

    #[test]
    fn a_note_is_parsed_and_a_truncated_one_is_not() {
        let mut desc = Vec::new();
        for w in [0x1000u64, 0x2000, 0x3000] {
            desc.extend_from_slice(&w.to_le_bytes());
        }
        desc.extend_from_slice(b"python\0gc__start\0-4@%eax\0");
        let n = parse_note(&desc).expect("note");
        assert_eq!((n.pc, n.base, n.semaphore), (0x1000, 0x2000, 0x3000));
        assert_eq!(
            (n.provider.as_str(), n.name.as_str()),
            ("python", "gc__start")
        );
        assert!(parse_note(&desc[..20]).is_none());
    }
}
