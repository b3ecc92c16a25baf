//! Go's stopped worlds: the runtime stops every goroutine (to start or end
//! a garbage collection's mark phase, or for another stop-the-world
//! operation) in `runtime.stopTheWorldWithSema` and restarts them in
//! `runtime.startTheWorldWithSema`. Go has no USDT probes; these functions
//! are found by name in the executable's symbol table (present unless the
//! binary was linked with `-s`) and timed by entry uprobes (the eBPF
//! crate's `runtimes`). Return probes are never put on Go code: they
//! rewrite a return address on a goroutine stack the runtime may move.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};

/// The function that stops the world (stable since Go 1.9; 1.21 added a
/// reason argument, not read here).
pub const WORLD_STOP: &str = "runtime.stopTheWorldWithSema";
/// The function that restarts it.
pub const WORLD_START: &str = "runtime.startTheWorldWithSema";

/// The target's executable as the target sees it (`/proc/PID/root/…`,
/// through `/proc/PID/exe`), when it is a Go binary with both functions in
/// its symbol table.
pub fn find(pid: u32) -> Option<PathBuf> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let binary = PathBuf::from(format!("/proc/{pid}/root{}", exe.display()));
    has_world_functions(&binary).then_some(binary)
}

/// Whether the ELF file at `path` names both functions.
fn has_world_functions(path: &Path) -> bool {
    let Ok(data) = std::fs::read(path) else {
        return false;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return false;
    };
    let (mut stop, mut start) = (false, false);
    for symbol in file.symbols() {
        match symbol.name() {
            Ok(WORLD_STOP) => stop = true,
            Ok(WORLD_START) => start = true,
            _ => {}
        }
    }
    stop && start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_without_go_is_not_go() {
        let me = std::env::current_exe().expect("test binary");
        assert!(!has_world_functions(&me));
        assert!(!has_world_functions(Path::new("/nonexistent")));
    }
}
