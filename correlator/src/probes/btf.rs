//! A minimal reader of the kernel's BTF (/sys/kernel/btf/vmlinux): struct
//! member offsets and per-CPU variables' offsets.
//!
//! The kernel programs read `task_struct` fields through BTF-typed pointers
//! at offsets passed in as load-time constants; aya exposes no CO-RE field
//! relocation from Rust, and aya-obj keeps BTF struct members crate-private,
//! so the ~100 lines of format walking live here. Format:
//! <https://docs.kernel.org/bpf/btf.html>.

use std::path::Path;

use anyhow::{Context as _, Result, bail};

pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
/// The data section of per-CPU variables: its VAR entries' offsets are the
/// variables' offsets in every CPU's per-CPU area.
const PERCPU_SECTION: &str = ".data..percpu";

/// One type entry: kind, name, and for structs/unions their members
/// as (name offset, type id, bit offset); for a data section its
/// variables as (0, VAR type id, byte offset).
struct Type {
    kind: u32,
    name_off: u32,
    /// The `size`/`type` word: the target type id for typedefs and qualifiers.
    size_or_type: u32,
    members: Vec<(u32, u32, u32)>,
}

pub struct Btf {
    strings: Vec<u8>,
    /// Index = type id - 1.
    types: Vec<Type>,
}

fn u32_at(data: &[u8], at: usize) -> Result<u32> {
    let bytes = data
        .get(at..at + 4)
        .context("BTF data truncated")?
        .try_into()
        .context("BTF data truncated")?;
    Ok(u32::from_le_bytes(bytes))
}

impl Btf {
    pub fn from_sys_fs() -> Result<Self> {
        Self::from_file(Path::new(VMLINUX))
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let data = std::fs::read(path).with_context(|| {
            format!(
                "cannot read kernel BTF at {}: the kernel needs CONFIG_DEBUG_INFO_BTF=y",
                path.display()
            )
        })?;
        Self::parse(&data)
    }

    pub fn parse(data: &[u8]) -> Result<Self> {
        if data.len() < 24 || data[0..2] != [0x9f, 0xeb] {
            bail!("not little-endian BTF data");
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = hdr_len + u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = hdr_len + u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let strings = data
            .get(str_off..str_off + str_len)
            .context("BTF string section out of bounds")?
            .to_vec();
        let mut types = Vec::new();
        let mut at = type_off;
        let end = type_off + type_len;
        while at < end {
            let name_off = u32_at(data, at)?;
            let info = u32_at(data, at + 4)?;
            let size_or_type = u32_at(data, at + 8)?;
            at += 12;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let kflag = info >> 31 != 0;
            let mut members = Vec::new();
            let extra = match kind {
                1 | 14 | 17 => 4, // INT, VAR, DECL_TAG
                3 => 12,          // ARRAY
                KIND_STRUCT | KIND_UNION => {
                    for m in 0..vlen {
                        let base = at + m * 12;
                        let offset = u32_at(data, base + 8)?;
                        let bits = if kflag { offset & 0x00ff_ffff } else { offset };
                        members.push((u32_at(data, base)?, u32_at(data, base + 4)?, bits));
                    }
                    vlen * 12
                }
                KIND_DATASEC => {
                    for v in 0..vlen {
                        let base = at + v * 12;
                        members.push((0, u32_at(data, base)?, u32_at(data, base + 4)?));
                    }
                    vlen * 12
                }
                6 | 13 => vlen * 8, // ENUM, FUNC_PROTO
                19 => vlen * 12,    // ENUM64
                2 | 7..=12 | 16 | 18 => 0,
                other => bail!("unknown BTF kind {other}"),
            };
            at += extra;
            types.push(Type {
                kind,
                name_off,
                size_or_type,
                members,
            });
        }
        Ok(Self { strings, types })
    }

    fn name(&self, off: u32) -> &str {
        let start = off as usize;
        let rest = self.strings.get(start..).unwrap_or_default();
        let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..len]).unwrap_or("")
    }

    fn get(&self, id: u32) -> Option<&Type> {
        self.types.get((id as usize).checked_sub(1)?)
    }

    /// Whether the kernel has a BTF tracepoint `name` (its
    /// `btf_trace_<name>` typedef), i.e. a `tp_btf` program can attach to it.
    pub fn has_tracepoint(&self, name: &str) -> bool {
        let typedef = format!("btf_trace_{name}");
        self.types
            .iter()
            .any(|t| t.kind == KIND_TYPEDEF && self.name(t.name_off) == typedef)
    }

    /// Byte offset of `member` in `struct name`, looking through anonymous
    /// structs and unions (as randomized or grouped layouts use).
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32> {
        let ty = self
            .types
            .iter()
            .find(|t| {
                t.kind == KIND_STRUCT && self.name(t.name_off) == name && !t.members.is_empty()
            })
            .with_context(|| format!("struct {name} not found in kernel BTF"))?;
        let bits = self
            .find_member(ty, member, 0, 0)
            .with_context(|| format!("struct {name} has no member {member} in kernel BTF"))?;
        if bits % 8 != 0 {
            bail!("{name}.{member} is a bitfield");
        }
        Ok(bits / 8)
    }

    /// Offset of the per-CPU variable `name` in a CPU's per-CPU area: the
    /// same for every CPU, so two variables' addresses on one CPU differ by
    /// the difference of their offsets.
    pub fn percpu_offset(&self, name: &str) -> Result<u32> {
        let section = self
            .types
            .iter()
            .find(|t| t.kind == KIND_DATASEC && self.name(t.name_off) == PERCPU_SECTION)
            .with_context(|| format!("no {PERCPU_SECTION} section in kernel BTF"))?;
        section
            .members
            .iter()
            .find(|&&(_, var, _)| {
                self.get(var)
                    .is_some_and(|t| t.kind == KIND_VAR && self.name(t.name_off) == name)
            })
            .map(|&(_, _, offset)| offset)
            .with_context(|| format!("per-CPU variable {name} not in kernel BTF"))
    }

    fn find_member(&self, ty: &Type, member: &str, base: u32, depth: u32) -> Option<u32> {
        if depth > 8 {
            return None;
        }
        for &(name_off, type_id, bits) in &ty.members {
            let name = self.name(name_off);
            if name == member {
                return Some(base + bits);
            }
            if name.is_empty() {
                let inner = self.resolve(type_id)?;
                if matches!(inner.kind, KIND_STRUCT | KIND_UNION)
                    && let Some(found) = self.find_member(inner, member, base + bits, depth + 1)
                {
                    return Some(found);
                }
            }
        }
        None
    }

    /// Follows typedefs and qualifiers (TYPEDEF, VOLATILE, CONST, RESTRICT,
    /// TYPE_TAG) to the underlying type.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..16 {
            let ty = self.get(id)?;
            if !matches!(ty.kind, 8..=11 | 18) {
                return Some(ty);
            }
            id = ty.size_or_type;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_task_struct_members_in_this_kernel() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("SKIPPED: no {VMLINUX}");
            return;
        };
        let pid = btf.member_offset("task_struct", "pid").expect("pid");
        let tgid = btf.member_offset("task_struct", "tgid").expect("tgid");
        let comm = btf.member_offset("task_struct", "comm").expect("comm");
        // pid_t pid; pid_t tgid; are adjacent in every kernel since 2.6.
        assert_eq!(tgid, pid + 4);
        assert!(comm > tgid);
        assert!(btf.member_offset("task_struct", "no_such_member").is_err());
    }

    #[test]
    fn finds_per_cpu_variables_in_this_kernel() {
        let Ok(btf) = Btf::from_sys_fs() else {
            eprintln!("SKIPPED: no {VMLINUX}");
            return;
        };
        // Every SMP kernel has the run queues as a per-CPU variable.
        let rq = btf.percpu_offset("runqueues").expect("runqueues");
        let cpu_off = btf.percpu_offset("this_cpu_off").expect("this_cpu_off");
        assert_ne!(rq, cpu_off);
        assert!(btf.percpu_offset("no_such_variable_here").is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(Btf::parse(b"not btf at all, clearly not").is_err());
    }
}
