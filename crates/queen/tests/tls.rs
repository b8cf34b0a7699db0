//! TLS end to end, with certificates made here (rcgen):
//! - the broker connects to a PostgreSQL that accepts only TLS, with libpq's
//!   sslmode rules (verify-full checks the host name, verify-ca does not, a
//!   foreign CA is refused);
//! - the broker serves HTTPS, and the SDK and the CLI speak it.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::free_port;
use queen_client::{HttpConfig, Queen, RetryPolicy};
use queen_engine::{DbConfig, Engine, EngineError, EngineOptions};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::json;

/// A CA and files signed by it, in a directory of their own.
struct Pki {
    dir: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new(dir: &Path, name: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let pki = Pki { dir: dir.to_owned(), issuer };
        std::fs::write(pki.ca_path(), pki.issuer.pem()).unwrap();
        pki
    }

    fn ca_path(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A server certificate for `names` (DNS names or IP addresses): (cert, key) paths.
    fn server(&self, stem: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (cert_path, key_path) =
            (self.dir.join(format!("{stem}.crt")), self.dir.join(format!("{stem}.key")));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (cert_path, key_path)
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("queen-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// uid and gid of `postgres` (initdb refuses root).
fn postgres_account() -> (u32, u32) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == "postgres").then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
        })
        .expect("a postgres account (the PostgreSQL package creates it)")
}

/// A private PostgreSQL on 127.0.0.1 that accepts TLS connections only.
struct TlsPostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    owner: Option<(u32, u32)>,
}

impl TlsPostgres {
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid).current_dir("/");
        }
        cmd
    }

    fn start(dir: &Path, cert: &Path, key: &Path) -> Self {
        let bin = PathBuf::from("/usr/lib/postgresql/15/bin");
        let owner = running_as_root().then(postgres_account);
        let data = dir.join("pgdata");
        let pg = TlsPostgres { bin, data: data.clone(), port: free_port(), owner };
        for path in [dir.to_path_buf(), data.clone()] {
            std::fs::create_dir_all(&path).unwrap();
            if let Some((uid, gid)) = owner {
                chown(&path, Some(uid), Some(gid)).unwrap();
            }
        }
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let out = pg
            .command("initdb")
            .args(["--auth=trust", "--username=queen", "--encoding=UTF8", "--locale=C", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        // The server's certificate and key live in its data directory, owned by it.
        for (from, to) in [(cert, "server.crt"), (key, "server.key")] {
            let target = data.join(to);
            std::fs::copy(from, &target).unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
            if let Some((uid, gid)) = owner {
                chown(&target, Some(uid), Some(gid)).unwrap();
            }
        }
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
        )
        .unwrap();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c ssl=on -c ssl_cert_file=server.crt -c ssl_key_file=server.key",
            pg.port,
            data.display()
        );
        let out = pg
            .command("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(&data)
            .arg("-l")
            .arg(data.join("log"))
            .arg("-o")
            .arg(options)
            .output()
            .unwrap();
        assert!(out.status.success(), "pg_ctl start: {}", String::from_utf8_lossy(&out.stderr));
        pg
    }

    fn url(&self, host: &str, query: &str) -> String {
        format!("postgres://queen@{host}:{}/postgres?{query}", self.port)
    }

    /// Over the Unix socket (no TLS there): how many of the broker's
    /// connections are encrypted, and how many it has.
    async fn broker_connections(&self) -> (i64, i64) {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host_path(&self.data).port(self.port).user("queen").dbname("postgres");
        let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let row = client
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_activity a \
                 JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'queen-rs'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    }
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let _ = self.command("pg_ctl").args(["stop", "-m", "immediate", "-D"]).arg(&self.data).output();
    }
}

async fn engine_on(url: String) -> Result<Arc<Engine>, EngineError> {
    let db = DbConfig { url: Some(url), pool_size: 2, ..DbConfig::default() };
    let engine = Arc::new(Engine::connect(&db, EngineOptions::default())?);
    engine.migrate().await?;
    Ok(engine)
}

#[tokio::test]
async fn the_engine_reaches_postgres_over_tls_under_libpq_sslmode_rules() {
    let dir = scratch("pg");
    let pki = Pki::new(&dir.join("pki"), "queen test CA");
    let other = Pki::new(&dir.join("other"), "someone else's CA");
    // The server's certificate names localhost only, so 127.0.0.1 is a mismatch.
    let (cert, key) = pki.server("pg", &["localhost"]);
    let pg = TlsPostgres::start(&dir, &cert, &key);
    let ca = pki.ca_path().display().to_string();

    // verify-full: the chain and the name check out; the data goes through.
    let engine = engine_on(pg.url("localhost", &format!("sslmode=verify-full&sslrootcert={ca}")))
        .await
        .expect("verify-full with our CA and the right name");
    let queen = Queen::embedded(engine.clone());
    queen.queue("tls-q").push(&json!({"over": "tls"})).await.unwrap();
    let got = queen.queue("tls-q").pop().batch(1).fetch().await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json::<serde_json::Value>().unwrap(), json!({"over": "tls"}));
    let (encrypted, all) = pg.broker_connections().await;
    assert!(all > 0, "the broker holds connections");
    assert_eq!(encrypted, all, "every broker connection is TLS");
    engine.close();

    // verify-full refuses a certificate that does not name the host...
    let err = engine_on(pg.url("127.0.0.1", &format!("sslmode=verify-full&sslrootcert={ca}")))
        .await
        .err()
        .expect("the name does not match");
    assert!(matches!(err, EngineError::Unavailable(_)), "{err}");
    // ...where verify-ca checks only the chain.
    let engine = engine_on(pg.url("127.0.0.1", &format!("sslmode=verify-ca&sslrootcert={ca}")))
        .await
        .expect("verify-ca ignores the name");
    engine.close();

    // A certificate from another CA is refused under both.
    let foreign = other.ca_path().display().to_string();
    for mode in ["verify-full", "verify-ca"] {
        let err = engine_on(pg.url("localhost", &format!("sslmode={mode}&sslrootcert={foreign}")))
            .await
            .err()
            .unwrap_or_else(|| panic!("{mode} must refuse a foreign CA"));
        assert!(matches!(err, EngineError::Unavailable(_)), "{err}");
    }

    // require encrypts without checking; disable is plain, which this server refuses.
    engine_on(pg.url("127.0.0.1", "sslmode=require")).await.expect("require").close();
    let err = engine_on(pg.url("localhost", "sslmode=disable")).await.err().expect("plain is refused");
    assert!(err.to_string().contains("no encryption") || err.to_string().contains("reject"), "{err}");

    // A bad option is a clear start-up error, not a connection attempt.
    let err = Engine::connect(
        &DbConfig {
            url: Some(pg.url("localhost", "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")),
            ..DbConfig::default()
        },
        EngineOptions::default(),
    )
    .err()
    .expect("a missing CA file");
    assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `queen serve` child over HTTPS, on a TLS PostgreSQL.
struct HttpsBroker {
    child: std::process::Child,
    port: u16,
}

impl Drop for HttpsBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn the_broker_serves_https_and_the_sdk_and_cli_speak_it() {
    let dir = scratch("https");
    let pki = Pki::new(&dir.join("pki"), "queen test CA");
    let (pg_cert, pg_key) = pki.server("pg", &["localhost"]);
    let pg = TlsPostgres::start(&dir, &pg_cert, &pg_key);
    let (cert, key) = pki.server("broker", &["localhost", "127.0.0.1"]);
    let ca_pem = std::fs::read(pki.ca_path()).unwrap();
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_queen"));
    child
        .arg("serve")
        .env(
            "QUEEN_DATABASE_URL",
            pg.url("localhost", &format!("sslmode=verify-full&sslrootcert={}", pki.ca_path().display())),
        )
        .env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env("DB_POOL_SIZE", "4")
        .env("QUEEN_TLS_CERT", &cert)
        .env("QUEEN_TLS_KEY", &key)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("broker.log")).unwrap());
    let broker = HttpsBroker { child: child.spawn().unwrap(), port };

    let https = format!("https://localhost:{}", broker.port);
    let trusting = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).unwrap())
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = trusting.get(format!("{https}/ready")).send().await {
            if r.status().as_u16() == 200 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no HTTPS health: {}",
            std::fs::read_to_string(dir.join("broker.log")).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The SDK, trusting our CA: push, pop, ack over HTTPS.
    let queen = Queen::http(HttpConfig::new(https.clone()).ca_certificate_pem(ca_pem.clone())).unwrap();
    queen.queue("secure").push(&json!({"n": 1})).await.unwrap();
    let got = queen.queue("secure").pop().batch(1).fetch().await.unwrap();
    assert_eq!(got.len(), 1);
    queen.ack(&got[0]).await.unwrap();

    // Without our CA the SDK refuses the certificate (and says so, no retry loop).
    let stranger = Queen::http(HttpConfig::new(https.clone()).retry(RetryPolicy::none())).unwrap();
    let err = stranger.queue("secure").push(&json!({"n": 2})).await.expect_err("unknown issuer");
    assert!(
        format!("{err:?}").to_lowercase().contains("certificate") || format!("{err}").contains("connect"),
        "{err:?}"
    );
    // Plain HTTP to the HTTPS port gets no answer.
    let plain = reqwest::Client::new().get(format!("http://127.0.0.1:{}/health", broker.port)).send().await;
    assert!(!plain.map(|r| r.status().as_u16() == 200).unwrap_or(false));

    // The CLI, with --ca-cert.
    let ca_path = pki.ca_path().display().to_string();
    let cli = |args: &[&str]| {
        let mut all = vec!["--url", https.as_str(), "--ca-cert", ca_path.as_str(), "--json"];
        all.extend_from_slice(args);
        Command::new(env!("CARGO_BIN_EXE_queen")).args(all).output().unwrap()
    };
    let out = cli(&["push", "secure", r#"{"from":"cli"}"#]);
    assert!(out.status.success(), "cli push: {}", String::from_utf8_lossy(&out.stderr));
    let out = cli(&["pop", "secure"]);
    assert!(out.status.success(), "cli pop: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cli"), "{}", String::from_utf8_lossy(&out.stdout));
    // Without --ca-cert the CLI fails as a broker/network error (exit 1).
    let out = Command::new(env!("CARGO_BIN_EXE_queen"))
        .args(["--url", https.as_str(), "--retries", "0", "push", "secure", "{}"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));

    // And the broker's own connections to PostgreSQL are TLS.
    let (encrypted, all) = pg.broker_connections().await;
    assert!(all > 0);
    assert_eq!(encrypted, all);
    drop(broker);
    drop(pg);
    let _ = std::fs::remove_dir_all(&dir);
}
