//! `cargo xtask run`: sets the machine up, builds everything and starts the
//! main job — `lagran serve --demo` on the embedded default (SQLite under
//! `./lagran-data/`, DNS on 127.0.0.1:5353, API on 127.0.0.1:8080).
//!
//! Arguments after `--` go to `lagran serve`, e.g.
//! `cargo xtask run -- --dns-listen 127.0.0.1:5300`.

use std::process::Command;

use anyhow::Context as _;

use crate::{build_ebpf, util};

#[derive(Debug, Clone, Default, clap::Parser)]
pub struct Options {
    /// Skip `cargo xtask setup` (tools, bpf-linker, geo data).
    #[arg(long)]
    pub no_setup: bool,
    /// Serve without the demo zone and nodes.
    #[arg(long)]
    pub no_demo: bool,
    /// Extra arguments for `lagran serve`.
    #[arg(last = true)]
    pub args: Vec<String>,
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    let root = util::workspace_root();
    // `lagran serve --xdp IFACE` loads this object (target/bpfel-unknown-none/release/lagran).
    build_ebpf::setup_and_build(opts.no_setup)?;
    let mut build = Command::new("cargo");
    build.current_dir(&root).args(["build", "--release", "--package", "lagran-userspace", "--bin", "lagran"]);
    util::run(&mut build)?;
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d));
    let bin = target.join("release").join("lagran");
    let mut serve = Command::new(&bin);
    serve.current_dir(&root).arg("serve");
    if !opts.no_demo {
        serve.arg("--demo");
    }
    serve.args(&opts.args);
    println!("==> {}", util::display(&serve));
    println!("    try: dig @127.0.0.1 -p 5353 edge.lagran.net A +subnet=58.60.0.0/24");
    let status = serve.status().with_context(|| format!("failed to start {}", bin.display()))?;
    if !status.success() {
        anyhow::bail!("`{}` exited with {status}", util::display(&serve));
    }
    Ok(())
}
