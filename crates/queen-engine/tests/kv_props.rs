//! Property tests of the KV reads against an in-memory model, with a small
//! seeded xorshift generator (no proptest): random UTF-8 keys, including
//! multibyte and 4-byte characters, `%`, `_`, `\` and code points near
//! U+FFFF and U+10FFFF, and random prefixes walked to the end.
mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::Rng;
use common::TestEngine;
use queen_engine::{Engine, Expect, Expiry, KvOp, KvOutcome, KvResult};
use serde_json::value::RawValue;

const NS: &str = "props";

/// Characters keys are drawn from: ASCII edge cases, LIKE metacharacters,
/// 2-, 3- and 4-byte UTF-8, and the code points around the ends of the BMP
/// and of Unicode (where a prefix's upper bound needs a carry).
const ALPHABET: &[char] = &[
    'a',
    'b',
    'z',
    'A',
    'Z',
    '0',
    '9',
    ':',
    '/',
    '%',
    '_',
    '\\',
    '*',
    '?',
    '[',
    ' ',
    '~',
    '\u{7f}',
    '\u{80}',
    'é',
    '\u{7ff}',
    '\u{800}',
    '€',
    '\u{d7ff}',
    '\u{e000}',
    '\u{fffd}',
    '\u{fffe}',
    '\u{ffff}',
    '\u{10000}',
    '😀',
    '\u{10fffe}',
    '\u{10ffff}',
];

fn random_string(rng: &mut Rng, max_chars: u64) -> String {
    let n = 1 + rng.below(max_chars);
    (0..n).map(|_| *rng.pick(ALPHABET)).collect()
}

async fn run(engine: &Engine, ops: Vec<KvOp>) -> Vec<KvResult> {
    match engine.kv_ops(&ops).await.expect("kv_ops") {
        KvOutcome::Done(rs) => rs,
        KvOutcome::PreconditionLost(p) => panic!("unexpected precondition loss: {p:?}"),
    }
}

async fn insert_random_keys(engine: &Engine, rng: &mut Rng, n: usize) -> BTreeSet<String> {
    let mut model = BTreeSet::new();
    while model.len() < n {
        model.insert(random_string(rng, 10));
    }
    let keys: Vec<String> = model.iter().cloned().collect();
    for chunk in keys.chunks(200) {
        let ops = chunk
            .iter()
            .map(|k| KvOp::Put {
                ns: NS.into(),
                key: k.clone(),
                value: RawValue::from_string(serde_json::to_string(k).unwrap()).unwrap(),
                expiry: Expiry::Forever,
                expect: None,
                required: false,
            })
            .collect();
        let rs = run(engine, ops).await;
        assert!(rs.iter().all(|r| r.applied == Some(true)));
    }
    model
}

/// Walks getPrefix from `start` to the end with random page sizes, checking
/// every page's `truncated`/`nextAfter` against what remains.
async fn walk(
    engine: &Engine,
    rng: &mut Rng,
    prefix: &str,
    start: Option<String>,
    model: &[String],
) -> Vec<String> {
    let mut got: Vec<String> = Vec::new();
    let mut after = start;
    loop {
        let limit = match rng.below(4) {
            0 => None,
            1 => Some(rng.below(3) as u32),
            2 => Some(1 + rng.below(8) as u32),
            _ => Some(1 + rng.below(400) as u32),
        };
        let keys_only = rng.below(2) == 0;
        let op =
            KvOp::GetPrefix { ns: NS.into(), prefix: prefix.into(), after: after.clone(), limit, keys_only };
        let r = run(engine, vec![op]).await.remove(0);
        let rows = r.rows.expect("rows");
        let page_limit = limit.unwrap_or(100).clamp(1, 1000) as usize;
        assert!(rows.len() <= page_limit, "prefix {prefix:?}: {} rows over limit {page_limit}", rows.len());
        for row in &rows {
            assert_eq!(row.value.is_none(), keys_only, "keysOnly decides whether value is present");
            if let Some(v) = &row.value {
                let stored: String = serde_json::from_str(v.get()).unwrap();
                assert_eq!(&stored, &row.key, "the value round-trips with the key");
            }
        }
        got.extend(rows.iter().map(|row| row.key.clone()));
        let remaining = model.len().saturating_sub(got.len());
        assert_eq!(r.truncated, Some(remaining > 0), "prefix {prefix:?}: truncated is exact");
        if r.truncated == Some(true) {
            assert!(!rows.is_empty(), "a truncated page holds a row");
            assert_eq!(r.next_after.as_deref(), rows.last().map(|row| row.key.as_str()));
            after = r.next_after;
        } else {
            assert_eq!(r.next_after, None);
            return got;
        }
    }
}

#[tokio::test]
async fn get_prefix_walks_return_exactly_the_byte_prefixed_keys_in_byte_order() {
    let b = TestEngine::start().await;
    let mut rng = Rng::new(0x5eed_0001);
    let model = insert_random_keys(&b.engine, &mut rng, 1500).await;
    let keys: Vec<&String> = model.iter().collect();

    let mut prefixes: Vec<String> = Vec::new();
    for _ in 0..200 {
        // A prefix of an existing key, cut at a random character boundary.
        let k = rng.pick(&keys);
        let chars: Vec<char> = k.chars().collect();
        let n = 1 + rng.below(chars.len() as u64) as usize;
        prefixes.push(chars[..n].iter().collect());
    }
    for _ in 0..100 {
        prefixes.push(random_string(&mut rng, 3));
    }
    // Upper bounds that need a carry past U+10FFFF, or have none.
    prefixes.extend(
        ["\u{10ffff}", "\u{10ffff}\u{10ffff}", "a\u{10ffff}", "\u{ffff}", "\u{d7ff}", "%", "_", "\\"]
            .map(String::from),
    );

    for prefix in &prefixes {
        let want: Vec<String> =
            model.iter().filter(|k| k.as_bytes().starts_with(prefix.as_bytes())).cloned().collect();
        let got = walk(&b.engine, &mut rng, prefix, None, &want).await;
        assert_eq!(got, want, "prefix {prefix:?}");

        // From a random exclusive cursor (not necessarily a key).
        let after = if rng.below(2) == 0 && !want.is_empty() {
            rng.pick(&want).clone()
        } else {
            format!("{prefix}{}", random_string(&mut rng, 2))
        };
        let want_after: Vec<String> = want.iter().filter(|k| k.as_str() > after.as_str()).cloned().collect();
        let got = walk(&b.engine, &mut rng, prefix, Some(after.clone()), &want_after).await;
        assert_eq!(got, want_after, "prefix {prefix:?} after {after:?}");
    }
}

#[tokio::test]
async fn get_many_answers_rows_in_byte_order_and_missing_in_request_order_for_random_keys() {
    let b = TestEngine::start().await;
    let mut rng = Rng::new(0x5eed_0002);
    let model = insert_random_keys(&b.engine, &mut rng, 300).await;
    let keys: Vec<String> = model.iter().cloned().collect();
    for _ in 0..60 {
        let n = 1 + rng.below(40) as usize;
        let request: Vec<String> = (0..n)
            .map(|_| if rng.below(2) == 0 { rng.pick(&keys).clone() } else { random_string(&mut rng, 10) })
            .collect();
        let r = run(&b.engine, vec![KvOp::GetMany { ns: NS.into(), keys: request.clone() }]).await.remove(0);
        let rows: Vec<String> = r.rows.expect("rows").into_iter().map(|row| row.key).collect();
        let want_rows: Vec<String> = request
            .iter()
            .filter(|k| model.contains(*k))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(rows, want_rows, "rows: the present keys in byte order");
        let missing = r.missing.expect("missing");
        let want_missing: Vec<String> = request.iter().filter(|k| !model.contains(*k)).cloned().collect();
        assert_eq!(missing, want_missing, "missing: the absent keys in request order");
        assert_eq!(r.truncated, Some(false));
    }
}

/// What the model predicts for one write.
struct Want {
    applied: bool,
    reason: Option<&'static str>,
    value: serde_json::Value,
}

#[tokio::test]
async fn random_write_sequences_match_a_model_of_versions_preconditions_and_incr() {
    let b = TestEngine::start().await;
    let mut rng = Rng::new(0x5eed_0003);
    let keys = ["k:a", "k:b", "k:%", "k:é", "k:😀"];
    // key -> (value, version) of the live row.
    let mut model: BTreeMap<&str, (serde_json::Value, i64)> = BTreeMap::new();
    let mut high = 0i64;
    let raw = |v: &serde_json::Value| RawValue::from_string(v.to_string()).unwrap();
    for _ in 0..150 {
        let mut call_keys = keys.to_vec();
        rng.shuffle(&mut call_keys);
        call_keys.truncate(1 + rng.below(keys.len() as u64) as usize);
        let mut ops = Vec::new();
        let mut wants = Vec::new();
        for key in &call_keys {
            let cur = model.get(key).cloned();
            let cur_version = cur.as_ref().map(|c| c.1).unwrap_or(0);
            let cur_value = cur.as_ref().map(|c| c.0.clone()).unwrap_or(serde_json::Value::Null);
            let refused = |reason| Want { applied: false, reason: Some(reason), value: cur_value.clone() };
            let new_value = if rng.below(3) == 0 {
                serde_json::json!(format!("s{}", rng.below(100)))
            } else {
                serde_json::json!(rng.below(20) as i64 - 5)
            };
            let ns = NS.to_string();
            let key_s = key.to_string();
            let (op, want) = match rng.below(9) {
                0 => (
                    KvOp::Put {
                        ns,
                        key: key_s,
                        value: raw(&new_value),
                        expiry: Expiry::Forever,
                        expect: None,
                        required: false,
                    },
                    Want { applied: true, reason: None, value: new_value.clone() },
                ),
                1 => (
                    KvOp::Put {
                        ns,
                        key: key_s,
                        value: raw(&new_value),
                        expiry: Expiry::Forever,
                        expect: Some(Expect::Absent),
                        required: false,
                    },
                    if cur.is_some() {
                        refused("exists")
                    } else {
                        Want { applied: true, reason: None, value: new_value.clone() }
                    },
                ),
                2 => (
                    KvOp::PutIfAbsent {
                        ns,
                        key: key_s,
                        value: raw(&new_value),
                        expiry: Expiry::Forever,
                        required: false,
                    },
                    if cur.is_some() {
                        refused("exists")
                    } else {
                        Want { applied: true, reason: None, value: new_value.clone() }
                    },
                ),
                3 | 4 => {
                    // Expect the current version, or a stale/unknown one.
                    let expect = if rng.below(2) == 0 && cur_version > 0 {
                        cur_version
                    } else {
                        1 + rng.below(high as u64 + 2) as i64
                    };
                    let want = match &cur {
                        None => refused("absent"),
                        Some((_, v)) if *v == expect => {
                            Want { applied: true, reason: None, value: new_value.clone() }
                        }
                        Some(_) => refused("version"),
                    };
                    (
                        KvOp::Put {
                            ns,
                            key: key_s,
                            value: raw(&new_value),
                            expiry: Expiry::Forever,
                            expect: Some(Expect::from_wire(expect as u64)),
                            required: false,
                        },
                        want,
                    )
                }
                5 => {
                    let expect = if rng.below(2) == 0 {
                        None
                    } else {
                        Some(if cur_version > 0 && rng.below(2) == 0 { cur_version } else { high + 1 })
                    };
                    let want = match (&cur, expect) {
                        (None, _) => refused("absent"),
                        (Some(_), None) => Want { applied: true, reason: None, value: cur_value.clone() },
                        (Some((_, v)), Some(e)) if *v == e => {
                            Want { applied: true, reason: None, value: cur_value.clone() }
                        }
                        (Some(_), Some(_)) => refused("version"),
                    };
                    (KvOp::Delete { ns, key: key_s, expect: expect.map(|e| e as u64), required: false }, want)
                }
                6 => {
                    let expect = if rng.below(3) == 0 {
                        Expect::Absent
                    } else if rng.below(2) == 0 {
                        Expect::from_wire(cur_version.max(1) as u64)
                    } else {
                        Expect::from_wire(high as u64 + 1)
                    };
                    let want = match (&cur, expect) {
                        (None, Expect::Absent) => {
                            Want { applied: true, reason: None, value: serde_json::Value::Null }
                        }
                        (Some(_), Expect::Absent) => refused("exists"),
                        (None, Expect::Version(_)) => refused("absent"),
                        (Some((_, v)), Expect::Version(e)) if *v == e.get() as i64 => {
                            Want { applied: true, reason: None, value: serde_json::Value::Null }
                        }
                        (Some(_), Expect::Version(_)) => refused("version"),
                    };
                    (KvOp::Check { ns, key: key_s, expect, required: false }, want)
                }
                _ => {
                    let delta = rng.below(7) as i64 - 3;
                    let max = if rng.below(2) == 0 { Some(rng.below(10) as i64) } else { None };
                    let min = if rng.below(2) == 0 { Some(-(rng.below(10) as i64)) } else { None };
                    let want = match &cur_value {
                        serde_json::Value::Number(n) if cur.is_some() => {
                            let next = n.as_i64().unwrap() + delta;
                            if max.is_some_and(|m| next > m) || min.is_some_and(|m| next < m) {
                                refused("limit")
                            } else {
                                Want { applied: true, reason: None, value: serde_json::json!(next) }
                            }
                        }
                        _ if cur.is_some() => refused("type"),
                        _ => {
                            if max.is_some_and(|m| delta > m) || min.is_some_and(|m| delta < m) {
                                Want { applied: false, reason: Some("limit"), value: serde_json::json!(0) }
                            } else {
                                Want { applied: true, reason: None, value: serde_json::json!(delta) }
                            }
                        }
                    };
                    let num = |x: i64| RawValue::from_string(x.to_string()).unwrap();
                    (
                        KvOp::Incr {
                            ns,
                            key: key_s,
                            delta: num(delta),
                            min: min.map(num),
                            max: max.map(num),
                            expiry: Expiry::Forever,
                            required: false,
                        },
                        want,
                    )
                }
            };
            ops.push(op);
            wants.push((*key, want));
        }
        let rs = run(&b.engine, ops.clone()).await;
        let mut applied_versions = Vec::new();
        for ((key, want), (r, op)) in wants.iter().zip(rs.iter().zip(&ops)) {
            let what = format!("{op:?} on {key} (model {:?})", model.get(key));
            assert_eq!(r.applied, Some(want.applied), "{what}: {r:?}");
            assert_eq!(r.reason.as_deref(), want.reason, "{what}: {r:?}");
            let is_check = matches!(op, KvOp::Check { .. });
            if !(is_check && want.applied) {
                let got: serde_json::Value =
                    serde_json::from_str(r.value.as_ref().expect("value").get()).unwrap();
                assert_eq!(got, want.value, "{what}");
            }
            let version = r.version.expect("version") as i64;
            let cur_version = model.get(key).map(|c| c.1).unwrap_or(0);
            let writes = want.applied && !is_check;
            if writes && !matches!(op, KvOp::Delete { .. }) {
                assert!(version > high, "{what}: a new version above every earlier one");
                applied_versions.push(version);
                model.insert(key, (want.value.clone(), version));
            } else {
                assert_eq!(
                    version,
                    if want.reason == Some("limit") && cur_version == 0 { 0 } else { cur_version },
                    "{what}"
                );
                if writes {
                    model.remove(key);
                }
            }
        }
        high = applied_versions.into_iter().max().unwrap_or(high).max(high);
        // The store agrees with the model.
        let r = run(
            &b.engine,
            vec![KvOp::GetPrefix {
                ns: NS.into(),
                prefix: "k:".into(),
                after: None,
                limit: None,
                keys_only: false,
            }],
        )
        .await
        .remove(0);
        let stored: Vec<(String, serde_json::Value, i64)> = r
            .rows
            .unwrap()
            .into_iter()
            .map(|row| (row.key, serde_json::from_str(row.value.unwrap().get()).unwrap(), row.version as i64))
            .collect();
        let want: Vec<(String, serde_json::Value, i64)> =
            model.iter().map(|(k, (v, ver))| (k.to_string(), v.clone(), *ver)).collect();
        assert_eq!(stored, want);
    }
}
