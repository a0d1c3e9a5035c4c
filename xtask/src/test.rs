//! `cargo xtask test`: everything CI runs, from a clean clone.
//!
//! 1. `cargo xtask setup` (tools, PostgreSQL server, bpf-linker, geo data).
//! 2. `cargo fmt --all --check`: one formatter width for the workspace; then
//!    `cargo xtask house`: file and function lengths, import cycles, comments.
//! 3. The XDP object (the userspace tests load it through BPF_PROG_TEST_RUN).
//! 4. Clippy with `-D warnings` in two passes: the host crates, then the eBPF
//!    crate on its own target (so the `user` feature cannot leak std into it).
//!    Then `promtool check rules` and `promtool test rules` on the alert rules
//!    in `deploy/prometheus` (every alert has a unit test that fires it).
//! 5. The binaries the end-to-end tests drive (`lagran`, `lagran-edge`). From
//!    here the fuzz targets build beside the next steps, into their own target
//!    directory (`target/fuzz`, its output in `target/fuzz-build.log`): the
//!    end-to-end tests spend much of their time waiting on sockets and timers,
//!    and the sanitizer build of the fuzz crates is the longest compile of the run.
//!    Once they are built, the Debian packages of that debug build
//!    (`cargo xtask package --debug --check`: gzip instead of xz, nothing
//!    compiled again) are installed into a fresh root and checked, offline.
//! 6. `cargo test` over the default members (not `--workspace`: that would build
//!    `lagran-ebpf` for the host): unit tests, store tests against SQLite
//!    and a throwaway PostgreSQL, end-to-end tests with `dig`/`kdig`.
//! 7. Every cargo-fuzz target for a few seconds (`cargo xtask fuzz --seconds 3`,
//!    without the 10⁶-packet XDP fuzz: step 6 sent 10⁴ packets through it).
//! 8. The XDP tests under QEMU on the oldest and the newest Debian kernel
//!    (`cargo xtask integration-test vm --kernels oldest,newest`; the full
//!    matrix is `cargo xtask integration-test vm`).

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

use crate::{build_ebpf, integration_test, util};

#[derive(Debug, Clone, Default, clap::Parser)]
pub struct Options {
    /// Skip `cargo xtask setup`.
    #[arg(long)]
    pub no_setup: bool,
    /// Skip the kernel matrix under QEMU (step 7).
    #[arg(long)]
    pub no_vm: bool,
    /// Extra arguments for `cargo test` (after `--`), e.g. a test name filter.
    #[arg(last = true)]
    pub args: Vec<String>,
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    let root = util::workspace_root();
    if !opts.no_setup {
        crate::setup::exec(crate::setup::Options::default())?;
    }
    let mut fmt = Command::new("cargo");
    fmt.current_dir(&root).args(["fmt", "--all", "--check"]);
    util::run(&mut fmt).context("unformatted code: run `cargo fmt --all`")?;
    crate::house::exec(crate::house::Options {})?;
    let obj = build_ebpf::setup_and_build(true)?;
    // The same program with its aya-log debug events (tests/xdp_debug_log.rs).
    let debug_obj =
        build_ebpf::build_ebpf(&build_ebpf::Options { release: true, features: vec!["xdp-debug-log".into()] })?;
    let mut clippy = Command::new("cargo");
    clippy.current_dir(&root).args([
        "clippy",
        "--workspace",
        "--exclude",
        "lagran-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    util::run(&mut clippy)?;
    build_ebpf::clippy_ebpf()?;
    alert_rules(&root)?;
    let mut bins = Command::new("cargo");
    bins.current_dir(&root).args(["build", "--bins"]);
    let fuzz_root = root.clone();
    let fuzz_build = std::thread::spawn(move || {
        crate::setup::cargo_fuzz()?;
        crate::fuzz::build_targets(&fuzz_root, Some(&fuzz_root.join("target/fuzz-build.log")))
    });
    let compiled = util::run(&mut bins).and_then(|()| util::run(test_cmd(&root, &obj, &debug_obj).arg("--no-run")));
    let fuzz_built = fuzz_build.join().map_err(|_| anyhow::anyhow!("the fuzz build thread panicked"))?;
    compiled?;
    fuzz_built?;
    crate::package::exec(crate::package::Options { debug: true, check: true })?;
    let mut test = test_cmd(&root, &obj, &debug_obj);
    if !opts.args.is_empty() {
        test.arg("--").args(&opts.args);
    }
    util::run(&mut test)?;
    crate::fuzz::exec(crate::fuzz::Options::brief())?;
    if opts.no_vm {
        return Ok(());
    }
    integration_test::exec(integration_test::Options {
        target: integration_test::Target::Vm(integration_test::VmOptions::ci()),
    })
}

/// The alert rules: `promtool check rules` (syntax, PromQL) and `promtool test
/// rules` (the unit tests beside them, run from their directory since they name
/// the rules file relative to it).
fn alert_rules(root: &Path) -> anyhow::Result<()> {
    let dir = root.join("deploy/prometheus");
    util::run(Command::new("promtool").current_dir(&dir).args(["check", "rules", "lagran.rules.yml"]))
        .context("the alert rules do not load: see deploy/prometheus/lagran.rules.yml")?;
    util::run(Command::new("promtool").current_dir(&dir).args(["test", "rules", "lagran.rules.test.yml"]))
        .context("the alert rules' unit tests fail: see deploy/prometheus/lagran.rules.test.yml")
}

/// `cargo test` over the default members, with the objects and the switches
/// that make tests needing PostgreSQL, dig or the XDP object fail instead of skipping.
fn test_cmd(root: &Path, obj: &Path, debug_obj: &Path) -> Command {
    let mut test = Command::new("cargo");
    test.current_dir(root)
        .args(["test", "--no-fail-fast"])
        .env("LAGRAN_REQUIRE_PG", "1")
        .env("LAGRAN_REQUIRE_TOOLS", "1")
        .env("LAGRAN_EBPF_OBJECT", obj)
        .env("LAGRAN_EBPF_DEBUG_OBJECT", debug_obj);
    test
}
