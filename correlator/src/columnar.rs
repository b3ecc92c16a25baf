//! Long record lists as columns in binary formats (the compact run file).
//!
//! Row by row, a record's timestamps are most of its bytes and the least
//! compressible (nanoseconds since boot); as columns with each timestamp
//! stored as the step from the one before and each end as a length, the
//! values are small and alike, and the compressor does the rest
//! (docs/run-file.md has the sizes). Human-readable formats (JSON) keep
//! rows, which is what the docs describe and what other tools read.
//!
//! A column missing or short in a file (a field added since) reads as the
//! field's default. The column types live beside their row types
//! (`timeline::columns`, `latency::columns`).

/// Steps between successive values (wrapping: any order round-trips).
pub fn steps(values: impl Iterator<Item = u64>) -> Vec<i64> {
    let mut last = 0u64;
    values
        .map(|v| {
            let d = v.wrapping_sub(last) as i64;
            last = v;
            d
        })
        .collect()
}

/// The values [`steps`] came from.
pub fn unsteps(steps: &[i64]) -> Vec<u64> {
    let mut last = 0u64;
    steps
        .iter()
        .map(|&d| {
            last = last.wrapping_add(d as u64);
            last
        })
        .collect()
}

/// Row `i` of a column, or the default where the column is short.
pub fn at<T: Clone + Default>(col: &[T], i: usize) -> T {
    col.get(i).cloned().unwrap_or_default()
}

/// Defines `pub mod $module` for `#[serde(with = ...)]` on a `Vec<$row>`:
/// rows in human-readable formats, `$cols` (`From<&[$row]>`, Serialize)
/// otherwise, read back through `$cols::into_rows` or, with `streamed`,
/// straight into the rows ([`StreamedRows`]).
macro_rules! rows_or_columns {
    ($module:ident, $row:ty, $cols:ty) => {
        $crate::columnar::rows_or_columns!(@ $module, $row, $cols,
            d => <$cols>::deserialize(d).map(<$cols>::into_rows));
    };
    (streamed $module:ident, $row:ty, $cols:ty) => {
        $crate::columnar::rows_or_columns!(@ $module, $row, $cols,
            d => $crate::columnar::streamed_rows::<D, $row>(d));
    };
    (@ $module:ident, $row:ty, $cols:ty, $d:ident => $columns:expr) => {
        pub mod $module {
            use super::*;
            use serde::{Deserializer, Serializer};
            pub fn serialize<S: Serializer>(rows: &[$row], s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    rows.serialize(s)
                } else {
                    <$cols>::from(rows).serialize(s)
                }
            }
            pub fn deserialize<'de, D: Deserializer<'de>>($d: D) -> Result<Vec<$row>, D::Error> {
                if $d.is_human_readable() {
                    Vec::<$row>::deserialize($d)
                } else {
                    $columns
                }
            }
        }
    };
}
pub(crate) use rows_or_columns;

/// Rows that read their columns one element at a time, so a long list is
/// never held twice (as columns and as rows) while it loads: each column
/// is streamed straight into the rows, which the first column creates.
pub trait StreamedRows: Sized {
    /// A row before any column filled it.
    fn blank() -> Self;
    /// Reads the column named `key` from `map` into `rows` (an unknown
    /// key: skipped, a column written by a newer version).
    fn column<'de, A: serde::de::MapAccess<'de>>(
        key: &str,
        rows: &mut Vec<Self>,
        map: &mut A,
    ) -> Result<(), A::Error>;
    /// Once every column is in: fields derived from others.
    fn finish(_rows: &mut [Self]) {}
}

/// One column streamed into the rows through `set(row, value)`.
pub struct Column<'a, R, T, F> {
    pub rows: &'a mut Vec<R>,
    pub set: F,
    pub marker: std::marker::PhantomData<T>,
}

/// Reads the next value of `map` as a column of `T` into `rows`.
pub fn fill<'de, A, R, T, F>(rows: &mut Vec<R>, map: &mut A, set: F) -> Result<(), A::Error>
where
    A: serde::de::MapAccess<'de>,
    R: StreamedRows,
    T: serde::Deserialize<'de>,
    F: FnMut(&mut R, T),
{
    map.next_value_seed(Column {
        rows,
        set,
        marker: std::marker::PhantomData::<T>,
    })
}

/// Reads the next value of `map` as a column of [`steps`] into `rows`,
/// through `set(row, value)` with the values they came from.
pub fn fill_steps<'de, A, R>(
    rows: &mut Vec<R>,
    map: &mut A,
    mut set: impl FnMut(&mut R, u64),
) -> Result<(), A::Error>
where
    A: serde::de::MapAccess<'de>,
    R: StreamedRows,
{
    let mut last = 0u64;
    fill(rows, map, move |r: &mut R, d: i64| {
        last = last.wrapping_add(d as u64);
        set(r, last);
    })
}

impl<'de, R, T, F> serde::de::DeserializeSeed<'de> for Column<'_, R, T, F>
where
    R: StreamedRows,
    T: serde::Deserialize<'de>,
    F: FnMut(&mut R, T),
{
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, R, T, F> serde::de::Visitor<'de> for Column<'_, R, T, F>
where
    R: StreamedRows,
    T: serde::Deserialize<'de>,
    F: FnMut(&mut R, T),
{
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a column")
    }
    fn visit_seq<S: serde::de::SeqAccess<'de>>(mut self, mut seq: S) -> Result<(), S::Error> {
        if self.rows.is_empty() {
            // The first column sizes the rows exactly: grown by doubling,
            // half a million rows were copied at each step and the old
            // buffers stayed resident (the report's peak memory). A length
            // no memory can hold is a malformed file, not an abort.
            let len = seq.size_hint().unwrap_or(0);
            self.rows.try_reserve_exact(len).map_err(|_| {
                serde::de::Error::custom(format_args!(
                    "a column of {len} rows does not fit in memory"
                ))
            })?;
        }
        let mut i = 0;
        while let Some(v) = seq.next_element::<T>()? {
            if i == self.rows.len() {
                self.rows.push(R::blank());
            }
            (self.set)(&mut self.rows[i], v);
            i += 1;
        }
        Ok(())
    }
}

/// A list of columns, the k-th filling element k of every row's array
/// (`slots(row)`): account slots, bucket counters.
pub struct ArrayColumns<'a, R> {
    pub rows: &'a mut Vec<R>,
    pub slots: fn(&mut R) -> &mut [u64],
    /// Columns beyond the array: skipped when None (a newer version's
    /// additions), else an error naming what they are.
    pub beyond: Option<&'static str>,
}

impl<'de, R: StreamedRows> serde::de::DeserializeSeed<'de> for ArrayColumns<'_, R> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, R: StreamedRows> serde::de::Visitor<'de> for ArrayColumns<'_, R> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of columns")
    }
    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<(), S::Error> {
        let slots = self.slots;
        let width = slots(&mut R::blank()).len();
        for k in 0.. {
            let column = Column {
                rows: &mut *self.rows,
                set: move |r: &mut R, v: u64| {
                    if let Some(slot) = slots(r).get_mut(k) {
                        *slot = v;
                    }
                },
                marker: std::marker::PhantomData,
            };
            if seq.next_element_seed(column)?.is_none() {
                break;
            }
            if let Some(what) = self.beyond.filter(|_| k >= width) {
                return Err(serde::de::Error::custom(format_args!(
                    "{what} with more than {width} columns; this correlator knows {width}"
                )));
            }
        }
        Ok(())
    }
}

/// Deserializes a columns map into rows of `R` (see [`StreamedRows`]).
pub fn streamed_rows<'de, D: serde::Deserializer<'de>, R: StreamedRows>(
    d: D,
) -> Result<Vec<R>, D::Error> {
    struct Rows<R>(std::marker::PhantomData<R>);
    impl<'de, R: StreamedRows> serde::de::Visitor<'de> for Rows<R> {
        type Value = Vec<R>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of columns")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Vec<R>, A::Error> {
            let mut rows = Vec::new();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                R::column(&key, &mut rows, &mut map)?;
            }
            R::finish(&mut rows);
            Ok(rows)
        }
    }
    d.deserialize_map(Rows(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_round_trip_in_any_order() {
        let v = vec![5, 3, u64::MAX, 0, 1 << 63, 7];
        assert_eq!(unsteps(&steps(v.iter().copied())), v);
    }
}
