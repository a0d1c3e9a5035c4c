//! `cargo xtask package --check`: installs the packages with `dpkg --root` into
//! a fresh root and checks what they put there.
//!
//! The root is a minimal system made from this host's installed packages
//! rather than a debootstrap (which needs a mirror): an empty dpkg database,
//! the unit files of the `systemd` package (what `systemd-analyze verify`
//! resolves `multi-user.target` and the rest against) and `/bin/kill` (the
//! units' `ExecReload`). The maintainer scripts run outside the root with
//! `DPKG_ROOT` set (`--force-script-chrootless`), so `systemd-sysusers --root`
//! creates the users in the root's `/etc/passwd`, not the host's.
//!
//! Checked: the packages are installed; every file is where the units and the
//! loader look; the users exist; the conffiles are registered and readable by
//! the service's group only; tmpfiles.d makes the pin directory for the user;
//! `systemd-analyze verify` says nothing about any unit, nor about the XDP
//! drop-ins; the binaries run; a purge removes the conffiles.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail, ensure};

use crate::util;

const UNITS: &[&str] = &[
    "lagran-control.service",
    "lagran-dns.service",
    "lagran-serve.service",
    "lagran-monitor.service",
    "lagran-edge.service",
];
/// Each conffile and the user whose group may read it.
const CONFFILES: &[(&str, &str)] = &[
    ("/etc/lagran/control.toml", "lagran"),
    ("/etc/lagran/dns.toml", "lagran"),
    ("/etc/lagran/serve.toml", "lagran"),
    ("/etc/lagran/monitor.env", "lagran"),
    ("/etc/lagran/edge.toml", "lagran-edge"),
];

pub fn installed(_workspace: &Path, out: &Path, debs: &[PathBuf]) -> anyhow::Result<()> {
    ensure!(
        util::succeeds(Command::new("dpkg").args(["-s", "systemd"])),
        "this check needs systemd installed (dpkg -l systemd)"
    );
    let root = out.join("fresh-root");
    if root.exists() {
        std::fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    minimal_system(&root)?;
    let mut install = dpkg(&root);
    install.args(["--force-script-chrootless", "--force-depends", "--install"]).args(debs);
    util::run(&mut install)?;
    for package in ["lagran", "lagran-edge"] {
        let status = util::output(dpkg(&root).args(["--status", package]))?;
        ensure!(status.contains("Status: install ok installed"), "{package} is not installed:\n{status}");
    }
    files(&root)?;
    users_and_conffiles(&root)?;
    pin_directory(&root)?;
    units(&root)?;
    binaries(&root)?;
    purge(&root)
}

fn dpkg(root: &Path) -> Command {
    let mut c = Command::new("dpkg");
    c.arg(format!("--root={}", root.display())).arg("--log=/dev/null");
    c
}

/// An empty dpkg database, systemd's units and `/bin/kill`, from this host.
fn minimal_system(root: &Path) -> anyhow::Result<()> {
    let db = root.join("var/lib/dpkg");
    for dir in ["info", "updates", "triggers"] {
        std::fs::create_dir_all(db.join(dir))?;
    }
    std::fs::create_dir_all(root.join("etc"))?;
    for file in ["status", "available"] {
        std::fs::write(db.join(file), "")?;
    }
    let listed = util::output(Command::new("dpkg").args(["--listfiles", "systemd"]))?;
    let units = listed
        .lines()
        .filter(|l| l.contains("/systemd/system/") && (l.starts_with("/lib/") || l.starts_with("/usr/lib/")));
    for path in units.chain(["/bin/kill"]) {
        copy_into(root, Path::new(path))?;
    }
    Ok(())
}

/// Copies a file or symlink (not following it) to the same path under `root`.
fn copy_into(root: &Path, path: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let dest = root.join(path.strip_prefix("/")?);
    if meta.is_dir() {
        return std::fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()));
    }
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path)?;
        std::os::unix::fs::symlink(&target, &dest).with_context(|| format!("linking {}", dest.display()))?;
    } else {
        std::fs::copy(path, &dest).with_context(|| format!("copying {}", path.display()))?;
    }
    Ok(())
}

fn files(root: &Path) -> anyhow::Result<()> {
    for bin in ["usr/bin/lagran", "usr/bin/lagran-edge"] {
        let mode = std::fs::metadata(root.join(bin)).with_context(|| format!("/{bin}"))?.permissions().mode();
        ensure!(mode & 0o111 == 0o111, "/{bin} is not executable ({mode:o})");
    }
    // The loader's packaged object: a BPF ELF (e_machine 247, EM_BPF).
    let obj = std::fs::read(root.join("usr/lib/lagran/lagran.bpf.o")).context("/usr/lib/lagran/lagran.bpf.o")?;
    ensure!(obj.starts_with(b"\x7fELF") && obj.get(18..20) == Some(&[247, 0]), "lagran.bpf.o is not a BPF object");
    for unit in UNITS {
        ensure!(root.join("lib/systemd/system").join(unit).is_file(), "/lib/systemd/system/{unit} is missing");
    }
    for f in [
        "usr/lib/sysusers.d/lagran.conf",
        "usr/lib/sysusers.d/lagran-edge.conf",
        "usr/lib/tmpfiles.d/lagran.conf",
        "usr/share/lagran/systemd/lagran-dns.service.d/xdp.conf",
        "usr/share/lagran/systemd/lagran-serve.service.d/xdp.conf",
    ] {
        ensure!(root.join(f).is_file(), "/{f} is missing");
    }
    Ok(())
}

/// A user's uid and gid in the root's `/etc/passwd`, with its home.
fn user(root: &Path, name: &str) -> anyhow::Result<(u32, u32, String)> {
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).context("the root's /etc/passwd")?;
    let line = passwd
        .lines()
        .find(|l| l.split(':').next() == Some(name))
        .with_context(|| format!("no user {name} in the root's /etc/passwd:\n{passwd}"))?;
    let f: Vec<&str> = line.split(':').collect();
    ensure!(f.len() == 7, "malformed passwd line {line:?}");
    Ok((f[2].parse()?, f[3].parse()?, f[5].to_string()))
}

fn users_and_conffiles(root: &Path) -> anyhow::Result<()> {
    let (uid, _, home) = user(root, "lagran")?;
    ensure!(uid < 1000, "lagran is a system user (uid {uid})");
    ensure!(home == "/var/lib/lagran", "lagran's home is its state directory, not {home}");
    let mut registered = util::output(dpkg(root).args(["--status", "lagran"]))?;
    registered += &util::output(dpkg(root).args(["--status", "lagran-edge"]))?;
    for (path, owner) in CONFFILES {
        ensure!(registered.contains(&format!(" {path} ")), "{path} is not a registered conffile:\n{registered}");
        let (_, gid, _) = user(root, owner)?;
        let meta = std::fs::metadata(root.join(&path[1..])).with_context(|| path.to_string())?;
        ensure!(
            meta.uid() == 0 && meta.gid() == gid,
            "{path} belongs to {}:{}, not root:{owner}",
            meta.uid(),
            meta.gid()
        );
        ensure!(meta.mode() & 0o777 == 0o640, "{path} has mode {:o}, not 640", meta.mode() & 0o777);
    }
    Ok(())
}

/// What tmpfiles.d makes at boot, made in the root.
fn pin_directory(root: &Path) -> anyhow::Result<()> {
    util::run(
        Command::new("systemd-tmpfiles").arg(format!("--root={}", root.display())).args(["--create", "lagran.conf"]),
    )?;
    let (uid, gid, _) = user(root, "lagran")?;
    let meta = std::fs::metadata(root.join("sys/fs/bpf/lagran")).context("/sys/fs/bpf/lagran")?;
    ensure!(meta.uid() == uid && meta.gid() == gid, "/sys/fs/bpf/lagran is not lagran's");
    ensure!(meta.mode() & 0o777 == 0o700, "/sys/fs/bpf/lagran has mode {:o}", meta.mode() & 0o777);
    Ok(())
}

/// `systemd-analyze verify` exits 0 on unknown keys and bad values: any output fails.
fn units(root: &Path) -> anyhow::Result<()> {
    verify(root, UNITS)?;
    for unit in ["lagran-dns", "lagran-serve"] {
        let drop_in = format!("systemd/{unit}.service.d/xdp.conf");
        copy_file(&root.join("usr/share/lagran").join(&drop_in), &root.join("etc").join(&drop_in))?;
    }
    verify(root, &["lagran-dns.service", "lagran-serve.service"])
}

fn verify(root: &Path, units: &[&str]) -> anyhow::Result<()> {
    let mut cmd = Command::new("systemd-analyze");
    cmd.arg("verify").arg(format!("--root={}", root.display())).args(units);
    let out = cmd.output().context("running systemd-analyze")?;
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() || !said.trim().is_empty() {
        bail!("`{}`: {}\n{said}", util::display(&cmd), out.status);
    }
    Ok(())
}

fn copy_file(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn binaries(root: &Path) -> anyhow::Result<()> {
    let version = util::output(Command::new(root.join("usr/bin/lagran")).arg("--version"))?;
    ensure!(version.starts_with("lagran "), "lagran --version said {version:?}");
    let mut edge = Command::new(root.join("usr/bin/lagran-edge"));
    edge.arg("--check").arg("--config").arg(root.join("etc/lagran/edge.toml"));
    let said = util::output(&mut edge)?;
    ensure!(said.contains("configuration ok"), "lagran-edge --check said {said:?}");
    Ok(())
}

/// Removing keeps the conffiles; purging removes them.
fn purge(root: &Path) -> anyhow::Result<()> {
    util::run(dpkg(root).args(["--force-script-chrootless", "--remove", "lagran-edge"]))?;
    ensure!(root.join("etc/lagran/edge.toml").exists(), "a remove kept the conffile");
    ensure!(!root.join("usr/bin/lagran-edge").exists(), "a remove took the binary");
    util::run(dpkg(root).args(["--force-script-chrootless", "--purge", "lagran-edge"]))?;
    ensure!(!root.join("etc/lagran/edge.toml").exists(), "a purge removed the conffile");
    Ok(())
}
