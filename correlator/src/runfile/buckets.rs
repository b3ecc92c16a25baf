//! Bucket rows (epoch, counts) as an epoch column and one per counter in
//! the compact format (see [`crate::columnar`]); rows in JSON, where short
//! rows of older files read zero-padded ([`super::rows_padded`]).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::BucketRow;
use crate::columnar::{at, steps, unsteps};
use correlator_common::NUM_COUNTERS;

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct Columns {
    epoch_steps: Vec<i64>,
    counters: Vec<Vec<u64>>,
}

pub fn serialize<S: Serializer>(rows: &[BucketRow], s: S) -> Result<S::Ok, S::Error> {
    if s.is_human_readable() {
        return rows.serialize(s);
    }
    Columns {
        epoch_steps: steps(rows.iter().map(|r| r.0)),
        counters: (0..NUM_COUNTERS)
            .map(|k| rows.iter().map(|r| r.1[k]).collect())
            .collect(),
    }
    .serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<BucketRow>, D::Error> {
    if d.is_human_readable() {
        return super::rows_padded(d);
    }
    let c = Columns::deserialize(d)?;
    if c.counters.len() > NUM_COUNTERS {
        return Err(serde::de::Error::custom(format!(
            "bucket rows with {} counters; this correlator knows {NUM_COUNTERS}",
            c.counters.len()
        )));
    }
    Ok(unsteps(&c.epoch_steps)
        .into_iter()
        .enumerate()
        .map(|(i, epoch)| {
            let mut counts = [0; NUM_COUNTERS];
            for (n, col) in counts.iter_mut().zip(&c.counters) {
                *n = at(col, i);
            }
            (epoch, counts)
        })
        .collect())
}
