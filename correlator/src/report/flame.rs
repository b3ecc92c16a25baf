//! Code paths as folded stacks (`frame;frame;leaf count`, read by inferno
//! and flamegraph.pl) and as a flame graph drawn with inferno: episode time
//! against baseline time, differential (red: more of the episodes' time
//! than of the baseline's, blue: less).

use std::collections::BTreeMap;

use crate::analysis::{CodePaths, paths::CodePath};
use crate::timeline::stacks::short_frame;

/// Folded-stack text, one line per stack, counts in µs.
pub fn folded(stacks: &BTreeMap<String, u64>) -> String {
    let mut out = String::new();
    for (stack, us) in stacks {
        out.push_str(stack);
        out.push(' ');
        out.push_str(&us.to_string());
        out.push('\n');
    }
    out
}

/// Differential lines `stack baseline episodes`, the baseline scaled to
/// the episodes' total time so the two are comparable.
fn differential(cp: &CodePaths) -> Vec<String> {
    let scale = if cp.baseline_ns > 0 {
        cp.episode_ns as f64 / cp.baseline_ns as f64
    } else {
        0.0
    };
    let mut both: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (k, v) in &cp.baseline {
        both.entry(k).or_default().0 = (*v as f64 * scale).round() as u64;
    }
    for (k, v) in &cp.episodes {
        both.entry(k).or_default().1 = *v;
    }
    both.into_iter()
        .map(|(k, (b, e))| format!("{k} {b} {e}"))
        .collect()
}

/// The episodes' flame graph (SVG), colored by the difference from the
/// baseline; `None` when there are no stacks.
pub fn svg(cp: &CodePaths) -> Option<String> {
    if cp.episodes.is_empty() {
        return None;
    }
    let lines = differential(cp);
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "Code paths during episodes".into();
    opts.subtitle = Some(
        "width: episode time; red: more than in baseline windows of the same total length, blue: less"
            .into(),
    );
    opts.count_name = "µs".into();
    opts.min_width = 0.5;
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// One line for a code path: the innermost user frames, then the
/// kernel's entry frames.
pub fn one_line(path: &CodePath) -> String {
    let (kernel, user): (Vec<&String>, Vec<&String>) =
        path.frames.iter().partition(|f| f.ends_with("_[k]"));
    let user: Vec<String> = user[user.len().saturating_sub(3)..]
        .iter()
        .map(|f| short_frame(f))
        .collect();
    let kernel: Vec<String> = kernel.iter().take(3).map(|f| short_frame(f)).collect();
    match (user.is_empty(), kernel.is_empty()) {
        (false, false) => format!("{} ⇒ kernel {}", user.join(" → "), kernel.join(" → ")),
        (false, true) => user.join(" → "),
        (true, _) => format!("kernel {}", kernel.join(" → ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> CodePaths {
        CodePaths {
            episodes: [("on-cpu:user;main;work".to_string(), 300)].into(),
            episode_ns: 1_000_000,
            baseline: [
                ("on-cpu:user;main;work".to_string(), 100),
                ("blocked:idle;main;epoll_wait_[k]".to_string(), 900),
            ]
            .into(),
            baseline_ns: 2_000_000,
            median_user_depth: Some(2),
            notes: Vec::new(),
        }
    }

    #[test]
    fn differential_scales_the_baseline_to_episode_time() {
        let lines = differential(&paths());
        assert!(lines.contains(&"on-cpu:user;main;work 50 300".to_string()));
        assert!(lines.contains(&"blocked:idle;main;epoll_wait_[k] 450 0".to_string()));
    }

    #[test]
    fn draws_an_svg_flame_graph() {
        let svg = svg(&paths()).expect("svg");
        assert!(svg.contains("<svg"));
        assert!(svg.contains("work"));
    }

    #[test]
    fn one_line_is_short() {
        let p = CodePath {
            frames: [
                "main",
                "<tokio::Runtime>::block_on::<x>",
                "correlator::harness::pathserver::handle_request",
                "correlator::harness::pathserver::fault_burst",
                "asm_exc_page_fault_[k]",
                "exc_page_fault_[k]",
            ]
            .map(String::from)
            .to_vec(),
            share: 0.5,
            time_ns: 1,
        };
        assert_eq!(
            one_line(&p),
            "block_on → pathserver::handle_request → pathserver::fault_burst ⇒ kernel asm_exc_page_fault → exc_page_fault"
        );
    }
}
