//! Where a waker released a blocked thread (`--stacks`): the few frames of
//! its stack at the wakeup that say what it did, for the report to name
//! the release site beside the waker ("until demo-injector woke it,
//! released at hold → syscall ⇒ kernel do_futex → futex_wake").

use crate::timeline::{
    Waker,
    stacks::{StackKind, StackTable, short_frame},
};

/// User frames kept in a release site (the innermost), and kernel frames.
const USER_FRAMES: usize = 2;
const KERNEL_FRAMES: usize = 3;

/// How deep from the leaf the probe's and the wake-up's frames can be.
const MACHINERY_DEPTH: usize = 12;

/// Kernel frames that are the probes' and the scheduler's own, not the
/// waker's work: the tracepoint's dispatch and the wake-up machinery every
/// wakeup goes through.
const MACHINERY: [&str; 16] = [
    "bpf_",
    "__bpf",
    "__traceiter",
    "trace_",
    "__trace",
    "perf_",
    "try_to_wake_up",
    "ttwu_",
    "wake_up_",
    "__wake_up",
    "default_wake_function",
    "autoremove_wake_function",
    "woken_wake_function",
    "wake_q_",
    "__wake_q",
    "pollwake",
];

/// The release site of wakeup `w`, in the code paths' form (root first,
/// short names): the waker's innermost user frames when it has a user
/// stack (a target thread waking in its own context), then its innermost
/// kernel frames past the machinery ("hold → syscall ⇒ kernel do_futex →
/// futex_wake"); None without stacks.
pub fn site(stacks: &StackTable, w: &Waker) -> Option<String> {
    let mut user: Vec<String> = w
        .ustack
        .map(|u| {
            stacks
                .frames(StackKind::User, u.get())
                .take(USER_FRAMES)
                .map(short_frame)
                .collect()
        })
        .unwrap_or_default();
    user.reverse();
    let mut kernel: Vec<String> = w
        .kstack
        .map(|k| {
            let frames: Vec<&str> = stacks.frames(StackKind::Kernel, k.get()).collect();
            // Past the last machinery frame near the leaf: the probe's own
            // frames (its JIT-compiled program has no symbol of its own and
            // takes the nearest one's name) come first, then the wake-up.
            let from = frames
                .iter()
                .take(MACHINERY_DEPTH)
                .rposition(|f| MACHINERY.iter().any(|m| f.starts_with(m)))
                .map_or(0, |i| i + 1);
            frames[from..]
                .iter()
                .take(KERNEL_FRAMES)
                .map(|f| short_frame(f))
                .collect()
        })
        .unwrap_or_default();
    kernel.reverse();
    match (user.is_empty(), kernel.is_empty()) {
        (true, true) => None,
        (false, true) => Some(user.join(" → ")),
        (true, false) => Some(format!("kernel {}", kernel.join(" → "))),
        (false, false) => Some(format!(
            "{} ⇒ kernel {}",
            user.join(" → "),
            kernel.join(" → ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{
        WakeContext,
        stacks::{StackId, StackTableBuilder},
    };

    fn waker(kstack: Option<u32>, ustack: Option<u32>) -> Waker {
        Waker {
            tid: 7,
            tgid: 7,
            comm: "holder".into(),
            context: WakeContext::Task,
            kstack: kstack.and_then(StackId::new),
            ustack: ustack.and_then(StackId::new),
        }
    }

    #[test]
    fn innermost_user_frames_then_kernel_frames_past_the_machinery() {
        let mut b = StackTableBuilder::default();
        let kernel: Vec<String> = [
            "bpf_trace_run2",
            "__traceiter_sched_waking",
            "try_to_wake_up",
            "wake_up_q",
            "futex_wake",
            "do_futex",
            "__x64_sys_futex",
        ]
        .map(String::from)
        .to_vec();
        b.add(StackKind::Kernel, 1, &kernel);
        b.add(
            StackKind::User,
            2,
            &[
                "syscall".to_string(),
                "unlock".to_string(),
                "hold".to_string(),
            ],
        );
        let t = b.finish(0);
        assert_eq!(
            site(&t, &waker(Some(1), Some(2))).as_deref(),
            Some("unlock → syscall ⇒ kernel __x64_sys_futex → do_futex → futex_wake")
        );
        assert_eq!(
            site(&t, &waker(None, Some(2))).as_deref(),
            Some("unlock → syscall")
        );
        assert_eq!(
            site(&t, &waker(Some(1), None)).as_deref(),
            Some("kernel __x64_sys_futex → do_futex → futex_wake")
        );
        assert_eq!(site(&t, &waker(None, None)), None);
    }
}
