//! Reads by offset (`POST /api/v1/fetch`) and the partitions written since
//! a time (`POST /api/v1/partitions/changed`). An offset is a message's
//! `seq`, drawn per partition under the partition lock by every push, so
//! offsets cost the push path nothing. Reads take no lease and move no
//! cursor. The call is checked here; `sql/functions/reads.sql` reads.

use queen_wire::{ChangedPartition, ChangedPartitions, PartitionsChanged};
pub use queen_wire::{FetchAnswer, FetchEntry, Fetched, FetchedRecord};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::push::DEFAULT_PARTITION;
use crate::wire::{self, bad_request, Fields, Kind};
use crate::EngineError;

/// Entries per fetch call, at most (the Python client sends up to 1000).
pub const MAX_FETCH_ENTRIES: usize = 1024;
/// An entry's byte budget when the call names none.
pub(crate) const DEFAULT_ENTRY_BYTES: i64 = 1024 * 1024;
/// The call's byte budget when it names none, and its ceiling.
pub(crate) const DEFAULT_CALL_BYTES: i64 = 8 * 1024 * 1024;
pub(crate) const MAX_CALL_BYTES: i64 = 64 * 1024 * 1024;
/// Records per entry per call, at most; the client asks again for the rest.
pub(crate) const MAX_RECORDS: i32 = 1000;
/// Partitions per page of partitions/changed, at most (and by default).
pub const MAX_CHANGED_PAGE: i32 = 1000;

/// One page request of partitions/changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedEntry {
    /// The queue.
    pub queue: String,
    /// Partitions per page, 1 to 1000.
    pub limit: Option<i32>,
    /// Only partitions written at or after this ISO-8601 time.
    pub since: Option<String>,
    /// The `next` of the previous page.
    pub after: Option<Uuid>,
}

fn entries<'a>(body: &'a str, what: &str) -> Result<(Fields<'a>, Vec<&'a RawValue>), EngineError> {
    if wire::has_nul_escape(body) {
        return Err(bad_request("body", "must not contain NUL (\\u0000)"));
    }
    let raw: &RawValue =
        serde_json::from_str(body).map_err(|_| bad_request("body", "must be a JSON object"))?;
    let fields = wire::fields(raw).ok_or_else(|| bad_request("body", "must be a JSON object"))?;
    let list = fields
        .get("entries")
        .copied()
        .and_then(wire::elements)
        .ok_or_else(|| bad_request("entries", &format!("must be an array of {what}")))?;
    if list.len() > MAX_FETCH_ENTRIES {
        return Err(bad_request("entries", &format!("holds more than {MAX_FETCH_ENTRIES} entries")));
    }
    Ok((fields, list))
}

fn text(fields: &Fields<'_>, name: &str, f: &str) -> Result<Option<String>, EngineError> {
    match fields.get(name) {
        None => Ok(None),
        Some(v) if wire::kind(v) == Kind::Null => Ok(None),
        Some(v) if wire::kind(v) == Kind::String => Ok(Some(wire::string(v)?)),
        Some(_) => Err(bad_request(&format!("{f}.{name}"), "must be a string")),
    }
}

/// An optional integer within `range`.
fn int(
    fields: &Fields<'_>,
    name: &str,
    f: &str,
    range: std::ops::RangeInclusive<i64>,
) -> Result<Option<i64>, EngineError> {
    match fields.get(name) {
        None => Ok(None),
        Some(v) if wire::kind(v) == Kind::Null => Ok(None),
        Some(v) => match v.get().parse::<i64>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(bad_request(
                &format!("{f}.{name}"),
                &format!("must be an integer from {} to {}", range.start(), range.end()),
            )),
        },
    }
}

fn queue(fields: &Fields<'_>, f: &str) -> Result<String, EngineError> {
    match text(fields, "queue", f)? {
        Some(q) if !q.is_empty() && q.len() <= 255 => Ok(q),
        _ => Err(bad_request(&format!("{f}.queue"), "must be a queue name (1 to 255 bytes)")),
    }
}

fn entry_object<'a>(raw: &'a RawValue, f: &str) -> Result<Fields<'a>, EngineError> {
    wire::fields(raw).ok_or_else(|| bad_request(f, "must be an object"))
}

/// Decodes a fetch call: its entries and the call's byte budget.
pub(crate) fn decode_fetch(body: &str) -> Result<(Vec<FetchEntry>, Option<i64>), EngineError> {
    let (fields, list) = entries(body, "{queue, partition, offset, maxBytes}")?;
    let call_max = int(&fields, "maxBytes", "body", 1..=MAX_CALL_BYTES)?;
    let decoded = list
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let f = format!("entries[{i}]");
            let e = entry_object(raw, &f)?;
            Ok(FetchEntry {
                queue: queue(&e, &f)?,
                partition: text(&e, "partition", &f)?.unwrap_or_else(|| DEFAULT_PARTITION.to_owned()),
                offset: int(&e, "offset", &f, 0..=i64::MAX)?
                    .ok_or_else(|| bad_request(&format!("{f}.offset"), "is required (an integer >= 0)"))?,
                max_bytes: int(&e, "maxBytes", &f, 1..=i64::MAX)?,
            })
        })
        .collect::<Result<Vec<_>, EngineError>>()?;
    Ok((decoded, call_max))
}

/// Decodes a partitions/changed call.
pub(crate) fn decode_changed(body: &str) -> Result<Vec<ChangedEntry>, EngineError> {
    let (_, list) = entries(body, "{queue, limit, since, after}")?;
    list.iter()
        .enumerate()
        .map(|(i, raw)| {
            let f = format!("entries[{i}]");
            let e = entry_object(raw, &f)?;
            let after = match text(&e, "after", &f)? {
                None => None,
                Some(a) => Some(Uuid::parse_str(&a).map_err(|_| {
                    bad_request(&format!("{f}.after"), "must be the `next` of a previous page")
                })?),
            };
            Ok(ChangedEntry {
                queue: queue(&e, &f)?,
                // Any page size is clamped to the ceiling, as KV pages are.
                limit: int(&e, "limit", &f, i64::MIN..=i64::MAX)?
                    .map(|l| l.clamp(1, i64::from(MAX_CHANGED_PAGE)) as i32),
                since: match text(&e, "since", &f)?.filter(|s| !s.is_empty()) {
                    Some(s) if !starts_with_a_date(&s) => {
                        return Err(bad_request(&format!("{f}.since"), "must be an ISO-8601 time"))
                    }
                    since => since,
                },
                after,
            })
        })
        .collect()
}

/// `YYYY-MM-DD` first: PostgreSQL would also take words such as `now`,
/// which are not ISO-8601. The rest is PostgreSQL's to parse.
fn starts_with_a_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..10]
            .iter()
            .enumerate()
            .all(|(i, c)| if i == 4 || i == 7 { *c == b'-' } else { c.is_ascii_digit() })
}

/// What `queen.fetch` answers: per entry its error, high watermark, log
/// start and record count; per record, entry after entry, its columns.
pub(crate) struct FetchColumns {
    errors: Vec<Option<String>>,
    high_watermarks: Vec<i64>,
    log_starts: Vec<i64>,
    record_counts: Vec<i32>,
    offsets: Vec<i64>,
    transaction_ids: Vec<String>,
    payloads: Vec<String>,
    times: Vec<String>,
}

impl FetchColumns {
    pub(crate) fn read(row: &tokio_postgres::Row) -> Result<Self, EngineError> {
        Ok(FetchColumns {
            errors: row.try_get(0)?,
            high_watermarks: row.try_get(1)?,
            log_starts: row.try_get(2)?,
            record_counts: row.try_get(3)?,
            offsets: row.try_get(4)?,
            transaction_ids: row.try_get(5)?,
            payloads: row.try_get(6)?,
            times: row.try_get(7)?,
        })
    }

    /// Each entry's answer; `open` opens a payload sealed at rest.
    pub(crate) fn entries(
        self,
        open: impl Fn(String) -> Result<String, EngineError>,
    ) -> Result<Vec<Fetched>, EngineError> {
        let n = self.errors.len();
        let records = self.offsets.len();
        if self.high_watermarks.len() != n
            || self.log_starts.len() != n
            || self.record_counts.len() != n
            || self.transaction_ids.len() != records
            || self.payloads.len() != records
            || self.times.len() != records
        {
            return Err(EngineError::Protocol("a fetch answered unequal columns".into()));
        }
        let mut rows = self.offsets.into_iter().zip(self.transaction_ids).zip(self.payloads).zip(self.times);
        let mut out = Vec::with_capacity(n);
        for (((error, high_watermark), log_start_offset), count) in
            self.errors.into_iter().zip(self.high_watermarks).zip(self.log_starts).zip(self.record_counts)
        {
            let count = usize::try_from(count).map_err(|e| EngineError::Protocol(e.to_string()))?;
            let mut entry_records = Vec::with_capacity(count);
            for (((offset, transaction_id), payload), ts) in rows.by_ref().take(count) {
                let payload = RawValue::from_string(open(payload)?)
                    .map_err(|e| EngineError::Protocol(format!("a fetched payload: {e}")))?;
                entry_records.push(FetchedRecord { offset, transaction_id, payload, ts });
            }
            if entry_records.len() != count {
                return Err(EngineError::Protocol("a fetch answered fewer records than it counted".into()));
            }
            out.push(Fetched { error, high_watermark, log_start_offset, records: entry_records });
        }
        Ok(out)
    }
}

/// A partitions/changed entry whose queue does not exist (Kafka's name).
const UNKNOWN_TOPIC: &str = "UNKNOWN_TOPIC_OR_PARTITION";

/// What `queen.partitions_changed` answers: the safe time, per entry whether
/// its queue exists and how many rows it gave (its limit, and one more when
/// more follow), then every row's fields, entry after entry.
pub(crate) struct ChangedColumns {
    safe_time: String,
    known: Vec<bool>,
    sizes: Vec<i32>,
    names: Vec<String>,
    ids: Vec<Uuid>,
    last_offsets: Vec<i64>,
    log_starts: Vec<i64>,
    last_writes: Vec<Option<String>>,
}

impl ChangedColumns {
    pub(crate) fn read(row: &tokio_postgres::Row) -> Result<Self, EngineError> {
        Ok(ChangedColumns {
            safe_time: row.try_get(0)?,
            known: row.try_get(1)?,
            sizes: row.try_get(2)?,
            names: row.try_get(3)?,
            ids: row.try_get(4)?,
            last_offsets: row.try_get(5)?,
            log_starts: row.try_get(6)?,
            last_writes: row.try_get(7)?,
        })
    }

    /// The answer, each entry's page cut at its `limits` entry: a page that
    /// got one row more has a next page, after its last kept row.
    pub(crate) fn answer(self, limits: &[i32]) -> Result<PartitionsChanged, EngineError> {
        let n = self.names.len();
        let sized: usize = self.sizes.iter().map(|&s| usize::try_from(s).unwrap_or(0)).sum();
        let columns =
            [self.ids.len(), self.last_offsets.len(), self.log_starts.len(), self.last_writes.len()];
        if self.known.len() != limits.len()
            || self.sizes.len() != limits.len()
            || sized != n
            || columns.iter().any(|&c| c != n)
        {
            return Err(EngineError::Protocol(format!(
                "partitions_changed answered {} entries and {n} rows for {} entries",
                self.known.len(),
                limits.len()
            )));
        }
        let mut rows = self
            .names
            .into_iter()
            .zip(self.ids)
            .zip(self.last_offsets)
            .zip(self.log_starts)
            .zip(self.last_writes)
            .map(|((((name, id), last_offset), log_start), last_write_at)| ChangedPartition {
                name,
                id: id.to_string(),
                last_offset,
                log_start,
                last_write_at,
            });
        let mut entries = Vec::with_capacity(limits.len());
        for ((known, size), limit) in self.known.into_iter().zip(self.sizes).zip(limits) {
            if !known {
                entries.push(ChangedPartitions {
                    error: Some(UNKNOWN_TOPIC.to_owned()),
                    partitions: Vec::new(),
                    next: None,
                });
                continue;
            }
            let mut partitions: Vec<ChangedPartition> =
                rows.by_ref().take(usize::try_from(size).unwrap_or(0)).collect();
            let more = size > *limit;
            partitions.truncate(usize::try_from(*limit).unwrap_or(0));
            let next = if more { partitions.last().map(|p| p.id.clone()) } else { None };
            entries.push(ChangedPartitions { error: None, partitions, next });
        }
        Ok(PartitionsChanged { safe_time: self.safe_time, entries })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn field(r: Result<impl std::fmt::Debug, EngineError>) -> String {
        match r {
            Err(EngineError::Rejected { status: 400, body }) => {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                v["field"].as_str().unwrap().to_owned()
            }
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn fetch_entries_decode_with_their_defaults() {
        let (e, max) = decode_fetch(r#"{"entries":[{"queue":"q","offset":3},{"queue":"q","partition":"p","offset":0,"maxBytes":10}],"maxBytes":100}"#).unwrap();
        assert_eq!(max, Some(100));
        assert_eq!(
            e[0],
            FetchEntry { queue: "q".into(), partition: "Default".into(), offset: 3, max_bytes: None }
        );
        assert_eq!(e[1].max_bytes, Some(10));
    }

    #[test]
    fn bad_fetch_input_names_its_field() {
        assert_eq!(field(decode_fetch("[]")), "body");
        assert_eq!(field(decode_fetch(r#"{"entries":[{"offset":1}]}"#)), "entries[0].queue");
        assert_eq!(field(decode_fetch(r#"{"entries":[{"queue":"q"}]}"#)), "entries[0].offset");
        assert_eq!(field(decode_fetch(r#"{"entries":[{"queue":"q","offset":-1}]}"#)), "entries[0].offset");
        assert_eq!(field(decode_fetch(r#"{"entries":[{"queue":"q","offset":1.5}]}"#)), "entries[0].offset");
        assert_eq!(field(decode_changed(r#"{"entries":[{"queue":"q","after":"x"}]}"#)), "entries[0].after");
        assert_eq!(field(decode_changed(r#"{"entries":[{"queue":"q","since":"now"}]}"#)), "entries[0].since");
        assert!(
            decode_changed(r#"{"entries":[{"queue":"q","since":"2026-12-03T21:57:06.204740Z"}]}"#).is_ok()
        );
        let many = format!("{{\"entries\":[{}]}}", vec![r#"{"queue":"q","offset":0}"#; 1025].join(","));
        assert_eq!(field(decode_fetch(&many)), "entries");
    }
}
