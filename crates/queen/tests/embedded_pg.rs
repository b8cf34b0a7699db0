//! `queen serve` with no database settings boots, reuses and stops a
//! private PostgreSQL cluster; without PostgreSQL binaries it says what to
//! install.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

/// `queen serve` with a clean environment: no QUEEN_DATABASE_URL, no PG_*.
fn serve_embedded(dir: &std::path::Path, port: u16) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_queen"));
    cmd.arg("serve").env("PORT", port.to_string()).env("HOST", "127.0.0.1").env("QUEEN_DATA_DIR", dir);
    for (k, _) in std::env::vars() {
        if k.starts_with("PG") || k == "QUEEN_DATABASE_URL" {
            cmd.env_remove(k);
        }
    }
    cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("spawn queen serve")
}

async fn wait_healthy(http: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = http.get(format!("{base}/ready")).send().await {
            if r.status() == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the embedded broker never became healthy");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().expect("kill");
    child.wait().expect("wait")
}

#[tokio::test]
async fn serve_without_database_settings_boots_reuses_and_stops_a_private_cluster() {
    let dir = std::env::temp_dir().join(format!("queen-embedded-{}", uuid::Uuid::new_v4().simple()));
    let http = reqwest::Client::new();

    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut first = serve_embedded(&dir, port);
    wait_healthy(&http, &base).await;
    let pushed = http
        .post(format!("{base}/api/v1/push"))
        .json(&serde_json::json!({"items": [{"queue": "kept", "payload": {"n": 1}, "transactionId": "t1"}]}))
        .send()
        .await
        .expect("push");
    assert_eq!(pushed.status(), 201);
    assert!(terminate(&mut first).success(), "the broker exits cleanly on SIGTERM");
    assert!(dir.join("postgres/PG_VERSION").exists(), "the cluster lives under the data directory");
    assert!(!dir.join("postgres/postmaster.pid").exists(), "the cluster was stopped with the broker");

    // The next start reuses the cluster: the message is still there.
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut second = serve_embedded(&dir, port);
    wait_healthy(&http, &base).await;
    let popped: serde_json::Value = http
        .get(format!("{base}/api/v1/pop/queue/kept?batch=10&wait=false"))
        .send()
        .await
        .expect("pop")
        .json()
        .await
        .expect("json");
    assert_eq!(popped["messages"][0]["transactionId"], "t1");
    assert!(terminate(&mut second).success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_without_postgresql_binaries_says_what_to_install() {
    let dir = std::env::temp_dir().join(format!("queen-nobin-{}", uuid::Uuid::new_v4().simple()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_queen"));
    cmd.arg("serve").env("PORT", free_port().to_string()).env("QUEEN_DATA_DIR", &dir);
    cmd.env("QUEEN_PG_BIN_DIR", "/nonexistent/postgresql/bin");
    for (k, _) in std::env::vars() {
        if k.starts_with("PG") || k == "QUEEN_DATABASE_URL" {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("run");
    assert!(!out.status.success(), "it must fail without binaries");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("apt-get install -y postgresql"), "stderr: {stderr}");
    assert!(stderr.contains("--database-url"), "stderr: {stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
