//! `cargo xtask build-ebpf`: builds the XDP program (`lagran-ebpf`) into a BPF
//! object with BTF, so the maps it pins print named fields in `bpftool`.
//!
//! This is the one place that knows the eBPF build flags; every other command
//! (run, test, integration-test, bench) calls [`build_ebpf`].
//!
//! Needs the nightly toolchain with `rust-src` and `bpf-linker` (`cargo xtask setup`).

use std::path::PathBuf;

use anyhow::{Context as _, bail};

use crate::util::{self, nightly_cargo};

/// The eBPF target triple (little-endian BPF).
pub const TARGET: &str = "bpfel-unknown-none";
/// The package and binary name of the XDP program.
const PACKAGE: &str = "lagran-ebpf";
const BINARY: &str = "lagran";

/// Flags for the BPF object: full debug info (BPF has no DWARF use, but bpf-linker
/// turns it into BTF) and `--btf` so the linker emits `.BTF`/`.BTF.ext`, which the
/// loader needs to create maps with typed keys/values.
///
/// `allows-misaligned-mem-access`: the kernel allows BPF loads and stores of any
/// width at any packet offset (x86-64 and arm64 have efficient unaligned access;
/// the verifier checks alignment only under `BPF_F_STRICT_ALIGNMENT`). Without
/// it LLVM splits every `read_unaligned` into byte loads and shifts.
const RUSTFLAGS: &[&str] = &["-Cdebuginfo=2", "-Clink-arg=--btf", "-Ctarget-feature=+allows-misaligned-mem-access"];

#[derive(Debug, Clone, Default, clap::Parser)]
pub struct Options {
    /// Build the release profile (what the loader embeds and the tests load).
    #[arg(long)]
    pub release: bool,
    /// Cargo features of `lagran-ebpf` (e.g. `test-broken-verifier`). An object
    /// built with features goes to its own target directory
    /// (`target/ebpf-<features>/…`), so it never replaces the normal one.
    #[arg(long, value_delimiter = ',')]
    pub features: Vec<String>,
}

/// Builds the object and returns its path
/// (`target/bpfel-unknown-none/{debug,release}/lagran`).
pub fn build_ebpf(opts: &Options) -> anyhow::Result<PathBuf> {
    let path = build_bin(opts, BINARY)?;
    check_no_mem_calls(&path)?;
    Ok(path)
}

/// The bench's bare XDP_TX reflector (`lagran-ebpf/src/reflector.rs`), release.
pub fn build_reflector() -> anyhow::Result<PathBuf> {
    build_bin(&Options { release: true, features: Vec::new() }, "reflector")
}

fn build_bin(opts: &Options, bin: &str) -> anyhow::Result<PathBuf> {
    if !util::succeeds(std::process::Command::new("bpf-linker").arg("--version")) {
        bail!("bpf-linker is not installed (or does not run): run `cargo xtask setup` first");
    }
    let root = util::workspace_root();
    let target = if opts.features.is_empty() {
        target_dir(&root)
    } else {
        target_dir(&root).join(format!("ebpf-{}", opts.features.join("-")))
    };
    let mut cmd = nightly_cargo();
    cmd.current_dir(&root).env("CARGO_ENCODED_RUSTFLAGS", RUSTFLAGS.join("\x1f")).args([
        "build",
        "--package",
        PACKAGE,
        "--bin",
        bin,
        "--target",
        TARGET,
        "-Z",
        "build-std=core",
    ]);
    if opts.release {
        cmd.arg("--release");
    }
    if !opts.features.is_empty() {
        cmd.arg("--features").arg(opts.features.join(",")).arg("--target-dir").arg(&target);
    }
    util::run(&mut cmd)?;
    let profile = if opts.release { "release" } else { "debug" };
    let path = target.join(TARGET).join(profile).join(bin);
    if !path.is_file() {
        bail!("the build succeeded but {} is missing", path.display());
    }
    Ok(path)
}

/// Functions the XDP section must not call. LLVM emits them for large copies,
/// fills and comparisons (a zeroed 256-byte key became a byte-at-a-time
/// `memset` loop of ~1 280 instructions per packet); the fast path does its own
/// bounded, word-sized work instead.
const FORBIDDEN_CALLS: &[&str] = &["memset", "memcpy", "memmove", "memcmp", "bcmp"];

/// Fails when the program section calls one of [`FORBIDDEN_CALLS`]: a BPF-to-BPF
/// call into `.text` is a relocation against the callee's symbol.
fn check_no_mem_calls(path: &std::path::Path) -> anyhow::Result<()> {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _, RelocationTarget};
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let file = object::File::parse(&*data).with_context(|| format!("parsing {}", path.display()))?;
    let section = file.section_by_name("xdp").with_context(|| format!("{} has no `xdp` section", path.display()))?;
    let mut found = Vec::new();
    for (offset, reloc) in section.relocations() {
        if let RelocationTarget::Symbol(idx) = reloc.target() {
            let name = file.symbol_by_index(idx).and_then(|s| s.name().map(str::to_string)).unwrap_or_default();
            if FORBIDDEN_CALLS.contains(&name.as_str()) {
                found.push(format!("{name} (instruction {})", offset / 8));
            }
        }
    }
    if !found.is_empty() {
        bail!(
            "the XDP section of {} calls {}: a large zeroed or copied buffer crept into the fast path",
            path.display(),
            found.join(", ")
        );
    }
    Ok(())
}

/// The cargo target directory (honours CARGO_TARGET_DIR).
pub fn target_dir(root: &std::path::Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The eBPF crate's own clippy pass (nightly, the BPF target, `-D warnings`): the
/// host pass cannot build it, and it proves the `user` feature of lagran-common
/// does not leak std into the kernel side.
pub fn clippy_ebpf() -> anyhow::Result<()> {
    let root = util::workspace_root();
    let mut cmd = nightly_cargo();
    cmd.current_dir(&root).env("CARGO_ENCODED_RUSTFLAGS", RUSTFLAGS.join("\x1f")).args([
        "clippy",
        "--package",
        PACKAGE,
        "--target",
        TARGET,
        "-Z",
        "build-std=core",
        "--",
        "-D",
        "warnings",
    ]);
    util::run(&mut cmd)
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    let path = build_ebpf(&opts).context("building the eBPF object")?;
    println!("{}", path.display());
    Ok(())
}

/// What `run` and `test` both start with: `setup` (unless skipped), then the
/// release object, whose path is printed and returned.
pub fn setup_and_build(skip_setup: bool) -> anyhow::Result<PathBuf> {
    if !skip_setup {
        crate::setup::exec(crate::setup::Options::default())?;
    }
    let obj = build_ebpf(&Options { release: true, ..Options::default() })?;
    println!("==> XDP object: {}", obj.display());
    Ok(obj)
}
