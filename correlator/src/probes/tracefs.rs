//! tracefs: where it is mounted, and the tracepoint layouts the kernel
//! programs rely on.
//!
//! The programs read tracepoint fields at constant offsets
//! (`correlator_common::tp`). Before loading, every offset is checked here
//! against the running kernel's `format` files, so a kernel with another
//! layout is refused with a precise message instead of being misread.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// Candidate tracefs mount points, newest convention first.
const MOUNTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracefs directory that has `events/`, if any.
pub fn root() -> Option<PathBuf> {
    MOUNTS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

/// The tracefs root, or an error that says how to mount it.
pub fn require_root() -> Result<PathBuf> {
    root().context(
        "tracefs is not mounted; mount it with `mount -t tracefs nodev /sys/kernel/tracing`",
    )
}

/// One `field:` line of a tracepoint `format` file.
#[derive(Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
}

/// Parses the `field:` lines of a tracepoint format file.
pub fn parse_fields(format: &str) -> Vec<Field> {
    format
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let decl = line.strip_prefix("field:")?;
            let mut parts = decl.split(';').map(str::trim);
            let declaration = parts.next()?;
            let mut offset = None;
            let mut size = None;
            for part in parts {
                if let Some(v) = part.strip_prefix("offset:") {
                    offset = v.parse().ok();
                } else if let Some(v) = part.strip_prefix("size:") {
                    size = v.parse().ok();
                }
            }
            // "char prev_comm[16]" -> "prev_comm"; "pid_t pid" -> "pid"
            let name = declaration.split_whitespace().last()?;
            let name = name.split('[').next()?.to_string();
            Some(Field {
                name,
                offset: offset?,
                size: size?,
            })
        })
        .collect()
}

fn read_format(root: &Path, event: &str) -> Result<String> {
    let path = root.join("events").join(event).join("format");
    std::fs::read_to_string(&path).with_context(|| {
        format!(
            "tracepoint {event} is not available ({}): this kernel lacks it",
            path.display()
        )
    })
}

/// Checks every field the kernel programs read against this kernel's layout.
pub fn check_layout(root: &Path) -> Result<()> {
    for (event, field, offset, size) in correlator_common::tp::LAYOUT {
        let fields = parse_fields(&read_format(root, event)?);
        match fields.iter().find(|f| f.name == field) {
            Some(f) if f.offset == offset && f.size == size => {}
            Some(f) => bail!(
                "tracepoint {event} field {field} is at offset {} size {} on this kernel, \
                 correlator was built for offset {offset} size {size}; \
                 update correlator_common::tp for this kernel",
                f.offset,
                f.size
            ),
            None => bail!("tracepoint {event} has no field {field} on this kernel"),
        }
    }
    Ok(())
}

/// `TASK_REPORT_MAX`: the `prev_state` sched_switch reports for a preempted
/// task. Read from the tracepoint's print format, which spells it as
/// `((((TASK_REPORT flags) + 1) << 1)`; 0x100 on every kernel since 4.14.
pub fn preempt_state(root: &Path) -> Result<u64> {
    let format = read_format(root, "sched/sched_switch")?;
    Ok(parse_preempt_state(&format).unwrap_or(0x100))
}

fn parse_preempt_state(format: &str) -> Option<u64> {
    let start = format.find("((((")? + 4;
    let end = start + format[start..].find(") + 1) << 1)")?;
    let mask = format[start..end]
        .split('|')
        .map(|v| u64::from_str_radix(v.trim().trim_start_matches("0x"), 16))
        .try_fold(0u64, |acc, v| v.map(|v| acc | v))
        .ok()?;
    Some((mask + 1) << 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWITCH: &str = r#"name: sched_switch
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;

print fmt: "prev_comm=%s", REC->prev_comm, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? "x" : "R"
"#;

    #[test]
    fn parses_fields() {
        let fields = parse_fields(SWITCH);
        assert_eq!(
            fields[1],
            Field {
                name: "prev_comm".into(),
                offset: 8,
                size: 16
            }
        );
        assert_eq!(fields[2].name, "prev_pid");
        assert_eq!(fields[3].offset, 32);
    }

    #[test]
    fn parses_task_report_max() {
        assert_eq!(parse_preempt_state(SWITCH), Some(0x100));
        assert_eq!(parse_preempt_state("no format here"), None);
    }
}
