//! Slow requests and latency buckets as columns in the compact run file
//! (see [`crate::columnar`]).

use serde::{Deserialize, Serialize};

use super::recorder::{LatencyBucket, RequestTimes};
use crate::columnar::{at, rows_or_columns, steps, unsteps};

rows_or_columns!(requests, RequestTimes, RequestColumns);
rows_or_columns!(latency_buckets, LatencyBucket, LatencyBucketColumns);

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestColumns {
    intended_steps: Vec<i64>,
    /// `sent_ns - intended_ns` and `done_ns - sent_ns` (wrapping).
    send_delay: Vec<u64>,
    service: Vec<u64>,
    connection: Vec<u32>,
    phase: Vec<u32>,
}

impl From<&[RequestTimes]> for RequestColumns {
    fn from(rows: &[RequestTimes]) -> Self {
        Self {
            intended_steps: steps(rows.iter().map(|r| r.intended_ns)),
            send_delay: rows
                .iter()
                .map(|r| r.sent_ns.wrapping_sub(r.intended_ns))
                .collect(),
            service: rows
                .iter()
                .map(|r| r.done_ns.wrapping_sub(r.sent_ns))
                .collect(),
            connection: rows.iter().map(|r| r.connection).collect(),
            phase: rows.iter().map(|r| r.phase).collect(),
        }
    }
}

impl RequestColumns {
    fn into_rows(self) -> Vec<RequestTimes> {
        unsteps(&self.intended_steps)
            .into_iter()
            .enumerate()
            .map(|(i, intended_ns)| {
                let sent_ns = intended_ns.wrapping_add(at(&self.send_delay, i));
                RequestTimes {
                    intended_ns,
                    sent_ns,
                    done_ns: sent_ns.wrapping_add(at(&self.service, i)),
                    connection: at(&self.connection, i),
                    phase: at(&self.phase, i),
                }
            })
            .collect()
    }
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencyBucketColumns {
    count: Vec<u32>,
    max_ns: Vec<u64>,
    sum_ns: Vec<u64>,
}

impl From<&[LatencyBucket]> for LatencyBucketColumns {
    fn from(rows: &[LatencyBucket]) -> Self {
        Self {
            count: rows.iter().map(|r| r.count).collect(),
            max_ns: rows.iter().map(|r| r.max_ns).collect(),
            sum_ns: rows.iter().map(|r| r.sum_ns).collect(),
        }
    }
}

impl LatencyBucketColumns {
    fn into_rows(self) -> Vec<LatencyBucket> {
        (0..self.count.len())
            .map(|i| LatencyBucket {
                count: at(&self.count, i),
                max_ns: at(&self.max_ns, i),
                sum_ns: at(&self.sum_ns, i),
            })
            .collect()
    }
}
