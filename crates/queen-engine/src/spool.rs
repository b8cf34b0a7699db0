//! The push spool: while PostgreSQL cannot be reached, or pushes are paused
//! for maintenance, a push is appended to a file, `fsync`ed, and only then
//! answered 201 `buffered`; a drainer pushes the spooled records into
//! PostgreSQL, in arrival order, once it can (Queen's `FILE_BUFFER_DIR`).
//!
//! **Layout.** One directory per database (`<dir>/<host_port_db>`), so a
//! broker never drains into another database what was spooled for one.
//! Each broker holds an exclusive lock on `<broker>.lock` for its life and
//! appends to its segments `<broker>-<seq>.seg`. A record is a frame:
//! `QSP1`, the payload's length and CRC-32 (little endian), the payload
//! (JSON: the checked items, each with its transaction id).
//!
//! **Exactly once.** Every spooled item has a transaction id (the engine
//! draws one for items that came without), and a drained record is pushed
//! with those ids, so the push's dedup refuses what already committed.
//! Records drain in groups (one push, one commit each); after each group
//! its segment's `.done` file records the offset reached (fsynced); a
//! SIGKILL in between replays at most that group, which dedup answers
//! `duplicate`. A segment fully drained is deleted.
//!
//! **Order.** While this broker's spool holds records, its new pushes are
//! spooled too, behind them, so a partition's messages keep the order in
//! which the broker acknowledged them. A broker adopts the segments of a
//! dead one (whose lock it can take) before its own, at start and later.
//!
//! **Damage.** A frame that fails its length or checksum (a torn tail after
//! a crash, or corruption) ends its segment: the records before it are
//! drained, the segment is renamed `.corrupt` for the operator, the status
//! counts it, and nothing crashes. A torn tail was never acknowledged: the
//! 201 goes out only after the fsync.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::Notify;

/// Where and how much to spool.
#[derive(Debug, Clone)]
pub struct SpoolOptions {
    /// The spool's root directory; each database gets a directory in it.
    pub dir: PathBuf,
    /// Past this many bytes of spooled records, a push is answered 503 as
    /// without a spool.
    pub max_bytes: u64,
    /// Items one drained push carries at most (whole records, at least one).
    pub drain_items: usize,
}

/// Why the spool could not take a push.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The spool holds `max_bytes` already.
    #[error("the push spool is full ({0} bytes)")]
    Full(u64),
    /// The file system refused.
    #[error("the push spool cannot be written: {0}")]
    Io(#[from] std::io::Error),
}

pub(crate) const MAGIC: &[u8; 4] = b"QSP1";
pub(crate) const HEADER: usize = 12;
/// A frame longer than this is damage, not a record (bodies are capped far below).
pub(crate) const MAX_RECORD: usize = 1 << 30;

/// One spooled item: a checked push item with its transaction id.
#[derive(Serialize, Deserialize)]
pub(crate) struct SpooledItem {
    pub(crate) queue: String,
    pub(crate) partition: String,
    #[serde(rename = "transactionId")]
    pub(crate) transaction_id: String,
    #[serde(rename = "traceId", skip_serializing_if = "Option::is_none")]
    pub(crate) trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) payload: Option<Box<RawValue>>,
    #[serde(rename = "producerSub", skip_serializing_if = "Option::is_none")]
    pub(crate) producer_sub: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) items: Vec<SpooledItem>,
}

/// A damaged segment, as the status reports it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Damage {
    pub(crate) file: String,
    pub(crate) offset: u64,
    pub(crate) reason: String,
}

#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) records: u64,
    pub(crate) items: u64,
    pub(crate) bytes: u64,
    pub(crate) drained_items: u64,
    pub(crate) failed: u64,
    pub(crate) damage: Vec<Damage>,
}

pub(crate) struct Writer {
    pub(crate) file: Option<File>,
    pub(crate) seq: u64,
}

/// The spool of one engine.
pub(crate) struct Spool {
    pub(crate) dir: PathBuf,
    pub(crate) broker: String,
    pub(crate) max_bytes: u64,
    pub(crate) drain_items: usize,
    pub(crate) _lock: File,
    pub(crate) writer: Mutex<Writer>,
    pub(crate) counts: Mutex<Counts>,
    /// Locks of dead brokers whose segments this one drains.
    pub(crate) adopted: Mutex<BTreeMap<String, File>>,
    pub(crate) db_healthy: AtomicBool,
    pub(crate) draining: AtomicBool,
    pub(crate) wake: Notify,
}

pub(crate) fn lock_name(broker: &str) -> String {
    format!("{broker}.lock")
}

pub(crate) fn segment_name(broker: &str, seq: u64) -> String {
    format!("{broker}-{seq:010}.seg")
}

/// `(broker, seq)` of a segment file name.
pub(crate) fn parse_segment(name: &str) -> Option<(String, u64)> {
    let stem = name.strip_suffix(".seg")?;
    let (broker, seq) = stem.rsplit_once('-')?;
    Some((broker.to_owned(), seq.parse().ok()?))
}

/// The directory name of a database: its hosts, ports and name, readable.
pub(crate) fn database_dir_name(cfg: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = cfg.get_ports().iter().map(u16::to_string).collect();
    let raw = format!("{}_{}_{}", hosts.join(","), ports.join(","), cfg.get_dbname().unwrap_or("postgres"));
    raw.chars().map(|c| if c.is_ascii_alphanumeric() || ".,-_".contains(c) { c } else { '_' }).collect()
}

pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What a segment holds from an offset on: the records, each with the
/// offset after it, and the damage (offset, reason) that ended the read
/// early, if any.
pub(crate) type Frames = (Vec<(Record, u64)>, Option<(u64, String)>);

/// Reads the frames of `file` from `offset`.
pub(crate) fn read_frames(file: &mut File, offset: u64) -> std::io::Result<Frames> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(offset))?;
    file.read_to_end(&mut bytes)?;
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let here = offset + at as u64;
        let rest = &bytes[at..];
        if rest.len() < HEADER {
            return Ok((out, Some((here, format!("a torn frame header ({} bytes)", rest.len())))));
        }
        if &rest[..4] != MAGIC {
            return Ok((out, Some((here, "no frame marker".to_owned()))));
        }
        let len = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let crc = u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]]);
        if len > MAX_RECORD || rest.len() < HEADER + len {
            return Ok((out, Some((here, format!("a torn record ({len} bytes announced)")))));
        }
        let payload = &rest[HEADER..HEADER + len];
        if crc32fast::hash(payload) != crc {
            return Ok((out, Some((here, "a checksum mismatch".to_owned()))));
        }
        match serde_json::from_slice::<Record>(payload) {
            Ok(record) => out.push((record, here + (HEADER + len) as u64)),
            Err(e) => return Ok((out, Some((here, format!("an undecodable record: {e}"))))),
        }
        at += HEADER + len;
    }
    Ok((out, None))
}

pub(crate) fn read_offset(path: &Path) -> u64 {
    fs::read(path)
        .ok()
        .and_then(|b| b.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))))
        .unwrap_or(0)
}

pub(crate) fn write_offset(path: &Path, offset: u64) -> std::io::Result<()> {
    let mut f = OpenOptions::new().create(true).write(true).truncate(false).open(path)?;
    f.write_all(&offset.to_le_bytes())?;
    f.sync_data()
}

impl Spool {
    /// Opens (creating) the database's spool directory, takes this broker's
    /// lock, and adopts the segments of dead brokers.
    pub(crate) fn open(options: &SpoolOptions, database: &str, broker: &str) -> Result<Self, SpoolError> {
        let dir = options.dir.join(database);
        fs::create_dir_all(&dir)?;
        let lock =
            OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(lock_name(broker)))?;
        lock.try_lock().map_err(|e| std::io::Error::other(format!("the spool lock of this broker: {e}")))?;
        let spool = Spool {
            dir,
            broker: broker.to_owned(),
            max_bytes: options.max_bytes,
            drain_items: options.drain_items.max(1),
            _lock: lock,
            writer: Mutex::new(Writer { file: None, seq: 0 }),
            counts: Mutex::new(Counts::default()),
            adopted: Mutex::new(BTreeMap::new()),
            db_healthy: AtomicBool::new(true),
            draining: AtomicBool::new(false),
            wake: Notify::new(),
        };
        spool.adopt_orphans();
        Ok(spool)
    }

    pub(crate) fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes the locks of dead brokers' spools and counts their records.
    pub(crate) fn adopt_orphans(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else { return };
        let mut adopted = self.adopted.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(broker) = name.strip_suffix(".lock") else { continue };
            if broker == self.broker || adopted.contains_key(broker) {
                continue;
            }
            let Ok(file) = OpenOptions::new().write(true).open(entry.path()) else { continue };
            if file.try_lock().is_err() {
                continue; // alive
            }
            let mut records = 0u64;
            let mut items = 0u64;
            let mut bytes = 0u64;
            for (seg, _) in self.segments_of(broker) {
                let path = self.dir.join(&seg);
                let done = read_offset(&self.done_path(&seg));
                if let Ok(mut f) = File::open(&path) {
                    if let Ok((found, _)) = read_frames(&mut f, done) {
                        records += found.len() as u64;
                        items += found.iter().map(|(r, _)| r.items.len() as u64).sum::<u64>();
                    }
                    bytes += f.metadata().map(|m| m.len()).unwrap_or(0).saturating_sub(done);
                }
            }
            tracing::info!(broker, records, items, "adopting the push spool of a stopped broker");
            let mut c = self.counts();
            c.records += records;
            c.items += items;
            c.bytes += bytes;
            drop(c);
            adopted.insert(broker.to_owned(), file);
        }
    }

    /// The segments of `broker`, in order.
    pub(crate) fn segments_of(&self, broker: &str) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        let (b, seq) = parse_segment(&name)?;
                        (b == broker).then_some((name, seq))
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by_key(|(_, seq)| *seq);
        out
    }

    pub(crate) fn done_path(&self, segment: &str) -> PathBuf {
        self.dir.join(format!("{segment}.done"))
    }

    /// True while records wait: new pushes queue behind them.
    pub(crate) fn holds_records(&self) -> bool {
        self.counts().records > 0
    }

    /// Appends one push's items, durably; the caller answers 201 after it.
    pub(crate) fn append(&self, items: &[SpooledItem]) -> Result<(), SpoolError> {
        let payload = serde_json::to_vec(&RecordRef { items }).map_err(std::io::Error::other)?;
        let mut frame = Vec::with_capacity(HEADER + payload.len());
        frame.extend_from_slice(MAGIC);
        frame.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        frame.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        frame.extend_from_slice(&payload);
        let mut w = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.counts().bytes + frame.len() as u64 > self.max_bytes {
            return Err(SpoolError::Full(self.max_bytes));
        }
        if w.file.is_none() {
            let path = self.dir.join(segment_name(&self.broker, w.seq));
            let file = OpenOptions::new().create(true).append(true).open(&path)?;
            sync_dir(&self.dir)?;
            w.file = Some(file);
        }
        let Some(file) = w.file.as_mut() else {
            return Err(SpoolError::Io(std::io::Error::other("no segment")));
        };
        let start = file.metadata()?.len();
        if let Err(e) = file.write_all(&frame).and_then(|()| file.sync_data()) {
            // Never leave a half frame behind a later record.
            let _ = file.set_len(start);
            return Err(e.into());
        }
        let mut c = self.counts();
        c.records += 1;
        c.items += items.len() as u64;
        c.bytes += frame.len() as u64;
        drop(c);
        drop(w);
        self.wake.notify_one();
        Ok(())
    }

    /// Seals the segment being written, so the drainer can finish it.
    pub(crate) fn rotate(&self) {
        let mut w = self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.file.take().is_some() {
            w.seq += 1;
        }
    }

    /// The status route's body.
    pub(crate) fn status(&self) -> serde_json::Value {
        let c = self.counts();
        serde_json::json!({
            "enabled": true,
            "pending": c.items,
            "pendingRecords": c.records,
            "bytes": c.bytes,
            "maxBytes": self.max_bytes,
            "drained": c.drained_items,
            "failed": c.failed,
            "damaged": c.damage,
            "dbHealthy": self.db_healthy.load(Ordering::Relaxed),
            "draining": self.draining.load(Ordering::Relaxed),
            "worker": self.broker,
            "directory": self.dir.display().to_string(),
        })
    }

    /// Removes this broker's lock file on a clean stop when nothing waits.
    pub(crate) fn close(&self) {
        if !self.holds_records() && self.segments_of(&self.broker).is_empty() {
            let _ = fs::remove_file(self.dir.join(lock_name(&self.broker)));
        }
    }
}

#[derive(Serialize)]
pub(crate) struct RecordRef<'a> {
    pub(crate) items: &'a [SpooledItem],
}

/// What a drain attempt ended with.
pub(crate) enum Drained {
    /// Every sealed segment is drained.
    All,
    /// PostgreSQL refused for now (unreachable or paused): try later.
    NotNow,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn record(n: usize) -> Vec<SpooledItem> {
        (0..n)
            .map(|i| SpooledItem {
                queue: "q".into(),
                partition: "p".into(),
                transaction_id: format!("t{i}"),
                trace_id: None,
                payload: Some(RawValue::from_string(format!("{{\"i\":{i}}}")).unwrap()),
                producer_sub: None,
            })
            .collect()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("queen-spool-unit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn frames_round_trip_and_a_torn_or_damaged_tail_ends_the_read_without_losing_what_came_before() {
        let dir = temp_dir("frames");
        let spool =
            Spool::open(&SpoolOptions { dir: dir.clone(), max_bytes: 1 << 20, drain_items: 500 }, "db", "b1")
                .unwrap();
        spool.append(&record(2)).unwrap();
        spool.append(&record(3)).unwrap();
        let seg = dir.join("db").join(segment_name("b1", 0));
        let (records, damage) = read_frames(&mut File::open(&seg).unwrap(), 0).unwrap();
        assert_eq!(records.iter().map(|(r, _)| r.items.len()).collect::<Vec<_>>(), [2, 3]);
        assert!(damage.is_none());
        // A torn tail: half a frame.
        let full = fs::read(&seg).unwrap();
        let first_end = records[0].1 as usize;
        fs::write(&seg, &full[..full.len() - 5]).unwrap();
        let (records, damage) = read_frames(&mut File::open(&seg).unwrap(), 0).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(damage.unwrap().0, first_end as u64);
        // A flipped byte in the second record's payload.
        let mut bad = full.clone();
        let last = bad.len() - 2;
        bad[last] ^= 0x55;
        fs::write(&seg, &bad).unwrap();
        let (records, damage) = read_frames(&mut File::open(&seg).unwrap(), 0).unwrap();
        assert_eq!(records.len(), 1);
        assert!(damage.unwrap().1.contains("checksum"));
        // Reading from an offset skips what was drained.
        fs::write(&seg, &full).unwrap();
        let (records, _) = read_frames(&mut File::open(&seg).unwrap(), first_end as u64).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].0.items[0].transaction_id, "t0");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_spool_is_bounded_in_bytes_and_a_live_brokers_spool_is_never_adopted() {
        let dir = temp_dir("bound");
        let spool =
            Spool::open(&SpoolOptions { dir: dir.clone(), max_bytes: 300, drain_items: 500 }, "db", "b1")
                .unwrap();
        spool.append(&record(1)).unwrap();
        let mut refused = false;
        for _ in 0..10 {
            if let Err(SpoolError::Full(300)) = spool.append(&record(1)) {
                refused = true;
                break;
            }
        }
        assert!(refused, "the bound holds");
        assert!(spool.counts().bytes <= 300);
        // A second broker on the same directory sees b1 alive: no adoption.
        let other =
            Spool::open(&SpoolOptions { dir: dir.clone(), max_bytes: 300, drain_items: 500 }, "db", "b2")
                .unwrap();
        assert!(!other.holds_records());
        // Once b1 is gone (its lock released), b2 adopts its records.
        let pending = spool.counts().records;
        drop(spool);
        other.adopt_orphans();
        assert_eq!(other.counts().records, pending);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn database_directories_are_readable_and_distinct() {
        let a: tokio_postgres::Config = "postgres://u@127.0.0.1:5432/one".parse().unwrap();
        let b: tokio_postgres::Config = "postgres://u@127.0.0.1:5432/two".parse().unwrap();
        assert_eq!(database_dir_name(&a), "127.0.0.1_5432_one");
        assert_ne!(database_dir_name(&a), database_dir_name(&b));
    }
}
