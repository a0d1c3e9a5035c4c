//! Test support: throwaway databases.
//!
//! [`TempPostgres`] runs a private PostgreSQL server from the local
//! installation (`initdb`/`pg_ctl` on PATH or under `/usr/lib/postgresql/*/bin`)
//! in a temporary directory, on 127.0.0.1 and a free port, with `fsync=off`.
//! One shared server per test process is enough: [`TempPostgres::shared_or_skip`]
//! starts it on first use and gives each test its own database through
//! [`TempPostgres::fresh_database`].
//!
//! ```no_run
//! # async fn t() {
//! use lagran::testkit::TempPostgres;
//! let Some(pg) = TempPostgres::shared_or_skip("store::nodes_crud") else { return };
//! let url = pg.fresh_database().await;
//! let store = lagran::store::Store::connect(&url).await.unwrap();
//! # }
//! ```
//!
//! When PostgreSQL is not installed, tests skip with a note on stderr — unless
//! `CI` is set or `LAGRAN_REQUIRE_PG=1`, where they fail. PostgreSQL refuses to
//! run as root, so when the tests run as root the server runs as the `postgres`
//! system user (or `nobody`), through `runuser` (or `su`).
//!
//! Cleanup: dropping a [`TempPostgres`] stops the server (`pg_ctl stop -m
//! immediate`) and removes its directory, also when a test panics. Every
//! server also has a watchdog process that does the same once the test
//! process has exited, which is what stops the shared server (statics are
//! never dropped) and covers aborts.

use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why a throwaway PostgreSQL server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    #[error("PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or in /usr/lib/postgresql/*/bin")]
    NotInstalled,
    #[error("running as root, but neither the `postgres` nor the `nobody` user exists to run PostgreSQL")]
    NoUser,
    #[error("`{command}` failed ({status}):\n{output}")]
    Command { command: String, status: String, output: String },
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestkitError {
    let context = context.into();
    move |source| TestkitError::Io { context, source }
}

/// A SQLite URL for a database file inside `dir` (created on connect).
pub fn temp_sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("lagran.db").display())
}

/// Whether tests that need PostgreSQL must fail rather than skip without it:
/// `CI` is set (to anything but empty, `0` or `false`) or `LAGRAN_REQUIRE_PG=1`.
pub fn postgres_required() -> bool {
    let ci = std::env::var("CI")
        .map(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
        .unwrap_or(false);
    ci || std::env::var("LAGRAN_REQUIRE_PG").is_ok_and(|v| v.trim() == "1")
}

/// The directory holding `initdb` and `pg_ctl`: PATH first (symlinks resolved,
/// so `pg_ctl` finds its `postgres`), then the newest `/usr/lib/postgresql/*/bin`.
fn find_bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let initdb = dir.join("initdb");
            if initdb.is_file() {
                let real = std::fs::canonicalize(&initdb).unwrap_or_else(|_| initdb.clone());
                if let Some(real_dir) = real.parent().filter(|d| has_both(d)) {
                    return Some(real_dir.to_path_buf());
                }
                if has_both(&dir) {
                    return Some(dir);
                }
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            has_both(&bin).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Whether this process runs as root (PostgreSQL then needs another user).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `(user, uid, gid)` of an existing system user, via `id`.
fn lookup_user(user: &str) -> Option<(String, u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").arg(flag).arg(user).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((user.to_string(), id("-u")?, id("-g")?))
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Single-quotes `s` for /bin/sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// How to run a program as the server's user.
#[derive(Clone, Debug)]
enum RunAs {
    /// We are not root: run directly.
    Me,
    Runuser(PathBuf, String),
    Su(PathBuf, String),
}

impl RunAs {
    fn command(&self, program: &Path, args: &[String]) -> Command {
        match self {
            RunAs::Me => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            RunAs::Runuser(runuser, user) => {
                let mut c = Command::new(runuser);
                c.arg("-u").arg(user).arg("--").arg(program).args(args);
                c
            }
            RunAs::Su(su, user) => {
                let mut c = Command::new(su);
                c.arg("-s").arg("/bin/sh").arg(user).arg("-c").arg(self.shell_line(program, args));
                c
            }
        }
    }

    /// The same command as one /bin/sh line (for the watchdog).
    fn shell_line(&self, program: &Path, args: &[String]) -> String {
        let plain = std::iter::once(program.display().to_string())
            .chain(args.iter().cloned())
            .map(|a| sh_quote(&a))
            .collect::<Vec<_>>()
            .join(" ");
        match self {
            RunAs::Me => plain,
            RunAs::Runuser(runuser, user) => {
                format!("{} -u {} -- {plain}", sh_quote(&runuser.display().to_string()), sh_quote(user))
            }
            RunAs::Su(su, user) => {
                format!("{} -s /bin/sh {} -c {}", sh_quote(&su.display().to_string()), sh_quote(user), sh_quote(&plain))
            }
        }
    }
}

fn run(mut cmd: Command, what: &str) -> Result<Output, TestkitError> {
    let out = cmd.stdin(Stdio::null()).output().map_err(io_err(format!("running {what}")))?;
    if !out.status.success() {
        return Err(TestkitError::Command {
            command: what.to_string(),
            status: out.status.to_string(),
            output: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(out)
}

fn free_port() -> Result<u16, TestkitError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io_err("finding a free port"))?;
    let port = listener.local_addr().map_err(io_err("finding a free port"))?.port();
    Ok(port)
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique_suffix() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// A private PostgreSQL server in a temporary directory; stopped and removed on drop.
#[derive(Debug)]
pub struct TempPostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as: RunAs,
    watchdog: Option<Child>,
    stopped: bool,
}

impl TempPostgres {
    /// Whether a PostgreSQL server installation (`initdb`, `pg_ctl`) was found.
    pub fn available() -> bool {
        find_bin_dir().is_some()
    }

    /// Starts a new private server (a few seconds). Most tests want
    /// [`TempPostgres::shared_or_skip`] instead.
    pub fn start() -> Result<TempPostgres, TestkitError> {
        let bin = find_bin_dir().ok_or(TestkitError::NotInstalled)?;
        let (run_as, owner) = if running_as_root() {
            let (user, uid, gid) =
                lookup_user("postgres").or_else(|| lookup_user("nobody")).ok_or(TestkitError::NoUser)?;
            let run_as = match (find_on_path("runuser"), find_on_path("su")) {
                (Some(runuser), _) => RunAs::Runuser(runuser, user),
                (None, Some(su)) => RunAs::Su(su, user),
                (None, None) => return Err(TestkitError::NoUser),
            };
            (run_as, Some((uid, gid)))
        } else {
            (RunAs::Me, None)
        };

        let dir = std::env::temp_dir().join(format!("lagran-pg-{}", unique_suffix()));
        std::fs::create_dir(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let mut server = TempPostgres { dir, bin, port: 0, run_as, watchdog: None, stopped: true };
        // From here on, dropping `server` removes the directory.
        std::fs::set_permissions(&server.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io_err(format!("restricting {}", server.dir.display())))?;
        std::fs::create_dir(server.dir.join("sock")).map_err(io_err("creating the socket directory"))?;
        if let Some((uid, gid)) = owner {
            for d in [server.dir.clone(), server.dir.join("sock")] {
                std::os::unix::fs::chown(&d, Some(uid), Some(gid))
                    .map_err(io_err(format!("handing {} to the server user", d.display())))?;
            }
        }

        let data = server.data_dir();
        let initdb_args: Vec<String> = vec![
            "-D".into(),
            data.clone(),
            "-U".into(),
            "postgres".into(),
            "-A".into(),
            "trust".into(),
            "-E".into(),
            "UTF8".into(),
            "--locale=C".into(),
            "-N".into(),
        ];
        let mut initdb = server.run_as.command(&server.bin.join("initdb"), &initdb_args);
        initdb.current_dir(&server.dir);
        run(initdb, "initdb")?;

        server.spawn_watchdog()?;
        // The free port may be taken between probing and binding: retry.
        let mut last_err = None;
        for _ in 0..5 {
            server.port = free_port()?;
            match server.pg_ctl_start() {
                Ok(()) => {
                    server.stopped = false;
                    return Ok(server);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or(TestkitError::NotInstalled))
    }

    fn data_dir(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn pg_ctl_start(&self) -> Result<(), TestkitError> {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=300",
            self.port,
            self.dir.join("sock").display()
        );
        let args: Vec<String> = vec![
            "-D".into(),
            self.data_dir(),
            "-l".into(),
            self.dir.join("postgres.log").display().to_string(),
            "-w".into(),
            "-t".into(),
            "60".into(),
            "-o".into(),
            options,
            "start".into(),
        ];
        // The server pg_ctl leaves running has its output redirected to the
        // log file, so capturing pg_ctl's own output does not hang.
        let mut cmd = self.run_as.command(&self.bin.join("pg_ctl"), &args);
        cmd.current_dir(&self.dir);
        match run(cmd, "pg_ctl start") {
            Ok(_) => Ok(()),
            Err(TestkitError::Command { command, status, output }) => Err(TestkitError::Command {
                command,
                status,
                output: format!(
                    "{output}\nserver log:\n{}",
                    std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
                ),
            }),
            Err(e) => Err(e),
        }
    }

    fn stop_args(&self) -> Vec<String> {
        vec!["-D".into(), self.data_dir(), "stop".into(), "-m".into(), "immediate".into(), "-w".into()]
    }

    /// A detached shell that waits for this process to exit, then stops the
    /// server and removes its directory.
    fn spawn_watchdog(&mut self) -> Result<(), TestkitError> {
        let stop = self.run_as.shell_line(&self.bin.join("pg_ctl"), &self.stop_args());
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop} >/dev/null 2>&1; rm -rf {dir}",
            pid = std::process::id(),
            dir = sh_quote(&self.dir.display().to_string()),
        );
        let child = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C to the test run must not kill the cleanup.
            .process_group(0)
            .spawn()
            .map_err(io_err("starting the PostgreSQL watchdog"))?;
        self.watchdog = Some(child);
        Ok(())
    }

    /// The process-wide shared server, started on first use.
    pub fn shared() -> Result<&'static TempPostgres, &'static TestkitError> {
        static SHARED: OnceLock<Result<TempPostgres, TestkitError>> = OnceLock::new();
        SHARED.get_or_init(TempPostgres::start).as_ref()
    }

    /// The shared server for a test that needs PostgreSQL.
    ///
    /// - installed: starts it on first use; panics if it cannot start;
    /// - not installed and [`postgres_required`]: panics;
    /// - not installed otherwise: prints a note naming `test` and returns `None`
    ///   (the test should return early).
    pub fn shared_or_skip(test: &str) -> Option<&'static TempPostgres> {
        if !TempPostgres::available() {
            if postgres_required() {
                panic!(
                    "{test}: PostgreSQL is required here (CI or LAGRAN_REQUIRE_PG=1) but \
                     initdb/pg_ctl were not found on PATH or in /usr/lib/postgresql/*/bin; \
                     install the `postgresql` package"
                );
            }
            eprintln!("note: {test}: skipped, PostgreSQL server binaries not installed");
            return None;
        }
        match TempPostgres::shared() {
            Ok(pg) => Some(pg),
            Err(e) => panic!("{test}: could not start a throwaway PostgreSQL server: {e}"),
        }
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// URL of the server's `postgres` database (superuser `postgres`, no password).
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    fn database_url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a new, empty database and returns its URL. Panics (it is test
    /// support) when the server does not accept it.
    pub async fn fresh_database(&self) -> String {
        use sqlx::Connection;
        let name = format!("lagran_test_{}", unique_suffix().replace('-', "_"));
        let mut conn = sqlx::postgres::PgConnection::connect(&self.url())
            .await
            .unwrap_or_else(|e| panic!("connecting to the test server at {}: {e}", self.url()));
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("creating test database {name}: {e}"));
        let _ = conn.close().await;
        self.database_url(&name)
    }

    /// SIGKILLs the server's postmaster, as a crash would (no shutdown
    /// checkpoint; its backends exit when they notice). For fault injection.
    pub fn kill(&mut self) -> Result<(), TestkitError> {
        let pid_file = self.dir.join("data").join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).map_err(io_err(format!("reading {}", pid_file.display())))?;
        let pid: i32 = text.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(0);
        if pid <= 0 {
            return Err(TestkitError::NotInstalled);
        }
        // SAFETY: kill(2) on the postmaster's pid, read from its own pid file.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        self.stopped = true;
        Ok(())
    }

    /// Starts the server again on the same port and data directory (after
    /// [`TempPostgres::kill`] or [`TempPostgres::stop`]): crash recovery runs first.
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.pg_ctl_start()?;
        self.stopped = false;
        Ok(())
    }

    /// Stops the server now (also done on drop).
    pub fn stop(&mut self) {
        if !self.stopped {
            self.stopped = true;
            let mut cmd = self.run_as.command(&self.bin.join("pg_ctl"), &self.stop_args());
            cmd.current_dir(&self.dir);
            if let Err(e) = run(cmd, "pg_ctl stop") {
                eprintln!("warning: stopping the test PostgreSQL server: {e}");
            }
        }
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        self.stop();
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn private_server_serves_and_is_removed_on_drop() {
        if !TempPostgres::available() {
            assert!(!postgres_required(), "PostgreSQL is required here but not installed");
            eprintln!("note: testkit: skipped, PostgreSQL server binaries not installed");
            return;
        }
        let pg = TempPostgres::start().expect("starting a private PostgreSQL server");
        let dir = pg.dir.clone();
        let url = pg.fresh_database().await;
        let other = pg.fresh_database().await;
        assert_ne!(url, other, "every call gives a new database");
        let store = crate::store::Store::connect(&url).await.expect("connecting to the fresh database");
        store.ping().await.expect("the server answers");
        store.close().await;
        drop(pg);
        assert!(!dir.exists(), "dropping the server removes {}", dir.display());
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
