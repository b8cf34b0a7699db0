//! The workloads: what one op sends over HTTP, what the database must hold
//! before it runs, the pgbench script(s) of its SQL twin (our functions) and
//! of its plain-SQL row (the same data work straight on our tables).

use anyhow::{bail, Context};
use serde_json::Value;

use crate::driver::Driver;

/// One workload. Sizes are parameters so that the scaling runs reuse them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Workload {
    /// `POST /api/v1/push` of `batch` items on the client's partition, on a
    /// queue with `groups` registered consumer groups (that do not consume).
    Push { batch: u32, groups: u32 },
    /// Pop one message of the client's own partition, then ack it.
    PopAck,
    /// Pop up to `batch` messages from anywhere in a queue of `partitions`
    /// lanes (the broker picks the lane, queue mode), then ack them. Batch 1
    /// (pop-any, the pop series) has a queue of its own with a small
    /// backlog; a larger batch (the pop-sweep series) pops the queue of
    /// [`Workload::PopRand`] at the same size.
    PopAny { batch: u32, partitions: u32 },
    /// Pop up to `batch` messages of a random named partition of a filled
    /// queue of `partitions` (queue mode, no group), then ack what came in
    /// one `POST /api/v1/ack/batch`: what real clients do (pop10-rand1k).
    PopRand { batch: u32, partitions: u32 },
    /// A consumer of group `client % groups` pops up to 10 messages from a
    /// queue that every group reads in full, then acks them in one batch.
    Fanout { groups: u32 },
    /// Pop, then a transaction: ack + `putIfAbsent required`.
    OnceAck,
    /// KV get; `size` 0 is a number on 10,000 keys, otherwise a string of
    /// `size` bytes on 1,000 keys.
    KvGet { size: u32 },
    /// KV put (upsert), sizes as for `KvGet`.
    KvPut { size: u32 },
    /// `putIfAbsent` of a new random key.
    KvPutIfAbsent,
    /// `incr` on 10,000 counters.
    KvIncr,
    /// A 100-row `getPrefix` page at a random start in a namespace of `keys`.
    KvPrefix { keys: u32 },
    /// 20% push-1, 20% pop-ack, 40% kv-get, 20% kv-put, drawn per op.
    Mixed,
    /// `POST /api/v1/push` of `batch` items on a queue of `partitions`
    /// existing partitions, each item on its own partition drawn per request
    /// ([`Spread`]): push-1-rand1k, push-1-rand100k, push-100-spread100,
    /// push-1000-spread1000. Users push to many partitions, not to one each.
    PushSpread { batch: u32, partitions: u32 },
    /// The push-curve series: one request of `batch` items over `partitions`
    /// existing partitions (item i on partition (a + b·i) mod P, so each gets
    /// batch/P of them), sent by one client: the time per request as N and P
    /// grow. Same scripts as [`Workload::PushSpread`], another name.
    PushCurve { batch: u32, partitions: u32 },
    /// The push-create series: a push of 1 message into a partition that does
    /// not exist yet, on a queue that already has `partitions` (created by SQL
    /// beforehand) and `groups` registered consumer groups (each new partition
    /// gets a cursor per group).
    PushCreate { partitions: u32, groups: u32 },
}

/// A pgbench side of a workload (the twin or the plain row).
pub struct Twin {
    /// Scripts (file in the scripts directory, weight).
    pub files: Vec<(&'static str, u64)>,
    /// `-D name=value` variables.
    pub defines: Vec<(String, String)>,
}

/// The `mixed` draw, out of 10, and the same weights for pgbench.
const MIXED: [(Workload, u64); 4] = [
    (Workload::Push { batch: 1, groups: 0 }, 2),
    (Workload::PopAck, 2),
    (Workload::KvGet { size: 0 }, 4),
    (Workload::KvPut { size: 0 }, 2),
];

/// Queue of the spread pushes and the push curve: partitions p0..p<P-1>.
const SPREAD_QUEUE: &str = "bench-spread";
/// Queue of the push-create series: partitions p0.. made by SQL, and the
/// ones the measured pushes create, named c<random>.
const CREATE_QUEUE: &str = "bench-create";
/// Queue of the consuming workloads' backlog.
const POP_QUEUE: &str = "bench-pop";
/// Messages per partition of the pop-ack backlog, per client.
const POP_BACKLOG_PER_CLIENT: u32 = 3000;
/// Queue of the random pops (pop10-rand1k): partitions p0..p<P-1>, filled.
const POP_RAND_QUEUE: &str = "bench-rand";
/// Pops per second the random pops' backlog is sized for: above what plain
/// SQL did on these 2 cores (6.0k/s at 16 connections, issue 35), so no side
/// drains a lane in a run of --seconds (a drained lane would make its pops
/// empty, and cheap).
const POP_RAND_CEILING: f64 = 8000.0;

/// 1000 -> "1k", 1000000 -> "1m", 4096 -> "4k" (sizes in binary for bytes).
pub fn short(n: u32) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}m", n / 1_000_000),
        n if n >= 1024 && n % 1024 == 0 => format!("{}k", n / 1024),
        n if n >= 1000 && n % 1000 == 0 => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

impl Workload {
    /// The names of `--workloads`.
    pub fn parse(s: &str) -> anyhow::Result<Vec<Self>> {
        Ok(match s {
            "none" => vec![],
            "push-1" => vec![Workload::Push { batch: 1, groups: 0 }],
            "push-10" => vec![Workload::Push { batch: 10, groups: 0 }],
            "push-100" => vec![Workload::Push { batch: 100, groups: 0 }],
            "pop-ack" => vec![Workload::PopAck],
            "pop-any" => vec![Workload::PopAny { batch: 1, partitions: 1000 }],
            "pop10-rand1k" => vec![Workload::PopRand { batch: 10, partitions: 1000 }],
            "fanout" => vec![Workload::Fanout { groups: 10 }],
            "once-ack" => vec![Workload::OnceAck],
            "kv-get" => vec![Workload::KvGet { size: 0 }],
            "kv-put" => vec![Workload::KvPut { size: 0 }],
            "kv-put-if-absent" => vec![Workload::KvPutIfAbsent],
            "kv-incr" => vec![Workload::KvIncr],
            "kv-prefix" => vec![Workload::KvPrefix { keys: 1000 }, Workload::KvPrefix { keys: 1_000_000 }],
            "mixed" => vec![Workload::Mixed],
            "push-1-rand1k" => vec![Workload::PushSpread { batch: 1, partitions: 1000 }],
            "push-1-rand100k" => vec![Workload::PushSpread { batch: 1, partitions: 100_000 }],
            "push-100-spread100" => vec![Workload::PushSpread { batch: 100, partitions: 1000 }],
            "push-1000-spread1000" => vec![Workload::PushSpread { batch: 1000, partitions: 1000 }],
            other => bail!(
                "unknown workload {other} (push-1, push-10, push-100, push-1-rand1k, push-1-rand100k, \
                 push-100-spread100, push-1000-spread1000, pop-ack, pop-any, pop10-rand1k, fanout, once-ack, kv-get, kv-put, \
                 kv-put-if-absent, kv-incr, kv-prefix, mixed, none)"
            ),
        })
    }

    pub fn name(self) -> String {
        match self {
            Workload::Push { batch, groups: 0 } => format!("push-{batch}"),
            Workload::Push { batch, groups } => format!("push-{batch}, {groups} groups"),
            Workload::PopAck => "pop-ack".into(),
            Workload::PopAny { batch: 1, partitions } => format!("pop-any, {} partitions", short(partitions)),
            Workload::PopAny { batch, partitions } => format!("pop{batch}-any{}", short(partitions)),
            Workload::PopRand { batch, partitions } => format!("pop{batch}-rand{}", short(partitions)),
            Workload::Fanout { groups } => format!("fanout-{groups}"),
            Workload::OnceAck => "once-ack".into(),
            Workload::KvGet { size: 0 } => "kv-get".into(),
            Workload::KvGet { size } => format!("kv-get, {} B", short(size)),
            Workload::KvPut { size: 0 } => "kv-put".into(),
            Workload::KvPut { size } => format!("kv-put, {} B", short(size)),
            Workload::KvPutIfAbsent => "kv-put-if-absent".into(),
            Workload::KvIncr => "kv-incr".into(),
            Workload::KvPrefix { keys } => format!("kv-prefix-{}", short(keys)),
            Workload::Mixed => "mixed".into(),
            Workload::PushSpread { batch: 1, partitions } => format!("push-1-rand{}", short(partitions)),
            // The sweep's spread pushes touch `batch` partitions of 1,000.
            Workload::PushSpread { batch, .. } => format!("push-{batch}-spread{batch}"),
            Workload::PushCurve { batch, partitions } => {
                format!("push-curve, {} items over {} partitions", short(batch), short(partitions))
            }
            Workload::PushCreate { partitions, groups } => {
                format!("push-create at {} partitions{}", short(partitions), groups_suffix(groups))
            }
        }
    }

    /// The workload without its size, to line up a scaling series (the
    /// push curve has a line per request size, the partitions being its size).
    pub fn kind(self) -> String {
        let kind = match self {
            Workload::PushCurve { batch, .. } => return format!("push-curve-{}", short(batch)),
            Workload::PushCreate { groups, .. } => return format!("push-create{}", groups_suffix(groups)),
            Workload::PushSpread { .. } => "push-spread",
            Workload::Push { .. } => "push",
            Workload::PopAck => "pop-ack",
            Workload::PopAny { batch: 1, .. } => "pop-any",
            Workload::PopAny { batch, .. } => return format!("pop{batch}-any"),
            Workload::PopRand { batch, .. } => return format!("pop{batch}-rand"),
            Workload::Fanout { .. } => "fanout",
            Workload::OnceAck => "once-ack",
            Workload::KvGet { .. } => "kv-get",
            Workload::KvPut { .. } => "kv-put",
            Workload::KvPutIfAbsent => "kv-put-if-absent",
            Workload::KvIncr => "kv-incr",
            Workload::KvPrefix { .. } => "kv-prefix",
            Workload::Mixed => "mixed",
        };
        kind.to_owned()
    }

    /// Rows one op moves (messages pushed or delivered, KV rows read).
    pub fn rows(self) -> u32 {
        match self {
            Workload::Push { batch, .. }
            | Workload::PushSpread { batch, .. }
            | Workload::PushCurve { batch, .. }
            | Workload::PopRand { batch, .. }
            | Workload::PopAny { batch, .. } => batch,
            Workload::Fanout { .. } => 10,
            Workload::KvPrefix { .. } => 100,
            _ => 1,
        }
    }

    /// Whether the op reads messages, so each side needs a fresh backlog.
    fn consumes(self) -> bool {
        matches!(
            self,
            Workload::PopAck
                | Workload::PopAny { .. }
                | Workload::PopRand { .. }
                | Workload::Fanout { .. }
                | Workload::OnceAck
                | Workload::Mixed
        )
    }

    /// The pgbench scripts (file, weight) of the SQL twin and their `-D`
    /// variables. Every workload has one.
    pub fn twin(self, blob: &str) -> Twin {
        let file = match self {
            Workload::Push { batch: 1, .. } => "push-1.sql",
            Workload::Push { batch: 10, .. } => "push-10.sql",
            Workload::Push { .. } => "push-100.sql",
            Workload::PopAck => "pop-ack.sql",
            Workload::PopAny { .. } => "pop-any.sql",
            Workload::PopRand { .. } => "pop-rand.sql",
            Workload::Fanout { .. } => "fanout.sql",
            Workload::OnceAck => "once-ack.sql",
            Workload::KvGet { size: 0 } => "kv-get.sql",
            Workload::KvGet { .. } => "kv-get-value.sql",
            Workload::KvPut { size: 0 } => "kv-put.sql",
            Workload::KvPut { .. } => "kv-put-value.sql",
            Workload::KvPutIfAbsent => "kv-put-if-absent.sql",
            Workload::KvIncr => "kv-incr.sql",
            Workload::KvPrefix { .. } => "kv-prefix.sql",
            Workload::PushSpread { batch: 1, .. } => "push-rand.sql",
            Workload::PushSpread { .. } | Workload::PushCurve { .. } => "push-spread.sql",
            Workload::PushCreate { .. } => "push-create.sql",
            Workload::Mixed => {
                let files = MIXED.iter().map(|&(w, weight)| (w.twin(blob).files[0].0, weight)).collect();
                return Twin { files, defines: vec![] };
            }
        };
        let defines = match self {
            Workload::Fanout { groups } => vec![("groups".into(), groups.to_string())],
            Workload::KvPut { size } if size > 0 => vec![("value".into(), blob.to_owned())],
            Workload::KvPrefix { keys } => {
                vec![("ns".into(), format!("p{}", short(keys))), ("n".into(), keys.to_string())]
            }
            Workload::PushSpread { batch, partitions }
            | Workload::PushCurve { batch, partitions }
            | Workload::PopRand { batch, partitions } => spread_defines(batch, partitions),
            Workload::PopAny { batch, .. } => pop_any_defines(batch),
            _ => vec![],
        };
        Twin { files: vec![(file, 1)], defines }
    }

    /// The pgbench scripts (file, weight) of the plain-SQL row and their `-D`
    /// variables: the least SQL a hand-written client would send for the same
    /// data work, on our tables (`bench/pgbench/plain/`, see the README).
    pub fn plain(self, blob: &str) -> Twin {
        let kv = |ns: &str, keys: u32| {
            vec![("ns".to_owned(), ns.to_owned()), ("keys".to_owned(), keys.to_string())]
        };
        let (file, defines) = match self {
            Workload::Push { batch, .. } => ("plain/push.sql", vec![("batch".into(), batch.to_string())]),
            Workload::PopAck => ("plain/pop-ack.sql", vec![]),
            Workload::PopAny { batch, .. } => ("plain/pop-any.sql", pop_any_defines(batch)),
            Workload::PopRand { batch, partitions } => {
                ("plain/pop-rand.sql", spread_defines(batch, partitions))
            }
            Workload::Fanout { groups } => ("plain/fanout.sql", vec![("groups".into(), groups.to_string())]),
            Workload::OnceAck => ("plain/once-ack.sql", vec![]),
            Workload::KvGet { size: 0 } => ("plain/kv-get.sql", kv("bench", 10_000)),
            Workload::KvGet { .. } => ("plain/kv-get.sql", kv("vs", 1000)),
            Workload::KvPut { size: 0 } => ("plain/kv-put.sql", kv("bench", 10_000)),
            Workload::KvPut { .. } => {
                let mut d = kv("vs", 1000);
                d.push(("value".into(), blob.to_owned()));
                ("plain/kv-put-value.sql", d)
            }
            Workload::KvPutIfAbsent => ("plain/kv-put-if-absent.sql", vec![]),
            Workload::KvIncr => ("plain/kv-incr.sql", vec![]),
            Workload::KvPrefix { keys } => (
                "plain/kv-prefix.sql",
                vec![("ns".into(), format!("p{}", short(keys))), ("n".into(), keys.to_string())],
            ),
            Workload::PushSpread { batch: 1, partitions } => {
                ("plain/push-rand.sql", spread_defines(1, partitions))
            }
            Workload::PushSpread { batch, partitions } | Workload::PushCurve { batch, partitions } => {
                ("plain/push-spread.sql", spread_defines(batch, partitions))
            }
            Workload::PushCreate { .. } => ("plain/push-create.sql", vec![]),
            Workload::Mixed => {
                // The scripts' variables do not collide: push takes batch,
                // kv-get and kv-put take ns and keys (the same for both).
                let mut files = Vec::new();
                let mut defines: Vec<(String, String)> = Vec::new();
                for &(w, weight) in &MIXED {
                    let t = w.plain(blob);
                    files.push((t.files[0].0, weight));
                    for d in t.defines {
                        if !defines.contains(&d) {
                            defines.push(d);
                        }
                    }
                }
                return Twin { files, defines };
            }
        };
        Twin { files: vec![(file, 1)], defines }
    }

    /// What the plain scripts need beyond [`Workload::prepare`], which leaves
    /// the queue and its partitions to our first push and the consumer
    /// group's cursors to our first pop: a hand-written client creates its
    /// partitions and cursors once, so they are set up here, not measured.
    pub async fn prepare_plain(self, db: &tokio_postgres::Client, clients: usize) -> anyhow::Result<()> {
        if matches!(self, Workload::Push { .. } | Workload::Mixed) {
            // The push queue's partitions p0.., with a cursor at 0 for every
            // group already registered on it.
            let sql = format!(
                "INSERT INTO queen.queues (name) VALUES ('bench') ON CONFLICT DO NOTHING;
                 INSERT INTO queen.partitions (queue_id, name)
                 SELECT q.id, 'p' || i FROM queen.queues q, generate_series(0, {clients} - 1) i
                  WHERE q.name = 'bench'
                 ON CONFLICT DO NOTHING;
                 INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq)
                 SELECT p.id, g.name, q.id, 0
                   FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
                   JOIN queen.consumer_groups g ON g.queue_name = q.name
                  WHERE q.name = 'bench'
                 ON CONFLICT DO NOTHING;
                 ANALYZE queen.partitions;",
                clients = clients.max(1)
            );
            exec(db, &sql).await?;
        }
        if matches!(self, Workload::PopAck | Workload::OnceAck | Workload::Mixed) {
            // The queue-mode group's cursors (at 0) on the pop backlog.
            exec(db, &format!("SELECT queen.register_group('{POP_QUEUE}', queen.queue_mode(), NULL, NULL); ANALYZE queen.cursors"))
                .await?;
        }
        Ok(())
    }

    /// Brings the database to the state the op expects. Queue tables are
    /// emptied first for the workloads that consume, so both sides of a row
    /// start from the same backlog; KV rows persist across points. `seconds`
    /// is how long a side runs (the random pops' backlog is sized for it).
    pub async fn prepare(
        self,
        db: &tokio_postgres::Client,
        clients: usize,
        blob: &str,
        seconds: u64,
    ) -> anyhow::Result<()> {
        if let Workload::PopRand { batch, partitions } | Workload::PopAny { batch: batch @ 2.., partitions } =
            self
        {
            // Not emptied: its backlog (millions of messages at 100k
            // partitions) is kept if it has the size asked for, and only its
            // consumer's position is set back (see pop_rand_queue). The
            // queue-wide pops of the pop-sweep series share it: sized for
            // random pops, which need more per lane (some lanes are drawn
            // more often than others), so a named and a queue-wide point
            // of one size use the same messages.
            let per = pop_rand_per_lane(batch, partitions, seconds);
            return pop_rand_queue(db, POP_RAND_QUEUE, partitions, per).await;
        }
        if self.consumes()
            || matches!(
                self,
                Workload::Push { .. } | Workload::PushSpread { .. } | Workload::PushCurve { .. }
            )
        {
            exec(
                db,
                "TRUNCATE queen.messages, queen.cursors, queen.partitions, queen.queues, queen.ready_lanes,
                          queen.consumer_groups, queen.dead_letters CASCADE",
            )
            .await?;
        }
        match self {
            Workload::Push { groups, .. } => {
                for g in 0..groups {
                    let sql = format!("SELECT queen.register_group('bench', 'g{g}', NULL, NULL)");
                    exec(db, &sql).await?;
                }
            }
            Workload::PopAck | Workload::OnceAck | Workload::Mixed => {
                // One partition per client, with a backlog for the run.
                let per = POP_BACKLOG_PER_CLIENT.max(30_000 / clients.max(1) as u32);
                backlog(db, POP_QUEUE, clients as u32, per).await?;
            }
            Workload::PopAny { partitions, .. } => {
                backlog(db, "bench-any", partitions, (40_000 / partitions).max(2)).await?;
                exec(db, "SELECT queen.register_group('bench-any', queen.queue_mode(), NULL, NULL)").await?;
                exec(db, "ANALYZE queen.cursors; ANALYZE queen.ready_lanes").await?;
            }
            Workload::PushSpread { partitions, .. } | Workload::PushCurve { partitions, .. } => {
                // Existing partitions: what is measured is the push, not
                // the creation (that is the push-create series).
                exec(db, &format!("INSERT INTO queen.queues (name) VALUES ('{SPREAD_QUEUE}')")).await?;
                add_partitions(db, SPREAD_QUEUE, 0, partitions).await?;
            }
            Workload::PushCreate { partitions, groups } => prepare_create(db, partitions, groups).await?,
            Workload::Fanout { groups } => {
                backlog(db, "bench-fan", 64, 1000).await?;
                for g in 0..groups {
                    let sql = format!("SELECT queen.register_group('bench-fan', 'g{g}', NULL, NULL)");
                    exec(db, &sql).await?;
                }
                exec(db, "ANALYZE queen.cursors; ANALYZE queen.ready_lanes").await?;
            }
            _ => {}
        }
        if matches!(
            self,
            Workload::Mixed | Workload::KvGet { size: 0 } | Workload::KvPut { size: 0 } | Workload::KvIncr
        ) {
            exec(
                db,
                "INSERT INTO queen.kv (ns, key, value, version)
                 SELECT 'bench', 'k:' || i, to_jsonb(i), nextval('queen.kv_version_seq') FROM generate_series(1, 10000) i
                 ON CONFLICT DO NOTHING",
            )
            .await?;
        }
        match self {
            Workload::KvGet { size } | Workload::KvPut { size } if size > 0 => {
                db.execute(
                    "INSERT INTO queen.kv (ns, key, value, version)
                     SELECT 'vs', 'k:' || i, to_jsonb($1::text), nextval('queen.kv_version_seq')
                       FROM generate_series(1, 1000) i
                     ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, version = excluded.version",
                    &[&blob],
                )
                .await
                .context("loading the KV values")?;
            }
            Workload::KvPrefix { keys } => {
                let sql = format!(
                    "DO $$ BEGIN
                       IF NOT EXISTS (SELECT 1 FROM queen.kv WHERE ns = 'p{ns}' AND key = 'k:' || lpad('{keys}', 7, '0')) THEN
                         INSERT INTO queen.kv (ns, key, value, version)
                         SELECT 'p{ns}', 'k:' || lpad(i::text, 7, '0'), to_jsonb(i), nextval('queen.kv_version_seq')
                           FROM generate_series(1, {keys}) i
                         ON CONFLICT DO NOTHING;
                         ANALYZE queen.kv;
                       END IF;
                     END $$",
                    ns = short(keys)
                );
                exec(db, &sql).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The workload of the next op: itself, or the draw of `mixed`.
    pub fn pick(self, rng: &mut Rng) -> Workload {
        if self != Workload::Mixed {
            return self;
        }
        let mut draw = rng.next() % 10;
        for &(w, weight) in &MIXED {
            if draw < weight {
                return w;
            }
            draw -= weight;
        }
        MIXED[0].0
    }

    /// One HTTP op (`pick` it first for `mixed`).
    pub async fn http_op<D: Driver>(
        self,
        http: &mut D,
        client_id: usize,
        rng: &mut Rng,
        blob: &str,
    ) -> anyhow::Result<Outcome> {
        let resp = match self {
            Workload::Push { batch, .. } => {
                let item = format!(r#"{{"queue":"bench","partition":"p{client_id}","payload":{{"n":1}}}}"#);
                let items = vec![item; batch as usize].join(",");
                http.post("/api/v1/push", format!(r#"{{"items":[{items}]}}"#)).await?
            }
            Workload::PushSpread { batch, partitions } | Workload::PushCurve { batch, partitions } => {
                let spread = Spread::draw(rng, partitions);
                let items: Vec<String> = (0..u64::from(batch))
                    .map(|i| {
                        format!(
                            r#"{{"queue":"{SPREAD_QUEUE}","partition":"p{}","payload":{{"n":1}}}}"#,
                            spread.partition(i)
                        )
                    })
                    .collect();
                http.post("/api/v1/push", format!(r#"{{"items":[{}]}}"#, items.join(","))).await?
            }
            Workload::PushCreate { .. } => {
                // A 64-bit random name: new, as pgbench's random(1, 9e18) is.
                let item = format!(
                    r#"{{"queue":"{CREATE_QUEUE}","partition":"c{}","payload":{{"n":1}}}}"#,
                    rng.next()
                );
                http.post("/api/v1/push", format!(r#"{{"items":[{item}]}}"#)).await?
            }
            Workload::PopAck
            | Workload::OnceAck
            | Workload::PopAny { .. }
            | Workload::PopRand { .. }
            | Workload::Fanout { .. } => {
                let url = match self {
                    Workload::PopAny { batch, .. } => {
                        format!("/api/v1/pop/queue/{}?batch={batch}&wait=false", pop_any_queue(batch))
                    }
                    Workload::PopRand { batch, partitions } => format!(
                        "/api/v1/pop/queue/{POP_RAND_QUEUE}/partition/p{}?batch={batch}&wait=false",
                        rng.next() % u64::from(partitions.max(1))
                    ),
                    Workload::Fanout { groups } => format!(
                        "/api/v1/pop/queue/bench-fan?batch=10&wait=false&subscriptionMode=all&consumerGroup=g{}",
                        client_id % groups.max(1) as usize
                    ),
                    _ => format!("/api/v1/pop/queue/{POP_QUEUE}/partition/p{client_id}?batch=1&wait=false"),
                };
                let (status, popped) = http.get(&url).await?;
                match status {
                    200 => {}
                    204 => return Ok(Outcome::Empty),
                    _ => return Ok(Outcome::Wrong),
                }
                let v: Value = serde_json::from_slice(&popped)?;
                let acks = completed_acks(&v);
                let Some(first) = acks.first() else { return Ok(Outcome::Wrong) };
                match self {
                    Workload::Fanout { .. } => {
                        let body =
                            serde_json::json!({"acknowledgments": acks, "consumerGroup": v["consumerGroup"]});
                        http.post("/api/v1/ack/batch", body.to_string()).await?
                    }
                    // Queue mode: no group named, as a queue-mode client acks.
                    Workload::PopRand { .. } | Workload::PopAny { batch: 2.., .. } => {
                        let body = serde_json::json!({ "acknowledgments": acks });
                        http.post("/api/v1/ack/batch", body.to_string()).await?
                    }
                    Workload::OnceAck => {
                        let m = &v["messages"][0];
                        let mut op = first.clone();
                        op["type"] = "ack".into();
                        let bundle = serde_json::json!({
                            "operations": [op],
                            "requiredLeases": [m["leaseId"]],
                            "kv": [{"op": "putIfAbsent", "ns": "once",
                                    "key": format!("charge:{}", m["transactionId"].as_str().unwrap_or("")),
                                    "value": true, "ttlSeconds": 86400, "required": true}]});
                        http.post("/api/v1/transaction", bundle.to_string()).await?
                    }
                    _ => http.post("/api/v1/ack", first.to_string()).await?,
                }
            }
            Workload::KvGet { size } => {
                let k = rng.next() % if size == 0 { 10_000 } else { 1000 } + 1;
                let ns = if size == 0 { "bench" } else { "vs" };
                http.post(
                    "/api/v1/kv",
                    format!(r#"{{"operations":[{{"op":"get","ns":"{ns}","key":"k:{k}"}}]}}"#),
                )
                .await?
            }
            Workload::KvPut { size: 0 } => {
                let k = rng.next() % 10_000 + 1;
                http.post(
                    "/api/v1/kv",
                    format!(r#"{{"operations":[{{"op":"put","ns":"bench","key":"k:{k}","value":{k},"forever":true}}]}}"#),
                )
                .await?
            }
            Workload::KvPut { .. } => {
                let k = rng.next() % 1000 + 1;
                http.post(
                    "/api/v1/kv",
                    format!(r#"{{"operations":[{{"op":"put","ns":"vs","key":"k:{k}","value":"{blob}","forever":true}}]}}"#),
                )
                .await?
            }
            Workload::KvPutIfAbsent => {
                let k = rng.next() % 9_000_000_000_000_000_000;
                http.post(
                    "/api/v1/kv",
                    format!(r#"{{"operations":[{{"op":"putIfAbsent","ns":"bench","key":"n:{k}","value":1,"ttlSeconds":3600}}]}}"#),
                )
                .await?
            }
            Workload::KvIncr => {
                let k = rng.next() % 10_000 + 1;
                http.post(
                    "/api/v1/kv",
                    format!(r#"{{"operations":[{{"op":"incr","ns":"bench","key":"c:{k}","delta":1,"forever":true}}]}}"#),
                )
                .await?
            }
            Workload::KvPrefix { keys } => {
                let start = rng.next() % u64::from(keys.saturating_sub(100).max(1));
                let ns = short(keys);
                http.post(
                    "/api/v1/kv",
                    format!(
                        r#"{{"operations":[{{"op":"getPrefix","ns":"p{ns}","prefix":"k:","after":"k:{start:07}","limit":100}}]}}"#
                    ),
                )
                .await?
            }
            Workload::Mixed => bail!("mixed is drawn by Workload::pick before the op"),
        };
        let (status, body) = resp;
        let ok = (200..300).contains(&status);
        // A refused ack or bundle is a 200 with success false.
        if !ok || (self.consumes() && refused(&body)) {
            return Ok(Outcome::Wrong);
        }
        Ok(Outcome::Done)
    }
}

/// An ack answer (an array) or a bundle answer (an object) that says
/// `success: false` anywhere at its first level.
/// The ack items that complete every message of a pop answer.
pub(super) fn completed_acks(pop: &Value) -> Vec<Value> {
    pop["messages"]
        .as_array()
        .map(|ms| {
            ms.iter()
                .map(|m| {
                    serde_json::json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                       "leaseId": m["leaseId"], "status": "completed"})
                })
                .collect()
        })
        .unwrap_or_default()
}

fn refused(body: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => items.iter().any(|i| i["success"] == Value::Bool(false)),
        Ok(v) => v["success"] == Value::Bool(false),
        Err(_) => true,
    }
}

/// What one op came to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done as asked.
    Done,
    /// A pop found nothing (other consumers hold every free lane): still an
    /// op, as it is for pgbench, but counted apart.
    Empty,
    /// A wrong answer (an error status, a refused ack): the run stops.
    Wrong,
}

pub(crate) async fn exec(db: &tokio_postgres::Client, sql: &str) -> anyhow::Result<()> {
    db.batch_execute(sql).await.map_err(|e| match e.as_db_error() {
        Some(d) => anyhow::anyhow!("{}: {}", d.code().code(), d.message()),
        None => anyhow::anyhow!(e),
    })
}

/// A queue of `partitions` lanes named p0.., `per` messages each, written
/// directly (the push path is not what is measured here).
async fn backlog(db: &tokio_postgres::Client, queue: &str, partitions: u32, per: u32) -> anyhow::Result<()> {
    let sql = format!(
        "INSERT INTO queen.queues (name) VALUES ('{queue}');
         INSERT INTO queen.partitions (queue_id, name, next_seq, last_push_at)
         SELECT q.id, 'p' || i, {per}, now() FROM queen.queues q, generate_series(0, {partitions} - 1) i
          WHERE q.name = '{queue}';
         INSERT INTO queen.messages (partition_id, seq, id, transaction_id, payload)
         SELECT p.id, s, queen.uuid_v7(), queen.uuid_v7()::text, json_build_object('n', s)
           FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id, generate_series(0, {per} - 1) s
          WHERE q.name = '{queue}';
         ANALYZE queen.partitions; ANALYZE queen.messages;"
    );
    exec(db, &sql).await
}

/// Messages per lane of the random pops' queue: a side of `seconds` at up to
/// [`POP_RAND_CEILING`] pops of `batch` per second over `partitions` lanes
/// pops a lane λ times on average (Poisson); each lane holds λ + 3√λ + 1
/// pops' worth, so that hardly any lane runs dry (at 100k partitions and
/// 5 s, 4 pops, about 25 lanes of 100,000 that a fifth pop finds empty at
/// the ceiling). At least 2 pops' worth.
fn pop_rand_per_lane(batch: u32, partitions: u32, seconds: u64) -> u32 {
    let lambda = POP_RAND_CEILING * seconds.max(1) as f64 / f64::from(partitions.max(1));
    let pops = (lambda + 3.0 * lambda.sqrt() + 1.0).ceil().max(2.0);
    pops as u32 * batch.max(1)
}

/// The random pops' queue: `partitions` lanes p0.. of `per` messages each
/// and the queue-mode group's cursors at 0, each with its ready lane, as a
/// fresh queue would be after its pushes and the group's registration.
///
/// The messages are written once per size: pops and acks never change a
/// message row (they move cursors), so when the queue already has exactly
/// this shape, the next side keeps them and only the group is made anew
/// (cursors, ready lanes, the group row: deleted and registered again).
/// Either way the cursor and ready-lane tables are then rewritten
/// (`VACUUM FULL`), so every side, the first included, starts on the same
/// compact tables with no dead rows of the side before; the messages were
/// vacuumed when written (hint bits set, so no side pays for setting them
/// on its first reads).
async fn pop_rand_queue(
    db: &tokio_postgres::Client,
    queue: &str,
    partitions: u32,
    per: u32,
) -> anyhow::Result<()> {
    let row = db
        .query_one(
            "SELECT count(*), coalesce(min(p.next_seq), -1), coalesce(max(p.next_seq), -1),
                    (SELECT count(*) FROM queen.queues)
               FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1",
            &[&queue],
        )
        .await?;
    let (lanes, lo, hi, queues): (i64, i64, i64, i64) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?, row.try_get(3)?);
    let kept = lanes == i64::from(partitions) && lo == i64::from(per) && hi == i64::from(per) && queues == 1;
    if !kept {
        exec(
            db,
            "TRUNCATE queen.messages, queen.cursors, queen.partitions, queen.queues, queen.ready_lanes,
                      queen.consumer_groups, queen.dead_letters CASCADE",
        )
        .await?;
        backlog(db, queue, partitions, per).await?;
        exec(db, "VACUUM ANALYZE queen.messages").await?;
    }
    exec(
        db,
        &format!(
            "DELETE FROM queen.cursors c USING queen.queues q WHERE c.queue_id = q.id AND q.name = '{queue}';
             DELETE FROM queen.ready_lanes r USING queen.queues q WHERE r.queue_id = q.id AND q.name = '{queue}';
             DELETE FROM queen.consumer_groups WHERE queue_name = '{queue}';
             TRUNCATE queen.dead_letters;
             SELECT queen.register_group('{queue}', queen.queue_mode(), NULL, NULL);"
        ),
    )
    .await?;
    // One statement each: VACUUM cannot run inside the implicit transaction
    // of a multi-statement query.
    for sql in [
        "VACUUM FULL queen.cursors",
        "VACUUM FULL queen.ready_lanes",
        "ANALYZE queen.cursors",
        "ANALYZE queen.ready_lanes",
    ] {
        exec(db, sql).await?;
    }
    Ok(())
}

/// The queue a queue-wide pop of `batch` reads (see [`Workload::PopAny`]).
fn pop_any_queue(batch: u32) -> &'static str {
    if batch > 1 {
        POP_RAND_QUEUE
    } else {
        "bench-any"
    }
}

/// `-D` variables of the queue-wide pop scripts: the batch and the queue.
fn pop_any_defines(batch: u32) -> Vec<(String, String)> {
    vec![("batch".into(), batch.to_string()), ("queue".into(), pop_any_queue(batch).into())]
}

/// `-D` variables of the spread scripts: items per request and partitions.
fn spread_defines(batch: u32, partitions: u32) -> Vec<(String, String)> {
    vec![("batch".into(), batch.to_string()), ("parts".into(), partitions.to_string())]
}

/// " , 1 group" and the like, nothing for none.
fn groups_suffix(groups: u32) -> String {
    match groups {
        0 => String::new(),
        1 => ", 1 group".into(),
        g => format!(", {g} groups"),
    }
}

/// The partitions of one spread push: item i goes to p<(a + b·i) mod P>,
/// with a random start `a` and a random stride `b` prime to P, so the first
/// min(N, P) items land on as many distinct partitions and N items over P
/// partitions give each N/P (± 1). Every side draws the same way (pgbench
/// from `a` and `k` in `bench/pgbench/push-spread.sql` and
/// `plain/push-spread.sql`): pgbench has no cheap draw of distinct values,
/// and the sets of partitions, so the lock conflicts between concurrent
/// requests, must be alike on the three sides of a ratio.
///
/// `b` is the k-th number that ends in 1, 3, 7 or 9, which is prime to P
/// for every P whose only prime factors are 2 and 5 (1, 100, 1000, 1600,
/// 10,000, 100,000: the sizes used here).
pub struct Spread {
    a: u64,
    b: u64,
    parts: u64,
}

impl Spread {
    /// A random start and stride for a queue of `parts` partitions.
    pub fn draw(rng: &mut Rng, parts: u32) -> Self {
        let parts = u64::from(parts.max(1));
        let k = rng.next() % (parts * 4 / 10).max(1);
        let b = k / 4 * 10 + [1, 3, 7, 9][(k % 4) as usize];
        Spread { a: rng.next() % parts, b, parts }
    }

    /// The partition number of item `i`.
    pub fn partition(&self, i: u64) -> u64 {
        (self.a + self.b * i) % self.parts
    }
}

/// Creates partitions p<from>..p<to - 1> of `queue` in one set-based
/// statement, with a cursor at 0 for every group registered on the queue:
/// what the first push of each would leave (push.sql's general path),
/// at a fraction of the cost, so large queues are quick to set up.
pub(crate) async fn add_partitions(
    db: &tokio_postgres::Client,
    queue: &str,
    from: u32,
    to: u32,
) -> anyhow::Result<()> {
    if to <= from {
        return Ok(());
    }
    let sql = format!(
        "WITH p AS (
           INSERT INTO queen.partitions (queue_id, name)
           SELECT q.id, 'p' || i FROM queen.queues q, generate_series({from}, {to} - 1) i
            WHERE q.name = '{queue}'
           RETURNING id, queue_id)
         INSERT INTO queen.cursors (partition_id, consumer_group, queue_id, next_seq)
         SELECT p.id, g.name, p.queue_id, 0 FROM p JOIN queen.consumer_groups g ON g.queue_name = '{queue}';
         ANALYZE queen.partitions; ANALYZE queen.cursors;"
    );
    exec(db, &sql).await
}

/// The push-create queue with `partitions` partitions made by SQL and
/// `groups` registered groups, and none of the partitions an earlier run of
/// the series created: the levels of a series only grow, so the queue is
/// topped up rather than rebuilt, and rebuilt only when the groups change
/// (or another workload emptied the queue tables).
async fn prepare_create(db: &tokio_postgres::Client, partitions: u32, groups: u32) -> anyhow::Result<()> {
    let row = db
        .query_one(
            "SELECT (SELECT count(*) FROM queen.queues WHERE name = $1),
                    (SELECT count(*) FROM queen.consumer_groups WHERE queue_name = $1),
                    (SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                      WHERE q.name = $1 AND p.name LIKE 'p%')",
            &[&CREATE_QUEUE],
        )
        .await?;
    let (queues, registered, made): (i64, i64, i64) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
    let mut from = u32::try_from(made)?;
    if queues == 0 || registered != i64::from(groups) || from > partitions {
        exec(
            db,
            &format!(
                "TRUNCATE queen.messages, queen.cursors, queen.partitions, queen.queues, queen.ready_lanes,
                          queen.consumer_groups, queen.dead_letters CASCADE;
                 INSERT INTO queen.queues (name) VALUES ('{CREATE_QUEUE}');"
            ),
        )
        .await?;
        for g in 0..groups {
            exec(db, &format!("SELECT queen.register_group('{CREATE_QUEUE}', 'g{g}', NULL, NULL)")).await?;
        }
        from = 0;
    } else {
        // The partitions the measured pushes made (c<random>), their
        // messages, and (by cascade) their cursors and ready lanes.
        exec(
            db,
            &format!(
                "DELETE FROM queen.messages m USING queen.partitions p, queen.queues q
                  WHERE m.partition_id = p.id AND p.queue_id = q.id AND q.name = '{CREATE_QUEUE}'
                    AND p.name LIKE 'c%';
                 DELETE FROM queen.partitions p USING queen.queues q
                  WHERE p.queue_id = q.id AND q.name = '{CREATE_QUEUE}' AND p.name LIKE 'c%';"
            ),
        )
        .await?;
    }
    add_partitions(db, CREATE_QUEUE, from, partitions).await
}

/// A cheap per-task random number generator (xorshift).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A JSON string value of exactly `size` bytes with its quotes (so 64 KiB
/// is the largest value the KV accepts), of random letters and digits: a
/// value that neither JSON escaping nor TOAST compression makes cheaper.
pub fn blob(size: u32) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    (0..size.saturating_sub(2)).map(|_| CHARS[(rng.next() % CHARS.len() as u64) as usize] as char).collect()
}

#[cfg(test)]
mod tests {
    use super::{Rng, Spread};

    /// The first min(N, P) items of a spread push land on distinct
    /// partitions, and N items over P partitions give each N/P (± 1), for
    /// the sizes the bench uses.
    #[test]
    fn spread_covers_distinct_partitions() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for parts in [1u32, 100, 1000, 1600, 10_000, 100_000] {
            for batch in [1u64, 100, 1000, 1600, 10_000] {
                for _ in 0..20 {
                    let s = Spread::draw(&mut rng, parts);
                    let mut hits = vec![0u64; parts as usize];
                    for i in 0..batch {
                        let p = s.partition(i);
                        assert!(p < u64::from(parts));
                        hits[p as usize] += 1;
                    }
                    let (lo, hi) = (batch / u64::from(parts), batch.div_ceil(u64::from(parts)));
                    let used = hits.iter().filter(|&&h| h > 0).count() as u64;
                    assert_eq!(used, batch.min(u64::from(parts)), "parts {parts} batch {batch}");
                    // Unused partitions only when there are fewer items.
                    let fair = |h: u64| (h == 0 && batch < u64::from(parts)) || (lo..=hi).contains(&h);
                    assert!(hits.iter().all(|&h| fair(h)), "parts {parts} batch {batch}");
                }
            }
        }
    }
}
