//! The build step: the tools the bench needs, the release BPF objects, `lagran`
//! and `bench_helper`, and where each of them is.

use std::process::Command;

use anyhow::bail;

use super::{Bench, Options};
use crate::{build_ebpf, util};

/// Checks root and the tools, builds (unless `--no-build`) and returns the
/// paths every step uses.
pub(super) fn prepare(opts: &Options) -> anyhow::Result<Bench> {
    // SAFETY: geteuid(2) has no preconditions.
    if !opts.only_recompute && unsafe { libc::geteuid() } != 0 {
        bail!("`cargo xtask bench` needs root (BPF, network namespaces, XDP): run it as root");
    }
    for tool in ["ip", "taskset", "nsenter"] {
        if !opts.only_recompute && util::which(tool).is_none() {
            bail!("`cargo xtask bench` needs `{tool}`: run `cargo xtask setup` (iproute2, util-linux)");
        }
    }
    let root = util::workspace_root();
    let xdb = root.join("data/ip2region.xdb");
    if !xdb.is_file() {
        bail!(
            "{} is missing: run `cargo xtask setup` (or scripts/fetch-geoip.sh) for the real ip2region file",
            xdb.display()
        );
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    let (obj, reflector) = if opts.no_build {
        (
            target.join(build_ebpf::TARGET).join("release/lagran"),
            target.join(build_ebpf::TARGET).join("release/reflector"),
        )
    } else {
        let obj = build_ebpf::build_ebpf(&build_ebpf::Options { release: true, ..build_ebpf::Options::default() })?;
        let reflector = build_ebpf::build_reflector()?;
        util::run(Command::new("cargo").current_dir(&root).args([
            "build",
            "--release",
            "--package",
            "lagran-userspace",
            "--bin",
            "lagran",
            "--example",
            "bench_helper",
        ]))?;
        (obj, reflector)
    };
    let work = target.join("bench");
    std::fs::create_dir_all(&work)?;
    let b = Bench {
        helper: target.join("release/examples/bench_helper"),
        lagran: target.join("release/lagran"),
        obj,
        reflector,
        xdb,
        work,
        root,
        opts: opts.clone(),
    };
    for p in [&b.helper, &b.lagran, &b.obj, &b.reflector] {
        if !p.is_file() {
            bail!("{} is missing: run without --no-build", p.display());
        }
    }
    Ok(b)
}
