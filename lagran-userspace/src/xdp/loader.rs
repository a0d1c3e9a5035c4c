//! Loading the XDP program, attaching it, pinning its maps.
//!
//! The BPF object is read at run time (see [`object_path`]): `cargo xtask
//! build-ebpf --release` writes it to `target/bpfel-unknown-none/release/lagran`,
//! and `LAGRAN_EBPF_OBJECT` points anywhere else. `lagran serve --xdp IFACE`
//! calls [`XdpHandle::attach`]; dropping the handle detaches the program and
//! removes the pins, so a stopped server leaves the interface to the kernel
//! stack (fail open).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::xdp::{XdpLink, XdpLinkId};
use aya::programs::{TestRun, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};

use super::XdpError;
use super::maps::{MAP_NAMES, Maps, OPTIONAL_MAP_NAMES};
use super::writer::MapWriter;

/// The program's name in the object (the `#[xdp]` function).
pub const PROGRAM: &str = "lagran";
/// Environment variable naming the BPF object to load.
pub const OBJECT_ENV: &str = "LAGRAN_EBPF_OBJECT";
/// Where `cargo xtask build-ebpf --release` puts the object in this source tree.
const BUILT_OBJECT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bpfel-unknown-none/release/lagran");
/// Where a packaged install keeps it.
const INSTALLED_OBJECT: &str = "/usr/lib/lagran/lagran.bpf.o";
/// `statfs` magic of bpffs.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// Whether this kernel has `bpf_ktime_get_coarse_ns` (Linux 5.11), the clock
/// the program reads per rate-limited answer and per cookie when it can: the
/// precise `bpf_ktime_get_ns` costs 30–40 ns per call on a KVM guest. A kernel
/// whose version cannot be read gets the precise clock, which every supported
/// kernel has.
pub fn coarse_clock() -> bool {
    let (major, minor) = lagran_common::config::COARSE_CLOCK_SINCE;
    aya::util::KernelVersion::current().is_ok_and(|v| v >= aya::util::KernelVersion::new(major, minor, 0))
}

/// The loader every user of the object goes through (the daemon, tests,
/// benchmarks), so all of them run the program as production does: it sets
/// the program's clock globals (`lagran_common::config::COARSE_CLOCK_GLOBAL`,
/// and `TICK_NS_GLOBAL` where the kernel's tick is known: [`super::tick`])
/// before the verifier sees the object, and lifts the locked-memory limit
/// older kernels charge the maps to (`raise_memlock_limit`).
pub fn ebpf_loader() -> EbpfLoader<'static> {
    static COARSE: u32 = 1;
    static TICK_NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    raise_memlock_limit();
    let mut loader = EbpfLoader::new();
    // `must_exist`: an object without the globals is older than this loader.
    if coarse_clock() {
        loader.override_global(lagran_common::config::COARSE_CLOCK_GLOBAL, &COARSE, true);
    }
    if let Some(tick) = super::tick::kernel_tick() {
        loader.override_global(lagran_common::config::TICK_NS_GLOBAL, TICK_NS.get_or_init(|| tick.ns()), true);
    }
    loader
}

/// Kernels before 5.11 charge BPF maps to the loading process's locked-memory
/// limit (`RLIMIT_MEMLOCK`: 64 KiB or 8 MiB by default), and the maps here
/// reserve hundreds of MiB (the trie's entries, 64 MiB of flat arrays), so
/// creating them fails with EPERM; newer kernels charge the memory cgroup and
/// ignore the limit. As libbpf does, the limit is raised to unlimited, once
/// per process; where that is refused (no `CAP_SYS_RESOURCE`, as in some
/// containers) the soft limit goes up to the hard one and, on such a kernel,
/// a warning says so (`ulimit -l unlimited` is the operator's fix).
fn raise_memlock_limit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let unlimited = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
        // SAFETY: setrlimit(2) reads the struct passed and nothing else.
        if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } == 0 {
            return;
        }
        let refused = std::io::Error::last_os_error();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit(2) writes the struct passed and nothing else.
        if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } == 0 {
            lim.rlim_cur = lim.rlim_max;
            // SAFETY: as above (a soft limit up to the hard one needs no privilege).
            unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
        }
        let charged = aya::util::KernelVersion::current().is_ok_and(|v| v < aya::util::KernelVersion::new(5, 11, 0));
        if charged {
            tracing::warn!(
                error = %refused,
                limit_bytes = lim.rlim_max,
                "could not lift RLIMIT_MEMLOCK: this kernel charges the XDP maps to it, creating them may fail (ulimit -l unlimited)"
            );
        }
    });
}

/// The BPF object to load: `$LAGRAN_EBPF_OBJECT`, else the one built in this
/// source tree, else the packaged one.
pub fn object_path() -> PathBuf {
    if let Some(p) = std::env::var_os(OBJECT_ENV).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(BUILT_OBJECT);
    if built.is_file() || !Path::new(INSTALLED_OBJECT).is_file() { built } else { PathBuf::from(INSTALLED_OBJECT) }
}

/// The bytes of the object at [`object_path`].
pub fn object_bytes() -> Result<Vec<u8>, XdpError> {
    let path = object_path();
    if !path.is_file() {
        return Err(XdpError::ObjectMissing { path });
    }
    std::fs::read(&path).map_err(|source| XdpError::ObjectRead { path, source })
}

/// How the program runs on the interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver, before any socket buffer exists (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// In the kernel stack after the driver (`XDP_FLAGS_SKB_MODE`): works on any
    /// interface, at a fraction of native speed.
    Generic,
    /// The program replaced the one in a link a previous daemon left pinned; the
    /// link keeps the mode it was created with.
    TakenOver,
}

impl fmt::Display for AttachMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
            AttachMode::TakenOver => "taken over (the pinned link's mode)",
        })
    }
}

impl AttachMode {
    /// The `mode` label of `lagran_xdp_attached`.
    pub fn label(self) -> &'static str {
        match self {
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
            AttachMode::TakenOver => "taken_over",
        }
    }

    fn aya(self) -> XdpMode {
        match self {
            AttachMode::Native | AttachMode::TakenOver => XdpMode::Driver,
            AttachMode::Generic => XdpMode::Skb,
        }
    }
}

/// How to load and attach.
#[derive(Clone, Debug)]
pub struct XdpOptions {
    /// Where to pin the maps; `None` pins nothing (tests running side by side).
    pub pin_dir: Option<PathBuf>,
    /// `None`: native, falling back to generic.
    pub mode: Option<AttachMode>,
    /// The UDP payload size our OPT records advertise (`dns.max_udp_payload`).
    pub udp_payload: u16,
    /// The addresses and ports the DNS server listens on; the program answers
    /// only packets addressed to one of them. An unspecified address
    /// (`0.0.0.0`, `::`) stands for every address of that family on the
    /// interface. Empty: `0.0.0.0:dns_port`.
    pub listen: Vec<SocketAddr>,
}

impl Default for XdpOptions {
    fn default() -> Self {
        XdpOptions { pin_dir: Some(PathBuf::from(super::PIN_DIR)), mode: None, udp_payload: 1232, listen: Vec::new() }
    }
}

/// `listen` with each unspecified address replaced by the addresses of its
/// family on `iface` (read when the program is attached; an address added to the
/// interface later is passed to userspace until the next start).
pub fn expand_listen(listen: &[SocketAddr], iface: &str) -> Result<Vec<SocketAddr>, XdpError> {
    let mut out = Vec::new();
    let mut ifaddrs: Option<Vec<IpAddr>> = None;
    for a in listen {
        if !a.ip().is_unspecified() {
            out.push(*a);
            continue;
        }
        if ifaddrs.is_none() {
            ifaddrs = Some(iface_addrs(iface)?);
        }
        for ip in ifaddrs.iter().flatten() {
            if ip.is_ipv4() == a.is_ipv4() {
                out.push(SocketAddr::new(*ip, a.port()));
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The IPv4 and IPv6 addresses of `iface` (getifaddrs(3)).
fn iface_addrs(iface: &str) -> Result<Vec<IpAddr>, XdpError> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(XdpError::Interface { iface: iface.to_string(), source: std::io::Error::last_os_error() });
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if ifa.ifa_addr.is_null() || name.to_bytes() != iface.as_bytes() {
            continue;
        }
        // SAFETY: the family tells which sockaddr type `ifa_addr` points to.
        unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    out.push(IpAddr::from(u32::from_be(sa.sin_addr.s_addr).to_be_bytes()));
                }
                libc::AF_INET6 => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    out.push(IpAddr::from(sa.sin6_addr.s6_addr));
                }
                _ => {}
            }
        }
    }
    // SAFETY: `head` came from getifaddrs.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The program loaded into the kernel (verified), not attached to anything.
pub struct LoadedXdp {
    ebpf: Ebpf,
    pins: Vec<PathBuf>,
    pin_dir: Option<PathBuf>,
}

/// What `BPF_PROG_TEST_RUN` returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestRunOutput {
    /// `XDP_PASS` (2), `XDP_TX` (3), …
    pub action: u32,
    /// The frame as the program left it.
    pub frame: Vec<u8>,
}

impl LoadedXdp {
    /// Loads the object and the program (this is where the verifier runs).
    pub fn load(obj: &[u8]) -> Result<LoadedXdp, XdpError> {
        let mut ebpf = ebpf_loader().load(obj).map_err(|e| XdpError::Load(Box::new(e)))?;
        let prog = program_mut(&mut ebpf)?;
        prog.load().map_err(|e| XdpError::Program { name: PROGRAM, source: Box::new(e) })?;
        let loaded = LoadedXdp { ebpf, pins: Vec::new(), pin_dir: None };
        // The verifier's work is the first sign of a fast path grown too branchy.
        tracing::info!(
            verified_insns = ?loaded.verified_insns(),
            clock = if coarse_clock() { "bpf_ktime_get_coarse_ns" } else { "bpf_ktime_get_ns" },
            "XDP program loaded"
        );
        Ok(loaded)
    }

    /// The reader of the program's debug events, when the object was built with the
    /// `xdp-debug-log` feature; `None` for a production object (it has no log map).
    /// Taken once.
    pub fn take_debug_logger<T: log::Log>(&mut self, logger: T) -> Option<aya_log::EbpfLogger<T>> {
        aya_log::EbpfLogger::init_with_logger(&mut self.ebpf, logger).ok()
    }

    /// Instructions the verifier processed at load (kernel ≥ 5.16 reports it).
    pub fn verified_insns(&self) -> Option<u32> {
        let prog: &Xdp = self.ebpf.program(PROGRAM)?.try_into().ok()?;
        prog.info().ok()?.verified_instruction_count()
    }

    /// Pins every map under `dir` (mounting bpffs on /sys/fs/bpf if needed).
    /// Pins left by a process that did not exit cleanly are replaced.
    ///
    /// A directory that exists is used as it is: the service's own (tmpfiles.d
    /// makes `/sys/fs/bpf/lagran` owned by the `lagran` user, who could not
    /// create it again in the root-owned `/sys/fs/bpf`), so a process that is
    /// not root leaves it in place at the end. One this process creates, or
    /// any when it runs as root (which can create it again), goes once empty.
    pub fn pin_maps(&mut self, dir: &Path) -> Result<(), XdpError> {
        ensure_bpffs(dir)?;
        // SAFETY: geteuid(2) cannot fail.
        if dir.is_dir() && unsafe { libc::geteuid() } == 0 {
            self.pin_dir = Some(dir.to_path_buf());
        } else if !dir.is_dir() {
            std::fs::create_dir_all(dir).map_err(|source| XdpError::Bpffs {
                path: dir.to_path_buf(),
                source: std::io::Error::new(
                    source.kind(),
                    format!(
                        "{source}: create it owned by the service's user (`d {} 0700 lagran lagran` in tmpfiles.d)",
                        dir.display()
                    ),
                ),
            })?;
            self.pin_dir = Some(dir.to_path_buf());
        }
        for name in MAP_NAMES.iter().chain(&OPTIONAL_MAP_NAMES) {
            let path = dir.join(name);
            if path.exists() {
                tracing::warn!(path = %path.display(), "replacing a stale pinned map");
                std::fs::remove_file(&path).map_err(|source| XdpError::Bpffs { path: path.clone(), source })?;
            }
            let map = match self.ebpf.map(name) {
                Some(map) => map,
                None if OPTIONAL_MAP_NAMES.contains(name) => continue,
                None => return Err(XdpError::NoMap(name)),
            };
            map.pin(&path).map_err(|source| XdpError::Pin {
                map: name,
                path: path.clone(),
                source: Box::new(source),
            })?;
            self.pins.push(path);
        }
        Ok(())
    }

    /// Takes the query log's ring and drop counts (see [`super::tap`]).
    pub fn take_tap(&mut self) -> Result<Option<super::tap::TapMaps>, XdpError> {
        super::tap::TapMaps::from_ebpf(&mut self.ebpf)
    }

    /// Takes the maps and writes the config (fast path off until the first sync).
    pub fn map_writer(&mut self, dns_port: u16, udp_payload: u16) -> Result<MapWriter, XdpError> {
        MapWriter::new(Maps::from_ebpf(&mut self.ebpf)?, dns_port, udp_payload)
    }

    /// The loaded XDP program.
    fn program(&self) -> Result<&Xdp, XdpError> {
        self.ebpf
            .program(PROGRAM)
            .ok_or(XdpError::NoProgram(PROGRAM))?
            .try_into()
            .map_err(|e| XdpError::Program { name: PROGRAM, source: Box::new(e) })
    }

    /// Runs the program once on `frame` (`BPF_PROG_TEST_RUN`).
    pub fn test_run(&self, frame: &[u8]) -> Result<TestRunOutput, XdpError> {
        let prog = self.program()?;
        // Room for the answers the program appends.
        let mut out = vec![0u8; frame.len() + 512];
        let opts = TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), ..TestRunOptions::default() };
        let res = prog.test_run(opts).map_err(|e| XdpError::TestRun(Box::new(e)))?;
        out.truncate(res.data_size_out as usize);
        Ok(TestRunOutput { action: res.return_value, frame: out })
    }

    /// Runs the program `repeat` times on `frame` (`BPF_PROG_TEST_RUN`); returns
    /// the last action and the kernel's mean time per run.
    ///
    /// Each run starts from `frame`'s bytes only when the program leaves them
    /// alone (XDP_PASS): an answered frame is rewritten in place, and the next
    /// repetition sees the response. Time answered frames with `repeat` 1.
    pub fn test_run_repeat(&self, frame: &[u8], repeat: u32) -> Result<(u32, std::time::Duration), XdpError> {
        let prog = self.program()?;
        let mut out = vec![0u8; frame.len() + 512];
        let opts =
            TestRunOptions { data_in: Some(frame), data_out: Some(&mut out), repeat, ..TestRunOptions::default() };
        let res = prog.test_run(opts).map_err(|e| XdpError::TestRun(Box::new(e)))?;
        Ok((res.return_value, res.duration))
    }

    fn unpin(&mut self) {
        for path in self.pins.drain(..) {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "could not remove a pinned map");
            }
        }
        if let Some(dir) = self.pin_dir.take() {
            // Only if empty: someone else's pins stay.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Drop for LoadedXdp {
    fn drop(&mut self) {
        self.unpin();
    }
}

fn program_mut(ebpf: &mut Ebpf) -> Result<&mut Xdp, XdpError> {
    ebpf.program_mut(PROGRAM)
        .ok_or(XdpError::NoProgram(PROGRAM))?
        .try_into()
        .map_err(|e| XdpError::Program { name: PROGRAM, source: Box::new(e) })
}

/// Makes sure `dir` is (or will be) on a bpffs; mounts one on /sys/fs/bpf when
/// that is where `dir` lives and nothing is mounted there.
fn ensure_bpffs(dir: &Path) -> Result<(), XdpError> {
    let mut probe = dir;
    while !probe.exists() {
        probe = probe.parent().unwrap_or(Path::new("/"));
    }
    if fs_type(probe)? == BPF_FS_MAGIC {
        return Ok(());
    }
    let root = Path::new("/sys/fs/bpf");
    if dir.starts_with(root) && fs_type(root).ok() != Some(BPF_FS_MAGIC) {
        std::fs::create_dir_all(root).map_err(|source| XdpError::Bpffs { path: root.to_path_buf(), source })?;
        tracing::info!("mounting bpffs on /sys/fs/bpf");
        // SAFETY: plain mount(2) with NUL-terminated constant strings.
        let rc = unsafe { libc::mount(c"bpf".as_ptr(), c"/sys/fs/bpf".as_ptr(), c"bpf".as_ptr(), 0, std::ptr::null()) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            let source = std::io::Error::new(
                e.kind(),
                format!(
                    "mounting bpffs: {e} (mounting takes CAP_SYS_ADMIN: mount it before the service starts, as systemd does at boot)"
                ),
            );
            return Err(XdpError::Bpffs { path: root.to_path_buf(), source });
        }
        return Ok(());
    }
    Err(XdpError::Bpffs {
        path: dir.to_path_buf(),
        source: std::io::Error::other("not on a bpffs: choose a pin directory under /sys/fs/bpf"),
    })
}

fn fs_type(path: &Path) -> Result<i64, XdpError> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| XdpError::Bpffs { path: path.to_path_buf(), source: std::io::Error::other(e) })?;
    // SAFETY: `st` is plain data filled by statfs(2).
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(XdpError::Bpffs { path: path.to_path_buf(), source: std::io::Error::last_os_error() });
    }
    Ok(st.f_type as i64)
}

/// Where the kernel's switch for per-program run-time accounting lives.
const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// The kernel's accounting of the program (`bpf_prog_info.run_time_ns`, `run_cnt`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunStats {
    pub run_time_ns: u64,
    pub runs: u64,
}

impl RunStats {
    /// As Prometheus text: `lagran_xdp_run_time_ns_total` and `lagran_xdp_runs_total`.
    pub fn render_prometheus(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "# HELP lagran_xdp_run_time_ns_total Time the kernel spent in the XDP program (kernel.bpf_stats_enabled=1)."
        );
        let _ = writeln!(out, "# TYPE lagran_xdp_run_time_ns_total counter");
        let _ = writeln!(out, "lagran_xdp_run_time_ns_total {}", self.run_time_ns);
        let _ = writeln!(out, "# HELP lagran_xdp_runs_total Runs of the XDP program (kernel.bpf_stats_enabled=1).");
        let _ = writeln!(out, "# TYPE lagran_xdp_runs_total counter");
        let _ = writeln!(out, "lagran_xdp_runs_total {}", self.runs);
    }
}

/// How the program holds its interface.
enum Attachment {
    /// A bpf_link pinned under the pin directory (`link_<iface>`). It outlives a
    /// daemon that dies without detaching (SIGKILL, OOM), so the program keeps
    /// answering from the pinned maps meanwhile, and the next daemon replaces the
    /// program inside it atomically (`bpf_link_update`) instead of failing with
    /// EBUSY. Removing the pin file detaches it by hand.
    Pinned(PinnedLink),
    /// A link only this process holds (no pin directory: tests, benchmarks).
    Owned(XdpLinkId),
}

/// The pinned link of `iface` under `dir`.
fn link_pin_path(dir: &Path, iface: &str) -> PathBuf {
    dir.join(format!("link_{iface}"))
}

/// Puts `prog` into the link a previous daemon left pinned at `path`, atomically:
/// the interface never runs without a program.
fn take_over(prog: &mut Xdp, path: &Path) -> Result<PinnedLink, String> {
    let pinned = PinnedLink::from_pin(path).map_err(|e| e.to_string())?;
    let link = XdpLink::try_from(FdLink::from(pinned)).map_err(|e| format!("not an XDP link: {e}"))?;
    let id = prog.attach_to_link(link).map_err(|e| e.to_string())?;
    // The pin keeps the link alive; hold it through the pin and let this copy go.
    drop(prog.take_link(id).map_err(|e| e.to_string())?);
    PinnedLink::from_pin(path).map_err(|e| e.to_string())
}

/// The fast path attached to an interface, with its map writer.
pub struct XdpHandle {
    iface: String,
    mode: AttachMode,
    link: Option<Attachment>,
    writer: MapWriter,
    loaded: LoadedXdp,
}

impl XdpHandle {
    /// Loads `obj`, pins the maps under `/sys/fs/bpf/lagran/`, and attaches to
    /// `iface` in native mode, else generic. Answers only UDP to `dns_port`.
    pub fn attach(iface: &str, dns_port: u16, obj: &[u8]) -> Result<XdpHandle, XdpError> {
        XdpHandle::attach_with(iface, dns_port, obj, &XdpOptions::default())
    }

    /// Checks the capabilities first ([`super::privileges`]): a missing one is
    /// named instead of surfacing as the kernel's EPERM.
    pub fn attach_with(iface: &str, dns_port: u16, obj: &[u8], opts: &XdpOptions) -> Result<XdpHandle, XdpError> {
        super::privileges::check_xdp()?;
        let mut loaded = LoadedXdp::load(obj)?;
        if let Some(dir) = &opts.pin_dir {
            loaded.pin_maps(dir)?;
        }
        let mut writer = loaded.map_writer(dns_port, opts.udp_payload)?;
        let wanted =
            if opts.listen.is_empty() { vec![SocketAddr::from(([0, 0, 0, 0], dns_port))] } else { opts.listen.clone() };
        let listen = expand_listen(&wanted, iface)?;
        if listen.is_empty() {
            tracing::warn!(iface, ?wanted, "no listen address on the interface: the fast path answers nothing");
        }
        writer.set_listen(&listen)?;
        let prog = program_mut(&mut loaded.ebpf)?;
        let link_path = opts.pin_dir.as_deref().map(|d| link_pin_path(d, iface));
        if let Some(path) = link_path.as_deref().filter(|p| p.exists()) {
            match take_over(prog, path) {
                Ok(pinned) => {
                    tracing::warn!(
                        iface,
                        link = %path.display(),
                        ?listen,
                        "took over the XDP link a previous daemon left attached (it did not shut down cleanly)"
                    );
                    let link = Some(Attachment::Pinned(pinned));
                    return Ok(XdpHandle {
                        iface: iface.to_string(),
                        mode: AttachMode::TakenOver,
                        link,
                        writer,
                        loaded,
                    });
                }
                Err(e) => {
                    tracing::warn!(iface, link = %path.display(), error = %e, "the pinned XDP link is unusable; removing it");
                    std::fs::remove_file(path)
                        .map_err(|source| XdpError::Bpffs { path: path.to_path_buf(), source })?;
                }
            }
        }
        let (link, mode) = match opts.mode {
            Some(mode) => {
                let link = prog.attach(iface, mode.aya()).map_err(|e| XdpError::AttachMode {
                    iface: iface.to_string(),
                    mode,
                    source: Box::new(e),
                })?;
                (link, mode)
            }
            None => match prog.attach(iface, XdpMode::Driver) {
                Ok(link) => (link, AttachMode::Native),
                Err(native) => {
                    tracing::warn!(iface, error = %native, "native XDP attach failed; trying generic mode");
                    match prog.attach(iface, XdpMode::Skb) {
                        Ok(link) => (link, AttachMode::Generic),
                        Err(generic) => {
                            return Err(XdpError::Attach {
                                iface: iface.to_string(),
                                native: native.to_string(),
                                generic: generic.to_string(),
                            });
                        }
                    }
                }
            },
        };
        let link = match link_path {
            Some(path) => {
                let owned =
                    prog.take_link(link).map_err(|e| XdpError::Program { name: PROGRAM, source: Box::new(e) })?;
                // Kernels without XDP links (< 5.9) attach through netlink: nothing to pin.
                let fd = FdLink::try_from(owned).map_err(|e| XdpError::LinkPin {
                    path: path.clone(),
                    reason: format!(
                        "not a bpf_link ({e}): this kernel attaches XDP through netlink; 5.9 or newer is needed"
                    ),
                })?;
                Attachment::Pinned(
                    fd.pin(&path).map_err(|e| XdpError::LinkPin { path: path.clone(), reason: e.to_string() })?,
                )
            }
            None => Attachment::Owned(link),
        };
        tracing::info!(iface, %mode, ?listen, pins = ?opts.pin_dir, "XDP fast path attached");
        Ok(XdpHandle { iface: iface.to_string(), mode, link: Some(link), writer, loaded })
    }

    pub fn iface(&self) -> &str {
        &self.iface
    }

    pub fn mode(&self) -> AttachMode {
        self.mode
    }

    /// See [`LoadedXdp::take_debug_logger`].
    pub fn take_debug_logger<T: log::Log>(&mut self, logger: T) -> Option<aya_log::EbpfLogger<T>> {
        self.loaded.take_debug_logger(logger)
    }

    /// Whether the program is on the interface: this handle holds its link
    /// and the interface still exists (a deleted interface takes the program
    /// with it).
    pub fn attached(&self) -> bool {
        let Ok(name) = std::ffi::CString::new(self.iface.as_str()) else { return false };
        // SAFETY: if_nametoindex(3) reads the NUL-terminated name only.
        self.link.is_some() && unsafe { libc::if_nametoindex(name.as_ptr()) } != 0
    }

    /// `lagran_xdp_attached{interface,mode}`: 1 while [`XdpHandle::attached`], else 0.
    pub fn render_attached(&self, out: &mut String) {
        use std::fmt::Write as _;
        out.push_str(
            "# HELP lagran_xdp_attached 1 while the XDP program is attached to the interface; 0 once detached \
             (shutdown) or when the interface is gone.\n# TYPE lagran_xdp_attached gauge\n",
        );
        let iface = self.iface.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(
            out,
            "lagran_xdp_attached{{interface=\"{iface}\",mode=\"{}\"}} {}",
            self.mode.label(),
            u8::from(self.attached())
        );
    }

    /// See [`LoadedXdp::take_tap`].
    pub fn take_tap(&mut self) -> Result<Option<super::tap::TapMaps>, XdpError> {
        self.loaded.take_tap()
    }

    /// The writer that keeps the maps equal to the route table.
    pub fn writer(&mut self) -> &mut MapWriter {
        &mut self.writer
    }

    /// The kernel's accounting of the program: (total run time, runs). `None`
    /// unless `kernel.bpf_stats_enabled` is 1 (the kernel counts nothing then).
    pub fn run_stats(&self) -> Option<RunStats> {
        let on = std::fs::read_to_string(BPF_STATS_SYSCTL).ok()?;
        if on.trim() != "1" {
            return None;
        }
        let prog: &Xdp = self.loaded.ebpf.program(PROGRAM)?.try_into().ok()?;
        let info = prog.info().ok()?;
        Some(RunStats { run_time_ns: info.run_time().as_nanos() as u64, runs: info.run_count() })
    }

    /// Detaches the program; the maps stay pinned until the handle is dropped.
    pub fn detach(&mut self) -> Result<(), XdpError> {
        match self.link.take() {
            Some(Attachment::Owned(link)) => {
                let prog = program_mut(&mut self.loaded.ebpf)?;
                prog.detach(link).map_err(|e| XdpError::Program { name: PROGRAM, source: Box::new(e) })?;
            }
            // Unpinned and closed, the link goes and takes the program off the interface.
            Some(Attachment::Pinned(pinned)) => {
                drop(pinned.unpin().map_err(|source| XdpError::Bpffs {
                    path: PathBuf::from(format!("link_{}", self.iface)),
                    source,
                })?)
            }
            None => return Ok(()),
        }
        tracing::info!(iface = %self.iface, "XDP fast path detached");
        Ok(())
    }
}

impl Drop for XdpHandle {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            tracing::warn!(iface = %self.iface, error = %e, "detaching XDP failed");
        }
        // `loaded` unpins the maps when it drops.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_lifts_the_locked_memory_limit_when_it_may() {
        let _ = ebpf_loader();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit(2) writes the struct passed; geteuid(2) takes nothing.
        let (rc, root) = unsafe { (libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim), libc::geteuid() == 0) };
        assert_eq!(rc, 0);
        // Unlimited where the process may raise its hard limit (root with
        // CAP_SYS_RESOURCE, as in CI's guests), else at least up to it.
        assert_eq!(lim.rlim_cur, lim.rlim_max, "the soft limit is raised to the hard one");
        let raise = libc::rlimit { rlim_cur: libc::RLIM_INFINITY, rlim_max: libc::RLIM_INFINITY };
        // SAFETY: setrlimit(2) reads the struct passed.
        let may = root && unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raise) } == 0;
        if may {
            assert_eq!(lim.rlim_max, libc::RLIM_INFINITY, "raising was allowed, so the loader had raised it");
        }
    }

    #[test]
    fn run_stats_render_as_counters() {
        let mut out = String::new();
        RunStats { run_time_ns: 1234, runs: 10 }.render_prometheus(&mut out);
        assert!(out.contains("lagran_xdp_run_time_ns_total 1234\n"), "{out}");
        assert!(out.contains("lagran_xdp_runs_total 10\n"), "{out}");
    }

    #[test]
    fn handles_can_move_to_another_task() {
        fn send<T: Send>() {}
        send::<XdpHandle>();
        send::<MapWriter>();
        send::<Maps>();
    }
}
