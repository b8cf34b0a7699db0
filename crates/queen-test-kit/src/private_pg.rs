//! A private PostgreSQL cluster for tests that stop and start PostgreSQL
//! (initdb/pg_ctl from the system's binaries, in a temp dir, on a free TCP
//! port, owned by an unprivileged account when we run as root), so the
//! shared test server on 5432 is never touched.

use std::os::unix::fs::{chown, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// A private PostgreSQL cluster, stopped and deleted when dropped.
pub struct PrivatePg {
    bin: PathBuf,
    pub dir: PathBuf,
    pub port: u16,
    owner: Option<(u32, u32)>,
}

/// uid and gid of a local account, from /etc/passwd.
fn account(name: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

fn pg_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("QUEEN_PG_BIN_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql)")
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().expect("no /usr/lib/postgresql/N/bin/initdb").1
}

impl PrivatePg {
    /// initdb in a fresh temp dir and start on a free port.
    pub fn start() -> Self {
        let running_as_root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
        let owner = running_as_root.then(|| {
            account("postgres")
                .or_else(|| account("nobody"))
                .expect("an unprivileged account to own the cluster")
        });
        let dir = std::env::temp_dir().join(format!("queen-pgrestart-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("socket")).expect("create the cluster dir");
        if let Some((uid, gid)) = owner {
            for d in [dir.clone(), dir.join("socket")] {
                chown(&d, Some(uid), Some(gid)).expect("chown the cluster dir");
            }
        }
        let pg = PrivatePg { bin: pg_bin(), port: crate::free_port(), dir, owner };
        let out = pg
            .command("initdb")
            .args(["--auth=trust", "--encoding=UTF8", "--locale=C", "--username=postgres", "--no-sync", "-D"])
            .arg(pg.data())
            .output()
            .expect("run initdb");
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        pg.pg_ctl_start();
        pg
    }

    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid).current_dir("/");
        }
        cmd
    }

    pub fn pg_ctl_start(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=50 -c fsync=on",
            self.port,
            self.dir.join("socket").display()
        );
        let out = self
            .command("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("postgres.log"))
            .arg("-o")
            .arg(options)
            .output()
            .expect("run pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log_tail()
        );
    }

    /// `pg_ctl stop -m <mode>` of this cluster only.
    pub fn pg_ctl_stop(&self, mode: &str) {
        let out = self
            .command("pg_ctl")
            .args(["stop", "-w", "-t", "60", "-m", mode, "-D"])
            .arg(self.data())
            .output()
            .expect("run pg_ctl stop");
        assert!(out.status.success(), "pg_ctl stop failed: {}", String::from_utf8_lossy(&out.stderr));
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default();
        log.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    pub async fn sql(&self, db: &str) -> tokio_postgres::Client {
        let (client, conn) =
            tokio_postgres::connect(&self.url(db), tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(conn);
        client
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = self.command("pg_ctl").args(["stop", "-m", "immediate", "-D"]).arg(self.data()).output();
        if std::thread::panicking() {
            eprintln!(
                "keeping the private cluster's files in {} (log tail:)\n{}",
                self.dir.display(),
                self.log_tail()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
