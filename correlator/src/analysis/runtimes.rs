//! Managed runtimes' own threads, recognised by name, so that a wait they
//! ended is named for the runtime's pause rather than as the server's own
//! lock.
//!
//! A JVM stops every Java thread at a safepoint to collect garbage: a
//! thread that comes back from native code or polls during the pause
//! blocks in `futex` on the safepoint's barrier until the JVM's `VM Thread`
//! ends the pause and wakes it (HotSpot's Linux wait barrier is a futex
//! the VM Thread wakes). Seen from the kernel that is "blocked in futex",
//! which is what the report said before it followed the waker. The
//! threads' names are HotSpot's own (`os::set_native_thread_name`, cut to
//! 15 bytes by the kernel): `VM Thread`, `GC Thread#N` (parallel and G1
//! workers), `G1 Conc#N`, `G1 Refine#N`, `G1 Main Marker`, `ZDriver`,
//! `ZWorker#N`, `Shenandoah…`.
//!
//! CPython collects on the thread that allocates: there is no other
//! thread to wake it, so its collections are measured by its own USDT
//! probes (`gc__start`/`gc__done`, attached by `probes::usdt` when the
//! target's binary has them) and booked as the thread's time in the
//! collector ([`own_collections`]).
//!
//! Go names no threads and has no probes: its stopped worlds (every
//! goroutine parked while one thread runs a collection's phase change, or
//! another stop-the-world operation) are timed by uprobes on the runtime's
//! own functions (`probes::goruntime`), and any wait of the process's
//! threads inside one is the pause's ([`stopped_world`]).
//!
//! Limits: the VM Thread also runs safepoints that are not collections
//! (deoptimisation, thread dumps, class redefinition); by name alone they
//! are counted here too. The hotspot USDT probes (`gc__begin`/`gc__end`,
//! `safepoint__begin`/`end`) would tell them apart; they are not attached
//! yet. Go's stopped worlds are mostly a collection's two phase changes,
//! but also `runtime.GOMAXPROCS`, `runtime/debug` heap dumps, a CPU
//! profile's start or `ReadMemStats` (before Go 1.21): the functions do
//! not say which (1.21's reason argument is not read yet).

/// How the account names a runtime's collections that the server's own
/// thread ran (CPython collects on the thread that allocates), measured
/// between the runtime's gc probes (`probes::usdt`).
pub fn own_collections(runtime: &str) -> String {
    format!("{runtime}: {OWN_COLLECTIONS}")
}

const OWN_COLLECTIONS: &str = "its collector, run by the thread itself (gc__start to gc__done)";

/// How the account names the waits inside a runtime's stopped world,
/// stopped by thread `by`.
pub fn stopped_world(runtime: &str, by: &str) -> String {
    format!("{runtime}: {STOPPED_WORLD} by {by}")
}

const STOPPED_WORLD: &str = "the world stopped (stopTheWorldWithSema to startTheWorldWithSema)";

/// Whether a collector's name (`TimeAccount::collector`) is a stopped world.
pub fn is_stopped_world(collector: &str) -> bool {
    collector.contains(STOPPED_WORLD)
}

/// Whether a collector's name (`TimeAccount::collector`) is the thread's
/// own collections rather than another thread that stopped it.
pub fn is_own_collections(collector: &str) -> bool {
    collector.ends_with(OWN_COLLECTIONS)
}

/// The runtime a thread named `comm` belongs to, when it is a thread that
/// stops the others to collect garbage.
pub fn collector(comm: &str) -> Option<&'static str> {
    const JVM: [&str; 9] = [
        "VM Thread",
        "GC Thread#",
        "G1 Conc#",
        "G1 Refine#",
        "G1 Main Marker",
        "G1 Service",
        "ZDriver",
        "ZWorker#",
        "Shenandoah",
    ];
    JVM.iter().any(|p| comm.starts_with(p)).then_some("JVM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hotspot_threads_are_the_jvms_collectors_and_others_are_not() {
        for name in ["VM Thread", "GC Thread#0", "G1 Conc#1", "G1 Main Marker"] {
            assert_eq!(collector(name), Some("JVM"), "{name}");
        }
        for name in [
            "demo-injector",
            "HTTP-Dispatcher",
            "java",
            "VM Periodic Tas",
        ] {
            assert_eq!(collector(name), None, "{name}");
        }
    }
}
