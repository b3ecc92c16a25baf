//! Bucket rows (epoch, counts) as an epoch column and one per counter in
//! the compact format (see [`crate::columnar`]); rows in JSON, where short
//! rows of older files read zero-padded ([`super::rows_padded`]).

use serde::{Deserializer, Serialize, Serializer, de::MapAccess};

use super::BucketRow;
use crate::columnar::{ArrayColumns, StreamedRows, fill_steps, steps};
use correlator_common::NUM_COUNTERS;

#[derive(Serialize)]
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
    // Streamed into the rows: read as columns first, a minute's buckets
    // (110,000 rows of 240 bytes) were held twice while loading.
    crate::columnar::streamed_rows(d)
}

/// Counters written by a newer version are an error (rows written with
/// fewer, by an older one, read as zeros).
impl StreamedRows for BucketRow {
    fn blank() -> Self {
        (0, [0; NUM_COUNTERS])
    }

    fn column<'de, A: MapAccess<'de>>(
        key: &str,
        rows: &mut Vec<Self>,
        map: &mut A,
    ) -> Result<(), A::Error> {
        match key {
            "epoch_steps" => fill_steps(rows, map, |r: &mut Self, e| r.0 = e),
            "counters" => map.next_value_seed(ArrayColumns {
                rows,
                slots: |r: &mut Self| &mut r.1[..],
                beyond: Some("bucket rows"),
            }),
            _ => map.next_value::<serde::de::IgnoredAny>().map(drop),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Holder {
        #[serde(with = "super")]
        rows: Vec<BucketRow>,
    }

    #[test]
    fn rows_round_trip_through_columns() {
        let mut a = [0; NUM_COUNTERS];
        a[0] = 3;
        a[NUM_COUNTERS - 1] = u64::MAX;
        let mut b = [0; NUM_COUNTERS];
        b[7] = 1 << 40;
        let rows = vec![(10, a), (12, b), (11, [0; NUM_COUNTERS])];
        let bytes = rmp_serde::to_vec_named(&Holder { rows: rows.clone() }).expect("write");
        let back: Holder = rmp_serde::from_slice(&bytes).expect("read");
        assert_eq!(back.rows, rows);
    }

    #[test]
    fn older_files_read_zeros_and_newer_counters_are_an_error() {
        #[derive(Serialize)]
        struct Written {
            rows: Columns,
        }
        let with = |n: usize| {
            rmp_serde::to_vec_named(&Written {
                rows: Columns {
                    epoch_steps: vec![4, 1],
                    counters: vec![vec![2, 3]; n],
                },
            })
            .expect("write")
        };
        let older: Holder = rmp_serde::from_slice(&with(2)).expect("older file");
        let mut row = [0; NUM_COUNTERS];
        row[..2].copy_from_slice(&[2, 2]);
        assert_eq!(older.rows[0], (4, row));
        assert_eq!(older.rows[1].0, 5);
        let newer = rmp_serde::from_slice::<Holder>(&with(NUM_COUNTERS + 1));
        let err = newer
            .err()
            .expect("a counter this version does not know")
            .to_string();
        assert!(err.contains("bucket rows with more than"), "{err}");
    }
}
