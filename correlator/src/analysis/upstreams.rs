//! The target's upstreams, each with the distribution of its reply times
//! inside and outside the episodes: "its replies took 21 ms in the
//! episodes, p99 0.4 ms outside them".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Episode;
use crate::timeline::upstreams::UpstreamExchange;

/// One upstream's reply times (from the request's send to the reply's
/// arrival in the socket, or its read where the arrival was not seen).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSummary {
    /// `address:port`.
    pub peer: String,
    pub exchanges: u64,
    /// Exchanges whose reply's arrival was seen (the rest are timed to
    /// the server's read of the reply).
    pub arrivals_seen: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Exchanges in flight during an episode, and the longest of them.
    pub in_episodes: u64,
    pub in_episodes_max_ns: u64,
    /// The others' 99th percentile (None: fewer than 100 of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_p99_ns: Option<u64>,
}

/// Per upstream, most exchanges first.
pub fn summarize(exchanges: &[UpstreamExchange], episodes: &[Episode]) -> Vec<UpstreamSummary> {
    let mut windows: Vec<(u64, u64)> = episodes
        .iter()
        .map(|e| (e.window.start_ns, e.window.end_ns))
        .collect();
    windows.sort_unstable();
    let in_episode = |u: &UpstreamExchange| {
        let (a, b) = (u.sent_ns, u.replied_ns());
        // Windows starting before the reply; the last of them that could
        // still overlap is found by scanning back (episodes are few).
        let upto = windows.partition_point(|w| w.0 < b);
        windows[..upto].iter().rev().any(|w| w.1 > a)
    };
    let mut by_peer: BTreeMap<&str, Vec<&UpstreamExchange>> = BTreeMap::new();
    for u in exchanges {
        by_peer.entry(u.peer.as_str()).or_default().push(u);
    }
    let mut out: Vec<UpstreamSummary> = by_peer
        .into_iter()
        .map(|(peer, list)| {
            let mut all: Vec<u64> = list.iter().map(|u| u.reply_ns()).collect();
            all.sort_unstable();
            let (inside, outside): (Vec<&UpstreamExchange>, Vec<&UpstreamExchange>) =
                list.iter().partition(|u| in_episode(u));
            let mut out_times: Vec<u64> = outside.iter().map(|u| u.reply_ns()).collect();
            out_times.sort_unstable();
            UpstreamSummary {
                peer: peer.to_string(),
                exchanges: all.len() as u64,
                arrivals_seen: list.iter().filter(|u| u.arrived_ns.is_some()).count() as u64,
                p50_ns: quantile(&all, 0.5),
                p99_ns: quantile(&all, 0.99),
                max_ns: all.last().copied().unwrap_or(0),
                in_episodes: inside.len() as u64,
                in_episodes_max_ns: inside.iter().map(|u| u.reply_ns()).max().unwrap_or(0),
                outside_p99_ns: (out_times.len() >= 100).then(|| quantile(&out_times, 0.99)),
            }
        })
        .collect();
    out.sort_by(|a, b| b.exchanges.cmp(&a.exchanges).then(a.peer.cmp(&b.peer)));
    out
}

/// The nearest-rank quantile of sorted values (0 when empty).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(sent: u64, reply: u64) -> UpstreamExchange {
        UpstreamExchange {
            tid: 1,
            reader_tid: 1,
            peer: "127.0.0.1:9".into(),
            conn: 0,
            bytes_out: 1,
            sent_ns: sent,
            arrived_ns: Some(sent + reply),
            read_ns: sent + reply + 10,
        }
    }

    #[test]
    fn replies_in_flight_during_an_episode_are_told_from_the_rest() {
        // 199 fast exchanges, 1 slow one inside the only episode.
        let mut list: Vec<UpstreamExchange> =
            (0..199).map(|i| exchange(1_000_000 * i, 100_000)).collect();
        list.push(exchange(500_000_000, 30_000_000));
        let ep = Episode {
            window: super::super::episodes::Window {
                start_ns: 510_000_000,
                end_ns: 540_000_000,
                peak_ns: 30_000_000,
                requests: 1,
                phase: 0,
            },
            duration_ns: 30_000_000,
            excess: BTreeMap::new(),
            account: crate::analysis::account::TimeAccount::default(),
            tail_requests: 1,
            code_path: None,
        };
        let s = &summarize(&list, &[ep])[0];
        assert_eq!(s.exchanges, 200);
        assert_eq!(s.in_episodes, 1);
        assert_eq!(s.in_episodes_max_ns, 30_000_000);
        assert_eq!(s.outside_p99_ns, Some(100_000));
        assert_eq!(s.max_ns, 30_000_000);
        assert_eq!(s.p50_ns, 100_000);
    }
}
