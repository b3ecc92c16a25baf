//! The labelled corpus scored (`correlator-testkit eval --corpus DIR`):
//! every recorded run of corpus/manifest.json analysed as `report` would,
//! and scored against the truth its case was made with; beside it, a
//! trivial analyzer on the same runs, so a reader sees what the analysis
//! adds; and the difference against the committed scores (a change to the
//! analysis states its corpus diff).
//!
//! Scored per run: the signature; the top server cause (the first claimed,
//! right when it is one of the case's causes, or when nothing is claimed
//! on a baseline); every claimed server cause (right, not wrong: in the
//! case's `also`, or a false claim); recall of the case's causes; and
//! where the top claim went (a server cause, the environment only, or
//! nothing) against whether the case has a server cause.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use crate::{
    analysis::{
        self, AnalysisOptions, Signature,
        causes::{CauseKind, ENVIRONMENT_CAUSES, SERVER_CAUSES},
    },
    runfile::RunFile,
};

#[derive(Deserialize)]
struct Manifest {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    signature: Signature,
    causes: Vec<Truth>,
    also: Vec<CauseKind>,
}

/// A case's true cause: one the analysis has a name for, or one it cannot
/// name yet (the case stays in, labelled with the right answer, and every
/// run of it scores as wrong until the analysis learns to name it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Truth {
    Named(CauseKind),
    Unnamed(UnnamedCause),
}

/// Causes the corpus's real software shows that the analysis has no
/// kind for yet (issue 38 names them). Upstream waits were one until
/// issue 37 named them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum UnnamedCause {
    /// The server reclaiming memory (its cgroup's limit, or the machine's)
    /// inside its request path.
    MemoryReclaim,
}

impl Case {
    fn is_cause(&self, claimed: CauseKind) -> bool {
        self.causes.contains(&Truth::Named(claimed))
    }

    /// A claim that is neither one of the case's causes nor "also".
    fn is_false_claim(&self, claimed: CauseKind) -> bool {
        !self.is_cause(claimed) && !self.also.contains(&claimed)
    }
}

/// One case's counts (integers, so the committed file compares exactly).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseScore {
    pub runs: u64,
    pub signature_ok: u64,
    pub top_ok: u64,
    /// Claimed server causes that are the case's causes / in its `also` /
    /// neither (false claims), over all its runs.
    pub claims_right: u64,
    pub claims_also: u64,
    pub claims_false: u64,
    /// Runs with at least one false claim.
    pub runs_with_false_claims: u64,
    /// The case's causes claimed, over (causes × runs).
    pub recalled: u64,
    pub to_recall: u64,
    /// Runs whose case is not periodic, and those of them called periodic
    /// (absent from scores written before they were counted).
    #[serde(default)]
    pub non_periodic_runs: u64,
    #[serde(default)]
    pub false_periodic: u64,
    /// The trivial analyzer's signature and top cause.
    pub trivial_signature_ok: u64,
    pub trivial_top_ok: u64,
}

/// Where a run's top claim went, against whether its case has a server
/// cause: the environment-vs-server confusion table.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confusion {
    pub server_case_server_claim: u64,
    pub server_case_environment_only: u64,
    pub server_case_nothing: u64,
    pub baseline_server_claim: u64,
    pub baseline_environment_only: u64,
    pub baseline_nothing: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scores {
    pub cases: BTreeMap<String, CaseScore>,
    pub confusion: Confusion,
}

/// What an analyzer said about one run.
struct Verdict {
    signature: Signature,
    /// Claimed server causes, first first.
    server: Vec<CauseKind>,
    /// Whether it named any environment cause.
    environment: bool,
}

fn correlator_verdict(a: &analysis::Analysis) -> Verdict {
    let c = &a.classification;
    Verdict {
        signature: c.signature,
        server: c
            .causes
            .iter()
            .filter(|x| x.cause.is_server())
            .map(|x| x.cause)
            .collect(),
        environment: c.causes.iter().any(|x| !x.cause.is_server()),
    }
}

/// Signature "sporadic"; cause: the category with the most episode time.
fn trivial_verdict(a: &analysis::Analysis) -> Verdict {
    let top = SERVER_CAUSES
        .iter()
        .chain(&ENVIRONMENT_CAUSES)
        .map(|&k| {
            (
                k,
                a.episodes.iter().map(|e| k.time(&e.account)).sum::<u64>(),
            )
        })
        .filter(|&(_, ns)| ns > 0)
        .max_by_key(|&(_, ns)| ns)
        .map(|(k, _)| k);
    Verdict {
        signature: Signature::Sporadic,
        server: top.filter(|k| k.is_server()).into_iter().collect(),
        environment: top.is_some_and(|k| !k.is_server()),
    }
}

/// Scores every run of every case under `dir` (manifest.json, runs/).
pub fn score(dir: &Path, verbose: bool) -> Result<Scores> {
    let path = dir.join("manifest.json");
    let manifest: Manifest = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )
    .with_context(|| format!("{} is malformed", path.display()))?;
    let mut scores = Scores::default();
    for case in &manifest.cases {
        let mut s = CaseScore::default();
        for run_path in runs_of(&dir.join("runs").join(&case.name)) {
            let run = RunFile::load(&run_path)?;
            let Some(latency) = run.analysed_latency() else {
                anyhow::bail!("{} has no latency to analyse", run_path.display());
            };
            let a = analysis::analyze(&run, latency, &AnalysisOptions::default());
            let v = correlator_verdict(&a);
            score_run(case, &v, &mut s, Some(&mut scores.confusion));
            let t = trivial_verdict(&a);
            s.trivial_signature_ok += u64::from(t.signature == case.signature);
            s.trivial_top_ok += u64::from(top_ok(case, &t));
            if verbose && (v.signature != case.signature || !top_ok(case, &v)) {
                println!(
                    "  wrong: {} → {:?} {:?}: {}",
                    run_path.display(),
                    v.signature,
                    v.server,
                    a.classification.evidence
                );
            }
            if verbose {
                for c in a
                    .classification
                    .causes
                    .iter()
                    .filter(|c| c.cause.is_server() && case.is_false_claim(c.cause))
                {
                    println!(
                        "  false claim: {} → {} (p = {:.1e}): {}",
                        run_path.display(),
                        c.cause.name(),
                        c.p_value.unwrap_or(f64::NAN),
                        c.evidence
                    );
                }
            }
        }
        scores.cases.insert(case.name.clone(), s);
    }
    Ok(scores)
}

fn runs_of(dir: &Path) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "run"))
                .collect()
        })
        .unwrap_or_default();
    runs.sort();
    runs
}

fn top_ok(case: &Case, v: &Verdict) -> bool {
    match v.server.first() {
        Some(&top) => case.is_cause(top),
        None => case.causes.is_empty(),
    }
}

fn score_run(case: &Case, v: &Verdict, s: &mut CaseScore, confusion: Option<&mut Confusion>) {
    s.runs += 1;
    s.signature_ok += u64::from(v.signature == case.signature);
    s.top_ok += u64::from(top_ok(case, v));
    if case.signature != Signature::Periodic {
        s.non_periodic_runs += 1;
        s.false_periodic += u64::from(v.signature == Signature::Periodic);
    }
    let mut false_claims = 0;
    for &c in &v.server {
        if case.is_cause(c) {
            s.claims_right += 1;
        } else if case.is_false_claim(c) {
            false_claims += 1;
        } else {
            s.claims_also += 1;
        }
    }
    s.claims_false += false_claims;
    s.runs_with_false_claims += u64::from(false_claims > 0);
    s.to_recall += case.causes.len() as u64;
    s.recalled += case
        .causes
        .iter()
        .filter(|t| matches!(t, Truth::Named(c) if v.server.contains(c)))
        .count() as u64;
    if let Some(m) = confusion {
        let slot = match (case.causes.is_empty(), !v.server.is_empty(), v.environment) {
            (false, true, _) => &mut m.server_case_server_claim,
            (false, false, true) => &mut m.server_case_environment_only,
            (false, false, false) => &mut m.server_case_nothing,
            (true, true, _) => &mut m.baseline_server_claim,
            (true, false, true) => &mut m.baseline_environment_only,
            (true, false, false) => &mut m.baseline_nothing,
        };
        *slot += 1;
    }
}

fn pct(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.0}%", 100.0 * a as f64 / b as f64)
    }
}

/// The per-case table, the totals and the confusion table.
pub fn print(scores: &Scores) {
    println!(
        "  {:<30} {:>4} {:>6} {:>6} {:>7} {:>7} {:>7} | trivial {:>6} {:>6}",
        "case", "runs", "sig", "top", "false", "recall", "also", "sig", "top"
    );
    let mut t = CaseScore::default();
    for (name, s) in &scores.cases {
        println!(
            "  {:<30} {:>4} {:>6} {:>6} {:>7} {:>7} {:>7} | trivial {:>6} {:>6}",
            name,
            s.runs,
            pct(s.signature_ok, s.runs),
            pct(s.top_ok, s.runs),
            s.claims_false,
            pct(s.recalled, s.to_recall),
            s.claims_also,
            pct(s.trivial_signature_ok, s.runs),
            pct(s.trivial_top_ok, s.runs),
        );
        t.runs += s.runs;
        t.signature_ok += s.signature_ok;
        t.top_ok += s.top_ok;
        t.claims_right += s.claims_right;
        t.claims_also += s.claims_also;
        t.claims_false += s.claims_false;
        t.recalled += s.recalled;
        t.to_recall += s.to_recall;
        t.non_periodic_runs += s.non_periodic_runs;
        t.false_periodic += s.false_periodic;
        t.trivial_signature_ok += s.trivial_signature_ok;
        t.trivial_top_ok += s.trivial_top_ok;
    }
    let m = &scores.confusion;
    let baselines = m.baseline_server_claim + m.baseline_environment_only + m.baseline_nothing;
    println!(
        "  corpus: {} runs; signature {}, top cause {}, precision of server claims {} ({} right, {} not wrong, {} false), recall {}; false server claims on baselines {} of {} runs ({})",
        t.runs,
        pct(t.signature_ok, t.runs),
        pct(t.top_ok, t.runs),
        pct(
            t.claims_right + t.claims_also,
            t.claims_right + t.claims_also + t.claims_false
        ),
        t.claims_right,
        t.claims_also,
        t.claims_false,
        pct(t.recalled, t.to_recall),
        m.baseline_server_claim,
        baselines,
        pct(m.baseline_server_claim, baselines),
    );
    println!(
        "  false periodic calls on the runs of cases that are not periodic: {} of {} ({})",
        t.false_periodic,
        t.non_periodic_runs,
        pct(t.false_periodic, t.non_periodic_runs),
    );
    println!(
        "  trivial analyzer (sporadic; the category with the most episode time): signature {}, top cause {}",
        pct(t.trivial_signature_ok, t.runs),
        pct(t.trivial_top_ok, t.runs),
    );
    println!(
        "  top claim vs truth:   server cause   environment only   nothing\n    server-cause cases {:>10} {:>18} {:>9}\n    baselines          {:>10} {:>18} {:>9}",
        m.server_case_server_claim,
        m.server_case_environment_only,
        m.server_case_nothing,
        m.baseline_server_claim,
        m.baseline_environment_only,
        m.baseline_nothing,
    );
}

/// Lines saying how `now` differs from the committed `before`.
pub fn diff(before: &Scores, now: &Scores) -> Vec<String> {
    let mut out = Vec::new();
    let empty = CaseScore::default();
    let names: std::collections::BTreeSet<&String> =
        before.cases.keys().chain(now.cases.keys()).collect();
    for name in names {
        let (b, n) = (
            before.cases.get(name).unwrap_or(&empty),
            now.cases.get(name).unwrap_or(&empty),
        );
        if b == n {
            continue;
        }
        let field = |what: &str, x: u64, y: u64| (x != y).then(|| format!("{what} {x}→{y}"));
        let changes: Vec<String> = [
            field("runs", b.runs, n.runs),
            field("signature", b.signature_ok, n.signature_ok),
            field("top", b.top_ok, n.top_ok),
            field("false periodic", b.false_periodic, n.false_periodic),
            field("false claims", b.claims_false, n.claims_false),
            field("right claims", b.claims_right, n.claims_right),
            field("recalled", b.recalled, n.recalled),
        ]
        .into_iter()
        .flatten()
        .collect();
        out.push(format!("{name}: {}", changes.join(", ")));
    }
    if before.confusion != now.confusion {
        out.push(format!(
            "confusion: {:?} → {:?}",
            before.confusion, now.confusion
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(json: &str) -> Case {
        serde_json::from_str(json).expect("a case")
    }

    #[test]
    fn truths_read_named_and_unnamed_causes() {
        let c = case(
            r#"{"name": "x", "signature": "periodic",
                "causes": ["memory_reclaim", "blocking", "upstream"], "also": []}"#,
        );
        assert_eq!(
            c.causes,
            vec![
                Truth::Unnamed(UnnamedCause::MemoryReclaim),
                Truth::Named(CauseKind::Blocking),
                Truth::Named(CauseKind::Upstream)
            ]
        );
        assert!(c.is_cause(CauseKind::Blocking));
        assert!(!c.is_cause(CauseKind::Preemption));
        let bad = serde_json::from_str::<Case>(
            r#"{"name": "x", "signature": "periodic", "causes": ["gremlins"], "also": []}"#,
        );
        assert!(
            bad.is_err(),
            "an unknown cause is an error, not a silent miss"
        );
    }

    #[test]
    fn an_unnamed_truth_scores_wrong_whatever_is_claimed() {
        let c = case(
            r#"{"name": "x", "signature": "sporadic", "causes": ["memory_reclaim"], "also": []}"#,
        );
        let mut s = CaseScore::default();
        let mut m = Confusion::default();
        for server in [vec![], vec![CauseKind::Blocking]] {
            let v = Verdict {
                signature: Signature::Sporadic,
                server,
                environment: true,
            };
            score_run(&c, &v, &mut s, Some(&mut m));
        }
        assert_eq!((s.runs, s.signature_ok, s.top_ok), (2, 2, 0));
        assert_eq!((s.recalled, s.to_recall), (0, 2));
        assert_eq!((s.claims_right, s.claims_false), (0, 1));
        assert_eq!(m.server_case_environment_only, 1);
        assert_eq!(m.server_case_server_claim, 1);
    }

    #[test]
    fn a_periodic_call_on_a_case_that_is_not_periodic_is_counted() {
        let mut s = CaseScore::default();
        for (truth, called) in [
            ("sporadic", Signature::Periodic),
            ("sporadic", Signature::Sporadic),
            ("periodic", Signature::Periodic),
        ] {
            let c = case(&format!(
                r#"{{"name": "x", "signature": "{truth}", "causes": [], "also": []}}"#
            ));
            let v = Verdict {
                signature: called,
                server: vec![],
                environment: false,
            };
            score_run(&c, &v, &mut s, None);
        }
        assert_eq!((s.non_periodic_runs, s.false_periodic), (2, 1));
    }
}
