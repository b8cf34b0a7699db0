//! The embedded default: a private PostgreSQL cluster from the system's
//! binaries, under a data directory, reachable only over a Unix socket.
//!
//! initdb refuses to run as root, so when we are root the cluster belongs to
//! an unprivileged account (`postgres` if it exists, else `nobody`) and every
//! PostgreSQL command runs as that account.

use std::os::unix::fs::{chown, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use queen_engine::DbConfig;

/// Socket "port" of the private cluster; it never listens on TCP.
const PORT: u16 = 6633;
/// The superuser initdb creates.
const USER: &str = "queen";

/// A running private cluster.
pub struct EmbeddedPostgres {
    bin: PathBuf,
    data: PathBuf,
    socket: PathBuf,
    owner: Option<(u32, u32)>,
    started_here: bool,
}

/// `/var/lib/queen` for root, else `$XDG_DATA_HOME/queen` or `~/.local/share/queen`.
pub fn default_data_dir() -> anyhow::Result<PathBuf> {
    if running_as_root() {
        return Ok(PathBuf::from("/var/lib/queen"));
    }
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(xdg).join("queen"));
    }
    let home = std::env::var_os("HOME").context("HOME is not set; pass --data-dir")?;
    Ok(PathBuf::from(home).join(".local/share/queen"))
}

fn running_as_root() -> bool {
    // /proc/self belongs to the effective user.
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// uid and gid of a local account, from /etc/passwd.
fn account(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// The directory holding initdb, pg_ctl and postgres: the newest
/// /usr/lib/postgresql/N/bin, else whatever PATH has.
fn find_binaries() -> anyhow::Result<PathBuf> {
    // An explicit choice (also how the tests simulate a machine without PostgreSQL).
    if let Some(dir) = std::env::var_os("QUEEN_PG_BIN_DIR").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if dir.join("initdb").exists() && dir.join("pg_ctl").exists() {
            return Ok(dir);
        }
        bail!("{}\n(QUEEN_PG_BIN_DIR={} holds no initdb and pg_ctl)", missing_binaries(), dir.display());
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").exists() && dir.join("pg_ctl").exists() {
                return Ok(dir);
            }
        }
    }
    bail!("{}", missing_binaries())
}

fn missing_binaries() -> &'static str {
    "queen serve was given no database, so it wants to start a private PostgreSQL, \
         but the PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed.\n\
         Install them, then run queen serve again:\n  \
         Debian/Ubuntu: apt-get update && apt-get install -y postgresql\n  \
         Fedora/RHEL:   dnf install -y postgresql-server\n  \
         macOS:         brew install postgresql@15\n\
         Or point queen at a running server: queen serve --database-url postgres://user@host/db"
}

impl EmbeddedPostgres {
    /// Initialises the cluster on first use, starts it (or reuses a running one).
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let bin = find_binaries()?;
        let owner = if running_as_root() {
            Some(account("postgres").or_else(|| account("nobody")).context(
                "running as root, and neither a `postgres` nor a `nobody` account exists to own the cluster",
            )?)
        } else {
            None
        };
        let data = dir.join("postgres");
        let socket = dir.join("socket");
        for d in [dir, data.as_path(), socket.as_path()] {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            if let Some((uid, gid)) = owner {
                chown(d, Some(uid), Some(gid)).with_context(|| format!("cannot chown {}", d.display()))?;
            }
        }
        let mut pg = EmbeddedPostgres { bin, data, socket, owner, started_here: false };
        if !pg.data.join("PG_VERSION").exists() {
            tracing::info!(dir = %pg.data.display(), "initialising a private PostgreSQL cluster");
            let auth_user = format!("--username={USER}");
            let out = pg
                .command("initdb")
                .args(["--auth=trust", "--encoding=UTF8", "--locale=C", auth_user.as_str(), "-D"])
                .arg(&pg.data)
                .output()
                .context("cannot run initdb")?;
            if !out.status.success() {
                bail!("initdb failed:\n{}", String::from_utf8_lossy(&out.stderr));
            }
        }
        let running = pg.command("pg_ctl").arg("status").arg("-D").arg(&pg.data).output()?;
        if running.status.success() {
            tracing::info!("reusing the private PostgreSQL that is already running");
        } else {
            let options = format!(
                "-c listen_addresses='' -k {} -p {PORT} -c max_connections=200 -c fsync=on",
                pg.socket.display()
            );
            let log = pg.data.join("postgres.log");
            let out = pg
                .command("pg_ctl")
                .arg("start")
                .arg("-w")
                .arg("-t")
                .arg("60")
                .arg("-D")
                .arg(&pg.data)
                .arg("-l")
                .arg(&log)
                .arg("-o")
                .arg(options)
                .output()
                .context("cannot run pg_ctl start")?;
            if !out.status.success() {
                bail!(
                    "the private PostgreSQL did not start (log: {}):\n{}",
                    log.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            pg.started_here = true;
            tracing::info!(socket = %pg.socket.display(), "private PostgreSQL started");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(pg)
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
            // The account's cwd must be readable by it.
            cmd.current_dir("/");
        }
        cmd
    }

    /// How to reach the cluster.
    pub fn db_config(&self) -> DbConfig {
        DbConfig {
            url: None,
            host: self.socket.display().to_string(),
            port: PORT,
            user: USER.into(),
            password: None,
            dbname: "postgres".into(),
            ..DbConfig::default()
        }
    }

    /// Stops the cluster if this process started it.
    pub async fn stop(self) {
        if !self.started_here {
            return;
        }
        match self.command("pg_ctl").arg("stop").arg("-m").arg("fast").arg("-D").arg(&self.data).output() {
            Ok(out) if out.status.success() => tracing::info!("private PostgreSQL stopped"),
            Ok(out) => {
                tracing::warn!(stderr = %String::from_utf8_lossy(&out.stderr), "pg_ctl stop failed")
            }
            Err(e) => tracing::warn!(error = %e, "cannot run pg_ctl stop"),
        }
    }
}
