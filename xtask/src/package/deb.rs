//! The two packages' contents and the `dpkg-deb --build` of each.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context as _;

use super::{Built, deploy};
use crate::util;

/// The workspace version, the packages' upstream version.
const VERSION: &str = env!("CARGO_PKG_VERSION");
const MAINTAINER: &str = "Lagran maintainers <lagran@example.invalid>";
/// systemd.unit(5): where a Debian 12 package puts its units.
const UNIT_DIR: &str = "/lib/systemd/system";

/// One file of a package: where it comes from, where it is installed, its mode.
pub struct Entry {
    pub source: PathBuf,
    pub dest: String,
    pub mode: u32,
    /// Stripped of symbols when copied (the binaries).
    pub strip: bool,
}

impl Entry {
    fn file(source: PathBuf, dest: impl Into<String>, mode: u32) -> Entry {
        Entry { source, dest: dest.into(), mode, strip: false }
    }
}

/// A binary package.
pub struct Package {
    pub name: &'static str,
    pub description: &'static str,
    pub depends: &'static str,
    pub entries: Vec<Entry>,
    /// `postinst`, `prerm`: files of `deploy/debian/`.
    pub scripts: Vec<(&'static str, PathBuf)>,
}

/// `lagran` and `lagran-edge`.
pub fn packages(root: &Path, built: &Built) -> Vec<Package> {
    let deploy = deploy(root);
    let unit = |name: &str| Entry::file(deploy.join("systemd").join(name), format!("{UNIT_DIR}/{name}"), 0o644);
    let conffile = |name: &str| Entry::file(deploy.join("etc").join(name), format!("/etc/lagran/{name}"), 0o640);
    let binary = |source: &Path, name: &str| Entry {
        source: source.to_path_buf(),
        dest: format!("/usr/bin/{name}"),
        mode: 0o755,
        strip: true,
    };
    let mut lagran = vec![
        binary(&built.lagran, "lagran"),
        // Where the loader looks for the object outside a source tree.
        Entry::file(built.bpf_object.clone(), "/usr/lib/lagran/lagran.bpf.o", 0o644),
        unit("lagran-control.service"),
        unit("lagran-dns.service"),
        unit("lagran-serve.service"),
        unit("lagran-monitor.service"),
        Entry::file(deploy.join("sysusers.d/lagran.conf"), "/usr/lib/sysusers.d/lagran.conf", 0o644),
        Entry::file(deploy.join("tmpfiles.d/lagran.conf"), "/usr/lib/tmpfiles.d/lagran.conf", 0o644),
        conffile("control.toml"),
        conffile("dns.toml"),
        conffile("serve.toml"),
        conffile("monitor.env"),
        Entry::file(root.join("docs/operations.md"), "/usr/share/doc/lagran/operations.md", 0o644),
        Entry::file(root.join("README.md"), "/usr/share/doc/lagran/README.md", 0o644),
    ];
    for unit in ["lagran-dns", "lagran-serve"] {
        let drop_in = format!("systemd/{unit}.service.d/xdp.conf");
        lagran.push(Entry::file(deploy.join(&drop_in), format!("/usr/share/lagran/{drop_in}"), 0o644));
    }
    let edge = vec![
        binary(&built.lagran_edge, "lagran-edge"),
        unit("lagran-edge.service"),
        Entry::file(deploy.join("sysusers.d/lagran-edge.conf"), "/usr/lib/sysusers.d/lagran-edge.conf", 0o644),
        conffile("edge.toml"),
        Entry::file(root.join("lagran-edge/edge.example.toml"), "/usr/share/doc/lagran-edge/edge.example.toml", 0o644),
    ];
    let scripts = |name: &str| {
        ["postinst", "prerm"].map(|s| (s, deploy.join("debian").join(format!("{name}.{s}")))).into_iter().collect()
    };
    vec![
        Package {
            name: "lagran",
            description: "authoritative GeoDNS for CDNs: control plane, NS host, CLI\n \
                 lagran control, lagran dns (with the XDP fast path) and lagran serve as\n \
                 systemd services running as the lagran user, and the lagran CLI.",
            depends: "libc6 (>= 2.34), libgcc-s1, systemd",
            entries: lagran,
            scripts: scripts("lagran"),
        },
        Package {
            name: "lagran-edge",
            description: "Lagran CDN edge node\n \
                 lagran-edge: the caching reverse proxy the GeoDNS answers point to,\n \
                 as a systemd service running as the lagran-edge user.",
            depends: "libc6 (>= 2.34), libgcc-s1, systemd",
            entries: edge,
            scripts: scripts("lagran-edge"),
        },
    ]
}

impl Package {
    /// Assembles the tree under `out/<name>/` and builds `out/<name>_<version>_<arch>.deb`,
    /// compressed with xz, or with gzip at its fastest level when `quick` (a
    /// debug build's package, only ever checked: xz takes minutes over its
    /// hundreds of MiB).
    pub fn build(&self, out: &Path, arch: &str, quick: bool) -> anyhow::Result<PathBuf> {
        let tree = out.join(self.name);
        if tree.exists() {
            std::fs::remove_dir_all(&tree).with_context(|| format!("removing {}", tree.display()))?;
        }
        for e in &self.entries {
            let dest = tree.join(e.dest.trim_start_matches('/'));
            install(&e.source, &dest, e.mode)?;
            if e.strip {
                util::run(Command::new("strip").arg("--strip-unneeded").arg(&dest))?;
            }
        }
        let control = tree.join("DEBIAN");
        for (name, source) in &self.scripts {
            install(source, &control.join(name), 0o755)?;
        }
        let conffiles: String =
            self.entries.iter().filter(|e| e.dest.starts_with("/etc/")).map(|e| format!("{}\n", e.dest)).collect();
        write(&control.join("conffiles"), &conffiles)?;
        write(&control.join("control"), &self.control(arch, installed_kib(&tree)?))?;
        let deb = out.join(format!("{}_{VERSION}_{arch}.deb", self.name));
        let compression: &[&str] = if quick { &["-Zgzip", "-z1"] } else { &["-Zxz"] };
        util::run(
            Command::new("dpkg-deb").arg("--root-owner-group").args(compression).arg("--build").arg(&tree).arg(&deb),
        )?;
        Ok(deb)
    }

    /// deb-control(5).
    fn control(&self, arch: &str, installed_kib: u64) -> String {
        format!(
            "Package: {}\nVersion: {VERSION}\nArchitecture: {arch}\nMaintainer: {MAINTAINER}\n\
             Installed-Size: {installed_kib}\nDepends: {}\nSection: net\nPriority: optional\n\
             Homepage: https://example.invalid/lagran\nDescription: {}\n",
            self.name, self.depends, self.description
        )
    }
}

fn install(source: &Path, dest: &Path, mode: u32) -> anyhow::Result<()> {
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::copy(source, dest).with_context(|| format!("copying {} to {}", source.display(), dest.display()))?;
    std::fs::set_permissions(dest, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", dest.display()))
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The tree's size in KiB, without `DEBIAN/` (deb-control(5) `Installed-Size`).
fn installed_kib(tree: &Path) -> anyhow::Result<u64> {
    fn walk(dir: &Path, total: &mut u64) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                if entry.file_name() != "DEBIAN" {
                    walk(&entry.path(), total)?;
                }
            } else {
                *total += meta.len().div_ceil(1024);
            }
        }
        Ok(())
    }
    let mut total = 0;
    walk(tree, &mut total)?;
    Ok(total)
}
