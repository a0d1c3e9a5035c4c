//! `cargo xtask package`: Debian packages of `lagran` (control, dns, serve, the
//! CLI, the XDP object) and `lagran-edge`, into `<target>/debian/`.
//!
//! The packages are assembled here and built with `dpkg-deb --build` rather
//! than with cargo-deb: everything they hold besides the two binaries (units,
//! sysusers.d, tmpfiles.d, conffiles, maintainer scripts) already lives in
//! `deploy/`, the XDP object comes from the nightly BPF build cargo-deb knows
//! nothing of, and `dpkg-deb` is on every Debian system, where cargo-deb is one
//! more tool to compile.
//!
//! `--check` then installs both into a fresh root and checks what they put
//! there ([`check`]). The release build takes minutes; `--debug` packages the
//! debug build for a quicker look at the packaging alone.

mod check;
mod deb;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use crate::{build_ebpf, util};

#[derive(Debug, Clone, Default, clap::Parser)]
pub struct Options {
    /// Package the debug build (quicker; not for production).
    #[arg(long)]
    pub debug: bool,
    /// Then install the packages into a fresh root and check their files, users,
    /// conffiles and unit syntax (root).
    #[arg(long)]
    pub check: bool,
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    let root = util::workspace_root();
    let profile = if opts.debug { "debug" } else { "release" };
    let mut build = Command::new("cargo");
    build.current_dir(&root);
    if opts.debug {
        // The workspace's binaries as `cargo xtask test` builds them: the same
        // features, so a check there compiles nothing again.
        build.args(["build", "--bins"]);
    } else {
        build.args([
            "build",
            "--release",
            "-p",
            "lagran-userspace",
            "-p",
            "lagran-edge",
            "--bin",
            "lagran",
            "--bin",
            "lagran-edge",
        ]);
    }
    util::run(&mut build)?;
    let bpf_object = build_ebpf::build_ebpf(&build_ebpf::Options { release: true, features: Vec::new() })?;
    let target = build_ebpf::target_dir(&root);
    let built = Built {
        lagran: target.join(profile).join("lagran"),
        lagran_edge: target.join(profile).join("lagran-edge"),
        bpf_object,
    };
    let out = target.join("debian");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let arch = util::output(Command::new("dpkg").arg("--print-architecture"))?.trim().to_string();
    let mut debs = Vec::new();
    for package in deb::packages(&root, &built) {
        let deb = package.build(&out, &arch, opts.debug)?;
        println!("==> {}", deb.display());
        debs.push(deb);
    }
    if opts.check {
        check::installed(&root, &out, &debs)?;
        println!("==> the packages install into a fresh root and check out");
    }
    Ok(())
}

/// What the packages carry from the build.
pub struct Built {
    pub lagran: PathBuf,
    pub lagran_edge: PathBuf,
    pub bpf_object: PathBuf,
}

/// The workspace's `deploy/` directory.
fn deploy(root: &Path) -> PathBuf {
    root.join("deploy")
}
