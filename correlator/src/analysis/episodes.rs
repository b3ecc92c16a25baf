//! Spikes and episodes. A spike is a request slower than the threshold;
//! spikes whose [intended send, completion] intervals overlap come from one
//! stall, so they are grouped into one episode.

use serde::{Deserialize, Serialize};

use crate::{latency::Distribution, latency::recorder::RequestTimes};

/// The default spike threshold: max(5 × p50, p50 + 2 ms). Multiplicative so
/// it scales with the server, with an absolute floor so the scheduling noise
/// every machine has (a kernel thread's 1 ms slice, a VM hiccup) is not
/// called a spike; `--slo` sets it explicitly.
pub fn default_threshold(d: &Distribution) -> Option<u64> {
    // The median as a yardstick, not a quoted figure: no samples-above rule.
    (d.count() > 0).then(|| {
        let p50 = d.histogram().value_at_quantile(0.5);
        (5 * p50).max(p50 + 2_000_000)
    })
}

/// Whether a slow request was slow at the server: at least half the
/// threshold passed after it was sent. Otherwise the generator sent it late
/// (its own lateness, not a server stall) and it is reported apart.
pub fn slow_at_server(r: &RequestTimes, threshold_ns: u64) -> bool {
    r.service() >= threshold_ns / 2
}

/// A spike request: at or above the threshold, and slow at the server.
pub fn is_spike(r: &RequestTimes, threshold_ns: u64) -> bool {
    r.corrected() >= threshold_ns && slow_at_server(r, threshold_ns)
}

/// One stall, as seen by the requests it delayed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub start_ns: u64,
    pub end_ns: u64,
    /// Slowest request's latency (from the intended send time).
    pub peak_ns: u64,
    /// Spike requests in the episode.
    pub requests: u64,
    /// Phase (rate step) the episode started in.
    pub phase: u32,
}

impl Window {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns).max(1)
    }
}

/// Groups spike requests into episodes, in time order.
pub fn episodes(requests: &[RequestTimes], threshold_ns: u64) -> Vec<Window> {
    let mut spikes: Vec<&RequestTimes> = requests
        .iter()
        .filter(|r| is_spike(r, threshold_ns))
        .collect();
    spikes.sort_by_key(|r| r.intended_ns);
    let mut out: Vec<Window> = Vec::new();
    for r in spikes {
        match out.last_mut() {
            Some(w) if r.intended_ns <= w.end_ns => {
                w.end_ns = w.end_ns.max(r.done_ns);
                w.peak_ns = w.peak_ns.max(r.corrected());
                w.requests += 1;
            }
            _ => out.push(Window {
                start_ns: r.intended_ns,
                end_ns: r.done_ns,
                peak_ns: r.corrected(),
                requests: 1,
                phase: r.phase,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(intended: u64, done: u64) -> RequestTimes {
        RequestTimes {
            intended_ns: intended,
            sent_ns: intended,
            done_ns: done,
            connection: 0,
            phase: 0,
        }
    }

    #[test]
    fn overlapping_spikes_form_one_episode() {
        let reqs = [
            req(0, 10),          // fast
            req(100, 5_100),     // spike
            req(200, 5_100),     // same stall
            req(300, 5_200),     // same stall
            req(10_000, 10_010), // fast
            req(20_000, 26_000), // second stall
        ];
        let eps = episodes(&reqs, 1_000);
        assert_eq!(eps.len(), 2);
        assert_eq!(eps[0].requests, 3);
        assert_eq!((eps[0].start_ns, eps[0].end_ns), (100, 5_200));
        assert_eq!(eps[0].peak_ns, 5_000);
        assert_eq!(eps[1].peak_ns, 6_000);
    }

    #[test]
    fn late_sends_are_not_server_spikes() {
        let late = RequestTimes {
            intended_ns: 0,
            sent_ns: 5_000,
            done_ns: 5_100,
            connection: 0,
            phase: 0,
        };
        assert!(episodes(&[late], 1_000).is_empty());
    }

    #[test]
    fn no_spikes_no_episodes() {
        assert!(episodes(&[req(0, 10), req(5, 20)], 1_000).is_empty());
    }

    #[test]
    fn threshold_scales_with_the_median_with_a_floor() {
        let mut d = Distribution::new();
        for _ in 0..1000 {
            d.record(50_000);
        }
        let t = default_threshold(&d).expect("threshold");
        assert!((2_040_000..=2_060_000).contains(&t), "{t}");
        let mut slow = Distribution::new();
        for _ in 0..1000 {
            slow.record(10_000_000);
        }
        let t = default_threshold(&slow).expect("threshold");
        assert!((49_000_000..=51_000_000).contains(&t), "{t}");
    }
}
