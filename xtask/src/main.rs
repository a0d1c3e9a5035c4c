//! `cargo xtask`: development tasks for Lagran.
//!
//! This file only dispatches; each subcommand lives in its own module with a
//! documented `Options` and an `exec(opts)`.

mod bench;
mod build_ebpf;
mod busy;
mod chaos;
mod fuzz;
mod house;
mod integration_test;
mod package;
mod run;
mod setup;
mod simulate;
mod simulate_world;
mod test;
mod util;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "Lagran development tasks")]
struct Cli {
    #[command(subcommand)]
    command: Subcommand,
}

#[derive(Debug, clap::Subcommand)]
enum Subcommand {
    /// Install the tools, nightly rust-src, bpf-linker and the geo data (idempotent).
    Setup(setup::Options),
    /// Build the XDP program into a BPF object with BTF and print its path.
    BuildEbpf(build_ebpf::Options),
    /// Set up, build everything and start `lagran serve --demo` (the main job).
    Run(run::Options),
    /// Set up, build, and run every test (what CI runs).
    Test(test::Options),
    /// Measure the performance goals: XDP vs userspace QPS in namespaces, node-down → map,
    /// kernel lookup cost, ECS scopes, geo lookup, xdb load, recompute (root, ~10 min);
    /// writes docs/bench-results.md.
    Bench(bench::Options),
    /// Every cargo-fuzz target for `--seconds N` (60) each, then 10⁶ mutated
    /// packets through BPF_PROG_TEST_RUN against userspace's answers (root).
    Fuzz(fuzz::Options),
    /// The XDP tests with the real object on the host kernel (`local`) or under
    /// QEMU on Debian's kernels (`vm [--kernels 5.10,6.1,6.12,sid]`), root.
    IntegrationTest(integration_test::Options),
    /// Scheduling quality at fleet scale: real xdb, 100 000 client /24s with
    /// ECS, dense and sparse fleets; a table and target/simulate/*.csv.
    Simulate(simulate::Options),
    /// Fault injection at full length: the production topology under load, one
    /// fault at a time; a row per fault (root, ~15 min); writes target/chaos/latest.md.
    Chaos(chaos::Options),
    /// Debian packages of `lagran` and `lagran-edge` into target/debian/ (release;
    /// `--check` installs them into a fresh root and checks them, root).
    Package(package::Options),
    /// Check the structure rules of the product code: file and function lengths,
    /// import cycles between sibling modules, comments citing outside documents.
    House(house::Options),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Subcommand::Setup(opts) => setup::exec(opts),
        Subcommand::BuildEbpf(opts) => build_ebpf::exec(opts),
        Subcommand::Chaos(opts) => chaos::exec(opts),
        Subcommand::Run(opts) => run::exec(opts),
        Subcommand::Test(opts) => test::exec(opts),
        Subcommand::Bench(opts) => bench::exec(opts),
        Subcommand::Fuzz(opts) => fuzz::exec(opts),
        Subcommand::IntegrationTest(opts) => integration_test::exec(opts),
        Subcommand::Simulate(opts) => simulate::exec(opts),
        Subcommand::House(opts) => house::exec(opts),
        Subcommand::Package(opts) => package::exec(opts),
    }
}
