//! `cargo xtask integration-test local|vm`: the kernel-facing tests, with the
//! real release object, on the host kernel or under QEMU on Debian's kernels.
//!
//! The tests (all in `lagran-userspace/tests/`):
//! - `xdp_kernel`: loads the object, prints the kernel release and the
//!   verifier's processed-instruction count (or the verifier's message);
//! - `xdp_fixtures`: the packet fixtures through `BPF_PROG_TEST_RUN`;
//! - `xdp_netns`: `dig` in one network namespace answered through XDP in native
//!   mode on a veth pair (the client end runs a pass-through program, without
//!   which `XDP_TX` on a veth never reaches the peer).
//!
//! `vm` runs them in one QEMU guest per kernel:
//! 1. installs what it needs from Debian (`qemu-system-x86`, `busybox-static`,
//!    `cpio`, `kmod`, `xz-utils`), idempotently;
//! 2. fetches each kernel's `.deb`s with apt through a private apt state (the
//!    system's sources.list is never touched) into `~/.cache/lagran/kernels`,
//!    which later runs reuse; the suite's `linux-image-cloud-amd64` meta package
//!    picks the image, so this follows Debian's security updates;
//! 3. builds an initramfs per kernel: static busybox, `scripts/vm-init.sh` as
//!    `/init` (embedded here at build time), `ip`, `bpftool`, `dig` and the test
//!    binaries with their shared libraries, `veth.ko` and its dependencies;
//! 4. boots it (`-nic none`; KVM only when a real `kvm_intel`/`kvm_amd` is
//!    loaded, otherwise TCG), bounded by `--timeout`, and reads the result lines
//!    from the serial console (the whole console is kept under
//!    `target/integration-test/`).
//!
//! It prints one line per kernel (label, kernel release, PASS/FAIL, verifier
//! instructions, time) and fails if any kernel fails. A kernel Debian no longer
//! serves is replaced, loudly, by the oldest one still served; the matrix never
//! passes silently with fewer kernels.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};

use crate::{build_ebpf, util};

mod initramfs;

/// The guest's `/init`.
const GUEST_INIT: &str = include_str!("../../../scripts/vm-init.sh");

/// The test targets run in the guest, in this order (`xdp_kernel` first: it
/// reports the verifier count, or the verifier's message).
const TESTS: &[&str] = &["xdp_kernel", "xdp_fixtures", "xdp_netns"];

/// Tools the tests run in the guest, copied with their libraries.
const GUEST_TOOLS: &[(&str, &str)] =
    &[("ip", "/usr/sbin/ip"), ("bpftool", "/usr/sbin/bpftool"), ("dig", "/usr/bin/dig")];

/// The kernels we know, oldest first: label and the suites that may serve it.
const LADDER: &[(&str, &[&str])] = &[
    ("5.10", &["bullseye-security", "bullseye"]),
    ("6.1", &["bookworm-security", "bookworm"]),
    ("6.12", &["trixie-security", "trixie"]),
    ("sid", &["sid"]),
];

/// The kernel flavour: `cloud` images are small and have veth as a module.
const META_PACKAGE: &str = "linux-image-cloud-amd64";
const FLAVOUR: &str = "cloud";

/// Suites in the private apt sources (`-security` ones come from the security archive).
const SUITES: &[&str] =
    &["bullseye", "bullseye-security", "bookworm", "bookworm-security", "trixie", "trixie-security", "sid"];

/// Host packages the VM runner needs: (package, what for).
const HOST_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "boots the kernels"),
    ("busybox-static", "the guest's shell and /init"),
    ("cpio", "packs the initramfs"),
    ("kmod", "depmod/modprobe resolve veth's module dependencies"),
    ("xz-utils", "decompresses .ko.xz modules"),
    ("binutils", "objcopy strips the test binaries' debug info"),
];

#[derive(Debug, Clone, clap::Parser)]
pub struct Options {
    #[command(subcommand)]
    pub target: Target,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum Target {
    /// Run the tests on the host kernel (root).
    Local(LocalOptions),
    /// Run the tests under QEMU, one guest per Debian kernel (root).
    Vm(VmOptions),
}

#[derive(Debug, Clone, Default, clap::Parser)]
pub struct LocalOptions {
    /// Build the object with the test-only `test-broken-verifier` feature (an
    /// unchecked packet read): the run must fail with the verifier's message.
    #[arg(long)]
    pub broken: bool,
}

#[derive(Debug, Clone, clap::Parser)]
pub struct VmOptions {
    /// Kernels, oldest first: labels `5.10`, `6.1`, `6.12`, `sid`, the words
    /// `oldest`/`newest`, or `LABEL=SUITE` for another Debian suite.
    #[arg(long, value_delimiter = ',', default_value = "5.10,6.1,6.12,sid")]
    pub kernels: Vec<String>,
    /// Build the object with the test-only `test-broken-verifier` feature (an
    /// unchecked packet read): the matrix must fail with the verifier's message.
    #[arg(long)]
    pub broken: bool,
    /// Seconds one guest may take from start to power-off (TCG runs the fixtures ~18× slower than the host).
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Guest memory in MiB (the initramfs holds the test binaries).
    #[arg(long, default_value_t = 2048)]
    pub memory: u32,
    /// `kvm`, `tcg` or `auto` (KVM only with kvm_intel/kvm_amd loaded).
    #[arg(long, default_value = "auto")]
    pub accel: String,
}

impl VmOptions {
    /// What `cargo xtask test` runs: the oldest and the newest kernel.
    pub fn ci() -> VmOptions {
        VmOptions {
            kernels: vec!["oldest".into(), "newest".into()],
            broken: false,
            // Under TCG on a slow machine of this kind the 5.10 guest takes
            // ~600 s and sid's ~300 s (~110 s on a fast one); 1 800 s leaves
            // room for a slow machine.
            timeout: 1800,
            memory: 2048,
            accel: "auto".into(),
        }
    }
}

pub fn exec(opts: Options) -> anyhow::Result<()> {
    match opts.target {
        Target::Local(o) => local(&o),
        Target::Vm(o) => vm(&o),
    }
}

// ------------------------------------------------------------------ payload

/// The object and the test binaries, as built on the host.
struct Payload {
    object: PathBuf,
    /// (target name, executable)
    tests: Vec<(String, PathBuf)>,
}

fn build_payload(broken: bool) -> anyhow::Result<Payload> {
    let features = if broken { vec!["test-broken-verifier".to_owned()] } else { Vec::new() };
    let object = build_ebpf::build_ebpf(&build_ebpf::Options { release: true, features })?;
    println!("==> XDP object: {}", object.display());
    let root = util::workspace_root();
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&root).args(["test", "--no-run", "--message-format=json", "--package", "lagran-userspace"]);
    for t in TESTS {
        cmd.args(["--test", t]);
    }
    eprintln!("+ {}", util::display(&cmd));
    let out = util::output(&mut cmd)?;
    let mut tests = Vec::new();
    for line in out.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let (Some(exe), Some(name)) = (msg["executable"].as_str(), msg["target"]["name"].as_str()) else {
            continue;
        };
        if TESTS.contains(&name) {
            tests.push((name.to_owned(), PathBuf::from(exe)));
        }
    }
    tests.sort_by_key(|(name, _)| TESTS.iter().position(|t| t == name));
    let names: Vec<&str> = tests.iter().map(|(n, _)| n.as_str()).collect();
    if names != TESTS {
        bail!("`{}` built the tests {names:?}, expected {TESTS:?}", util::display(&cmd));
    }
    Ok(Payload { object, tests })
}

// -------------------------------------------------------------------- local

fn local(opts: &LocalOptions) -> anyhow::Result<()> {
    let payload = build_payload(opts.broken)?;
    let t0 = Instant::now();
    let mut console = String::new();
    let mut failed = Vec::new();
    for (name, exe) in &payload.tests {
        let mut cmd = Command::new(exe);
        cmd.args(["--test-threads=1", "--nocapture"])
            .env("LAGRAN_EBPF_OBJECT", &payload.object)
            .env("LAGRAN_REQUIRE_TOOLS", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        eprintln!("+ {}", util::display(&cmd));
        let out = cmd.output().with_context(|| format!("failed to start `{}`", util::display(&cmd)))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        print!("{stdout}");
        console.push_str(&stdout);
        if !out.status.success() {
            failed.push(format!("{name} ({})", out.status));
        }
    }
    let mut report = parse_console(&console);
    report.result = Some(failed.is_empty());
    report.failed_tests = failed;
    let host = Kernel { label: "host".into(), release: report.kernel.clone().unwrap_or_default(), ..Kernel::default() };
    println!("\n---- integration-test local ----");
    println!("{}", report.line(&host, t0.elapsed()));
    print_details(&report);
    if report.result != Some(true) {
        bail!("integration-test local failed on the host kernel: {}", report.failed_tests.join(", "));
    }
    Ok(())
}

// ----------------------------------------------------------------------- vm

fn vm(opts: &VmOptions) -> anyhow::Result<()> {
    let t0 = Instant::now();
    host_packages()?;
    let cache = cache_dir();
    let apt = PrivateApt::new(&cache)?;
    let specs = resolve_kernels(&apt, &opts.kernels)?;
    let kernels: Vec<Kernel> = specs.iter().map(|s| apt.fetch(s, &cache)).collect::<anyhow::Result<_>>()?;
    let payload = build_payload(opts.broken)?;
    let logs = util::workspace_root().join("target/integration-test");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let accel = accel(&opts.accel)?;
    println!(
        "==> {} kernel(s): {}; accel {accel}",
        kernels.len(),
        kernels.iter().map(|k| k.label.as_str()).collect::<Vec<_>>().join(", ")
    );

    let mut initramfses = Vec::new();
    for kernel in &kernels {
        let initramfs = logs.join(format!("{}.cpio", kernel.label));
        initramfs::build_initramfs(kernel, &payload, &initramfs)?;
        initramfses.push(initramfs);
    }
    let boot_one = |(kernel, initramfs): (&Kernel, &PathBuf)| {
        let log = logs.join(format!("{}.log", kernel.label));
        let started = Instant::now();
        let booted = boot(kernel, initramfs, &log, opts, accel);
        let _ = std::fs::remove_file(initramfs);
        booted.map(|b| (b, started.elapsed(), log))
    };
    let boots: Vec<anyhow::Result<(bool, Duration, PathBuf)>> = if room_for_guests(kernels.len(), opts.memory) {
        println!("==> booting the {} guests side by side", kernels.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = kernels.iter().zip(&initramfses).map(|k| s.spawn(move || boot_one(k))).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("boot thread panicked"))))
                .collect()
        })
    } else {
        let mut boots = Vec::new();
        for k in kernels.iter().zip(&initramfses) {
            let booted = boot_one(k);
            let stop = booted.is_err();
            boots.push(booted);
            if stop {
                break;
            }
        }
        boots
    };
    for initramfs in &initramfses {
        let _ = std::fs::remove_file(initramfs);
    }
    let mut lines = Vec::new();
    let mut failed = Vec::new();
    for (kernel, booted) in kernels.iter().zip(boots) {
        let (booted, elapsed, log) = booted?;
        let console = std::fs::read_to_string(&log).unwrap_or_default();
        let mut report = parse_console(&console);
        if !booted {
            report.result = None;
        }
        let line = report.line(kernel, elapsed);
        println!("{line}");
        print_details(&report);
        if report.result != Some(true) {
            println!("   console: {}", log.display());
            failed.push(kernel.label.clone());
        }
        lines.push(line);
    }
    println!("\n---- integration-test vm ({}, {:.0}s) ----", accel, t0.elapsed().as_secs_f64());
    for line in &lines {
        println!("{line}");
    }
    if !failed.is_empty() {
        bail!("integration-test vm failed on: {}", failed.join(", "));
    }
    Ok(())
}

/// Whether `guests` guests of `memory_mb` each can boot side by side without
/// taking turns: a CPU each, and their memory (plus 512 MB for the host) free.
fn room_for_guests(guests: usize, memory_mb: u32) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let available_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines().find_map(|l| l.strip_prefix("MemAvailable:")?.split_whitespace().next()?.parse::<u64>().ok())
    });
    let needed_kb = (guests as u64 * u64::from(memory_mb) + 512) * 1024;
    guests > 1 && cpus >= guests && available_kb.is_some_and(|a| a >= needed_kb)
}

/// `kvm` only when a hardware KVM module is loaded: a `/dev/kvm` backed by
/// e.g. `kvm_pvm` accepts KVM_CREATE_VM but fails or hangs booting stock kernels.
fn accel(choice: &str) -> anyhow::Result<&'static str> {
    Ok(match choice {
        "kvm" => "kvm",
        "tcg" => "tcg",
        "auto" => {
            let hw = Path::new("/sys/module/kvm_intel").is_dir() || Path::new("/sys/module/kvm_amd").is_dir();
            let writable = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").is_ok();
            if hw && writable { "kvm" } else { "tcg" }
        }
        other => bail!("--accel {other}: expected kvm, tcg or auto"),
    })
}

fn host_packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = HOST_PACKAGES.iter().map(|(p, _)| *p).filter(|p| !dpkg_installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    for (p, why) in HOST_PACKAGES.iter().filter(|(p, _)| missing.contains(p)) {
        println!("==> {p}: missing, installing ({why})");
    }
    let install = || {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive").args(["install", "-y", "-q", "--no-install-recommends"]);
        cmd.args(&missing);
        cmd
    };
    if util::run(&mut install()).is_err() {
        util::run(Command::new("apt-get").args(["update", "-q"]))?;
        util::run(&mut install())?;
    }
    Ok(())
}

fn dpkg_installed(package: &str) -> bool {
    util::output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .is_ok_and(|s| s.trim() == "install ok installed")
}

/// `$XDG_CACHE_HOME/lagran/kernels` (default `~/.cache/lagran/kernels`):
/// outside the clone, so later CI runs reuse the downloads.
fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/var/tmp"))
        .join("lagran/kernels")
}

// ------------------------------------------------------------------ kernels

/// A kernel to test: a label and the suites that may serve it, oldest first.
#[derive(Debug, Clone)]
struct KernelSpec {
    label: String,
    suites: Vec<String>,
    /// Why this kernel stands in for another one, when it does.
    note: Option<String>,
}

/// A kernel fetched and extracted.
#[derive(Debug, Clone, Default)]
struct Kernel {
    label: String,
    /// `uname -r`
    release: String,
    /// The extracted package tree (`lib/modules/<release>/…`).
    root: PathBuf,
    vmlinuz: PathBuf,
    note: Option<String>,
}

fn ladder_spec(i: usize) -> KernelSpec {
    let (label, suites) = LADDER[i];
    KernelSpec { label: label.into(), suites: suites.iter().map(|s| (*s).into()).collect(), note: None }
}

fn parse_spec(s: &str) -> anyhow::Result<KernelSpec> {
    let s = s.trim();
    let s = match s {
        "oldest" => LADDER[0].0,
        "newest" => LADDER[LADDER.len() - 1].0,
        s => s,
    };
    if let Some((label, suite)) = s.split_once('=') {
        return Ok(KernelSpec { label: label.into(), suites: vec![suite.into()], note: None });
    }
    match LADDER.iter().position(|(l, _)| *l == s) {
        Some(i) => Ok(ladder_spec(i)),
        None => bail!(
            "unknown kernel `{s}`: use one of {}, oldest, newest, or LABEL=SUITE",
            LADDER.iter().map(|(l, _)| *l).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// The requested kernels, each one that Debian no longer serves replaced by the
/// oldest served kernel of [`LADDER`] not already in the list — said out loud,
/// and an error when none is left.
fn resolve_kernels(apt: &PrivateApt, wanted: &[String]) -> anyhow::Result<Vec<KernelSpec>> {
    let mut specs: Vec<KernelSpec> = wanted.iter().map(|s| parse_spec(s)).collect::<anyhow::Result<_>>()?;
    let mut seen = BTreeSet::new();
    specs.retain(|s| seen.insert(s.label.clone()));
    let requested = seen;
    let mut out: Vec<KernelSpec> = Vec::new();
    for spec in specs {
        if apt.served(&spec)?.is_some() {
            out.push(spec);
            continue;
        }
        let why = format!(
            "Debian no longer serves the {} kernel ({META_PACKAGE} in {})",
            spec.label,
            spec.suites.join(" or ")
        );
        let mut replacement = None;
        for i in 0..LADDER.len() {
            let cand = ladder_spec(i);
            let taken = requested.contains(&cand.label) || out.iter().any(|s| s.label == cand.label);
            if !taken && apt.served(&cand)?.is_some() {
                replacement = Some(cand);
                break;
            }
        }
        let Some(mut cand) = replacement else {
            bail!("{why}, and no other kernel is left to stand in for it");
        };
        let note = format!("{why}: using {}, the oldest one still served", cand.label);
        println!("==> WARNING: {note}");
        cand.note = Some(note);
        out.push(cand);
    }
    Ok(out)
}

/// apt with its own lists, cache and sources under the cache directory: the
/// system's apt configuration is read (for the archive URIs) and never written.
struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    fn new(cache: &Path) -> anyhow::Result<PrivateApt> {
        let dir = cache.join("apt");
        for d in ["lists/partial", "cache/archives/partial", "none"] {
            std::fs::create_dir_all(dir.join(d)).with_context(|| format!("creating {}", dir.join(d).display()))?;
        }
        let apt = PrivateApt { dir };
        let (main, security) = archive_uris();
        let keyring = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
        let mut sources = String::new();
        for suite in SUITES {
            let uri = if suite.ends_with("-security") { &security } else { &main };
            writeln!(sources, "deb {keyring} {uri} {suite} main")?;
        }
        let list = apt.dir.join("sources.list");
        if std::fs::read_to_string(&list).ok().as_deref() != Some(sources.as_str()) {
            std::fs::write(&list, &sources).with_context(|| format!("writing {}", list.display()))?;
            let _ = std::fs::remove_file(apt.dir.join("lists/.updated"));
        }
        apt.update_if_stale()?;
        Ok(apt)
    }

    fn options(&self) -> Vec<String> {
        let d = self.dir.display();
        [
            format!("Dir::Etc::SourceList={d}/sources.list"),
            format!("Dir::Etc::SourceParts={d}/none"),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}/cache"),
            format!("Dir::Etc::Preferences={d}/none"),
            format!("Dir::Etc::PreferencesParts={d}/none"),
            "APT::Architectures::=amd64".into(),
            "Acquire::Languages=none".into(),
            "APT::Get::List-Cleanup=0".into(),
            "Dir::Cache::pkgcache=pkgcache.bin".into(),
            "Dir::Cache::srcpkgcache=srcpkgcache.bin".into(),
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
            "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
            "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false".into(),
            "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_owned(), o])
        .collect()
    }

    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.args(self.options());
        c
    }

    /// `apt-get update` on the private lists when they are older than 6 hours.
    fn update_if_stale(&self) -> anyhow::Result<()> {
        let stamp = self.dir.join("lists/.updated");
        let fresh = std::fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age < Duration::from_secs(6 * 3600));
        if fresh {
            return Ok(());
        }
        println!("==> apt-get update (private lists in {})", self.dir.display());
        util::run(self.cmd("apt-get").args(["update", "-qq"]))?;
        std::fs::write(&stamp, b"").with_context(|| format!("writing {}", stamp.display()))?;
        Ok(())
    }

    /// The `linux-image-<abi>-cloud-amd64` package the first suite of `spec`
    /// that has the meta package points at, with that suite.
    fn served(&self, spec: &KernelSpec) -> anyhow::Result<Option<(String, String)>> {
        let madison = util::output(self.cmd("apt-cache").args(["madison", META_PACKAGE]))?;
        for suite in &spec.suites {
            // `linux-image-cloud-amd64 | 6.1.158-1 | http://… bookworm-security/main amd64 Packages`
            let version = madison.lines().find_map(|l| {
                let cols: Vec<&str> = l.split('|').map(str::trim).collect();
                (cols.len() == 3 && cols[2].split_whitespace().nth(1)?.starts_with(&format!("{suite}/")))
                    .then(|| cols[1].to_owned())
            });
            let Some(version) = version else { continue };
            let show = util::output(self.cmd("apt-cache").args(["show", &format!("{META_PACKAGE}={version}")]))?;
            let image = depends(&show).into_iter().find(|d| d.starts_with("linux-image-"));
            if let Some(image) = image {
                return Ok(Some((image, suite.clone())));
            }
        }
        Ok(None)
    }

    /// Downloads and extracts the kernel (once; later runs reuse it).
    fn fetch(&self, spec: &KernelSpec, cache: &Path) -> anyhow::Result<Kernel> {
        let (image, suite) = self
            .served(spec)?
            .with_context(|| format!("{META_PACKAGE} vanished from {} during the run", spec.suites.join("/")))?;
        let out = cache.join(format!("{}-{FLAVOUR}", spec.label));
        let root = out.join("root");
        let done = |out: &Path| -> Option<Kernel> {
            let pkg = std::fs::read_to_string(out.join(".pkg")).ok()?;
            let release = std::fs::read_to_string(out.join(".kver")).ok()?.trim().to_owned();
            if pkg.trim() != image {
                return None;
            }
            Some(Kernel {
                label: spec.label.clone(),
                vmlinuz: vmlinuz(&root, &release)?,
                release,
                root: root.clone(),
                note: spec.note.clone(),
            })
        };
        if let Some(k) = done(&out) {
            println!("==> {}: {image} ({suite}), cached", spec.label);
            return Ok(k);
        }
        println!("==> {}: {image} ({suite}): downloading", spec.label);
        // Since 7.x (sid) the image is split into linux-binary-*, linux-modules-*, linux-base-*.
        let show = util::output(self.cmd("apt-cache").args(["show", &image]))?;
        let mut packages = vec![image.clone()];
        packages.extend(depends(&show).into_iter().filter(|d| {
            d.starts_with("linux-binary-") || d.starts_with("linux-modules-") || d.starts_with("linux-base-")
        }));
        let debs = cache.join("debs");
        std::fs::create_dir_all(&debs).with_context(|| format!("creating {}", debs.display()))?;
        util::output(self.cmd("apt-get").current_dir(&debs).arg("download").args(&packages))?;
        if out.exists() {
            std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
        }
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        for p in &packages {
            let deb = newest_deb(&debs, p)?;
            util::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
        }
        // Merged-/usr packages (trixie and later) ship usr/lib/modules.
        if !root.join("lib/modules").is_dir() {
            std::fs::create_dir_all(root.join("lib"))?;
            std::fs::rename(root.join("usr/lib/modules"), root.join("lib/modules"))
                .with_context(|| format!("no lib/modules or usr/lib/modules in {}", packages.join(" ")))?;
        }
        let release = std::fs::read_dir(root.join("lib/modules"))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .next()
            .with_context(|| format!("{}: lib/modules is empty", root.display()))?;
        // The .deb ships no modules.dep.
        util::run(Command::new("depmod").arg("-b").arg(&root).arg(&release))?;
        vmlinuz(&root, &release).with_context(|| format!("no vmlinuz for {release} in {}", packages.join(" ")))?;
        std::fs::write(out.join(".kver"), &release)?;
        std::fs::write(out.join(".pkg"), &image)?;
        done(&out).context("the kernel was extracted but is incomplete")
    }
}

fn vmlinuz(root: &Path, release: &str) -> Option<PathBuf> {
    [format!("boot/vmlinuz-{release}"), format!("lib/modules/{release}/vmlinuz")]
        .into_iter()
        .map(|p| root.join(p))
        .find(|p| p.is_file())
}

/// Package names in the first `Depends:` line of `apt-cache show` output.
fn depends(show: &str) -> Vec<String> {
    show.lines()
        .find_map(|l| l.strip_prefix("Depends:"))
        .map(|d| d.split([',', '|']).filter_map(|alt| alt.split_whitespace().next()).map(str::to_owned).collect())
        .unwrap_or_default()
}

fn newest_deb(dir: &Path, package: &str) -> anyhow::Result<PathBuf> {
    let prefix = format!("{package}_");
    std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .with_context(|| format!("`apt-get download {package}` left no {prefix}*.deb in {}", dir.display()))
}

/// The Debian archive and security URIs this machine's apt already uses.
fn archive_uris() -> (String, String) {
    let mut text = std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    if let Ok(dir) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in dir.flatten() {
            text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            text.push('\n');
        }
    }
    let uris: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .filter(|w| w.starts_with("http://") || w.starts_with("https://"))
        .map(|w| w.trim_end_matches('/'))
        .collect();
    let main = uris.iter().find(|u| u.ends_with("/debian")).map_or("http://deb.debian.org/debian", |u| u);
    let security =
        uris.iter().find(|u| u.ends_with("/debian-security")).map_or("http://deb.debian.org/debian-security", |u| u);
    (main.to_owned(), security.to_owned())
}

// --------------------------------------------------------------------- boot

/// QEMU, killed and reaped on drop (also when the runner fails or times out).
struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Boots the kernel; true when QEMU powered off cleanly before the timeout.
fn boot(kernel: &Kernel, initramfs: &Path, log: &Path, opts: &VmOptions, accel: &str) -> anyhow::Result<bool> {
    let _ = std::fs::remove_file(log);
    let mut cmd = Command::new("qemu-system-x86_64");
    match accel {
        "kvm" => cmd.args(["-accel", "kvm", "-cpu", "host"]),
        _ => cmd.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
    };
    cmd.args(["-m", &opts.memory.to_string(), "-smp", "2"])
        .args(["-nodefaults", "-display", "none", "-no-reboot", "-nic", "none", "-monitor", "none"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        .args(["-append", "console=ttyS0 panic=-1 quiet loglevel=4 mitigations=off"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let line = util::display(&cmd);
    eprintln!("+ {line}");
    let mut qemu = Qemu(cmd.spawn().with_context(|| format!("failed to start `{line}`"))?);
    let deadline = Instant::now() + Duration::from_secs(opts.timeout);
    loop {
        if let Some(status) = qemu.0.try_wait()? {
            if !status.success() {
                let mut err = String::new();
                if let Some(mut e) = qemu.0.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                println!("   {}: `{line}` failed with {status}: {}", kernel.label, err.trim());
                return Ok(false);
            }
            return Ok(true);
        }
        if Instant::now() >= deadline {
            println!("   {}: no result after {}s, QEMU killed", kernel.label, opts.timeout);
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

// ------------------------------------------------------------------- report

/// What the guest (or the host run) printed.
#[derive(Debug, Default)]
struct Report {
    kernel: Option<String>,
    verified_insns: Option<String>,
    /// `Some(true)` PASS, `Some(false)` FAIL, `None` no result line (timeout, panic).
    result: Option<bool>,
    failed_tests: Vec<String>,
    verifier_log: Vec<String>,
}

fn parse_console(console: &str) -> Report {
    let mut r = Report::default();
    let mut in_log = false;
    for line in console.lines() {
        // The console may carry a carriage return or firmware escape codes first.
        let line = line.trim_end_matches('\r');
        let line = line.find("LAGRAN-").map_or(line, |i| if in_log { line } else { &line[i..] });
        if in_log {
            if line.contains("LAGRAN-VERIFIER-LOG-END") {
                in_log = false;
            } else {
                r.verifier_log.push(line.to_owned());
            }
        } else if let Some(v) = line.strip_prefix("LAGRAN-KERNEL: ") {
            r.kernel = Some(v.trim().to_owned());
        } else if let Some(v) = line.strip_prefix("LAGRAN-VERIFIED-INSNS: ") {
            r.verified_insns = Some(v.trim().to_owned());
        } else if line.starts_with("LAGRAN-VERIFIER-LOG-BEGIN") {
            in_log = true;
        } else if let Some(v) = line.strip_prefix("LAGRAN-TEST: ") {
            if !v.contains(" PASS") {
                r.failed_tests.push(v.trim().to_owned());
            }
        } else if let Some(v) = line.strip_prefix("LAGRAN-RESULT: ") {
            r.result = Some(v.trim() == "PASS");
        }
    }
    r
}

impl Report {
    fn line(&self, kernel: &Kernel, elapsed: Duration) -> String {
        let release = self.kernel.as_deref().unwrap_or(if kernel.release.is_empty() { "?" } else { &kernel.release });
        let result = match self.result {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "FAIL (no result: QEMU failed, timed out, or the guest panicked)",
        };
        let insns = self.verified_insns.as_deref().unwrap_or("-");
        format!(
            "{:<6} {:<28} {:<5} verified-insns {:>7}   {:>6.1}s",
            kernel.label,
            release,
            result,
            insns,
            elapsed.as_secs_f64()
        ) + &kernel.note.as_ref().map(|n| format!("   ({n})")).unwrap_or_default()
    }
}

/// The failed tests and the verifier's message (its last lines: where it stopped).
fn print_details(report: &Report) {
    for t in &report.failed_tests {
        println!("   failed: {t}");
    }
    if !report.verifier_log.is_empty() {
        println!("   verifier:");
        let skip = report.verifier_log.len().saturating_sub(12);
        for l in &report.verifier_log[skip..] {
            println!("   | {l}");
        }
    }
}
