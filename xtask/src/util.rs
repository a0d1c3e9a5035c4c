//! Helpers shared by the xtask subcommands: running commands so that a failure
//! names the whole command, and finding tools on `PATH`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};

/// The command line as a shell would show it: `KEY=VALUE program arg …`.
pub fn display(cmd: &Command) -> String {
    let mut parts: Vec<String> =
        cmd.get_envs().filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), quote(v)))).collect();
    parts.push(quote(cmd.get_program()));
    parts.extend(cmd.get_args().map(quote));
    let line = parts.join(" ");
    match cmd.get_current_dir() {
        Some(dir) => format!("(cd {} && {line})", dir.display()),
        None => line,
    }
}

fn quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=+:,@%".contains(c)) {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Runs `cmd` with inherited stdio; fails naming the whole command unless it exits 0.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let line = display(cmd);
    eprintln!("+ {line}");
    let status = cmd.status().with_context(|| format!("failed to start `{line}`"))?;
    if !status.success() {
        bail!("`{line}` failed with {status}");
    }
    Ok(())
}

/// Runs `cmd` with its stdout and stderr in the file `log`; fails naming the
/// whole command, with the log's last lines, unless it exits 0.
pub fn run_logged(cmd: &mut Command, log: &Path) -> anyhow::Result<()> {
    let line = display(cmd);
    eprintln!("+ {line} &> {}", log.display());
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .with_context(|| format!("failed to start `{line}`"))?;
    if !status.success() {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("`{line}` failed with {status}; last lines of {}:\n{}", log.display(), tail.join("\n"));
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout; fails naming the whole command (with its stderr).
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let line = display(cmd);
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("failed to start `{line}`"))?;
    if !out.status.success() {
        bail!("`{line}` failed with {}:\n{}", out.status, String::from_utf8_lossy(&out.stderr).trim_end());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// True when `cmd` starts and exits 0 (its output is discarded).
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// The first executable called `name` on `PATH` (plus the sbin directories, which a
/// non-login root shell may lack).
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// A `cargo` command for the pinned nightly, cleaned of the variables the outer
/// `cargo xtask` (stable) set, so they do not leak into the nightly build.
pub fn nightly_cargo() -> Command {
    let mut cmd = Command::new("cargo");
    cmd.arg("+nightly");
    for var in ["RUSTUP_TOOLCHAIN", "RUSTC", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER", "RUSTFLAGS", "CARGO"] {
        cmd.env_remove(var);
    }
    cmd
}
