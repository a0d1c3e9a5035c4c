//! The initramfs each guest boots: static busybox, the init script, the tools
//! and test binaries with their shared libraries, `veth.ko` and its dependencies.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use super::{GUEST_INIT, GUEST_TOOLS, Kernel, Payload};
use crate::util;

/// A staging directory removed on drop, also when a step fails.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn build_initramfs(kernel: &Kernel, payload: &Payload, out: &Path) -> anyhow::Result<()> {
    let stage = TempDir(out.with_extension("d"));
    let r = &stage.0;
    if r.exists() {
        std::fs::remove_dir_all(r)?;
    }
    for d in
        ["bin", "sbin", "usr/bin", "usr/sbin", "dev", "proc", "sys", "run", "tmp", "etc", "lib/modules", "test/bin"]
    {
        std::fs::create_dir_all(r.join(d))?;
    }
    let busybox = Path::new("/bin/busybox");
    if !is_static(busybox) {
        bail!("{} is not statically linked: `apt-get install busybox-static`", busybox.display());
    }
    copy(busybox, &r.join("bin/busybox"))?;
    write_exec(&r.join("init"), GUEST_INIT)?;
    std::fs::write(r.join("etc/resolv.conf"), "nameserver 127.0.0.1\n")?;
    for (tool, dst) in GUEST_TOOLS {
        let src = util::which(tool).with_context(|| format!("`{tool}` is not installed: run `cargo xtask setup`"))?;
        add_elf(r, &src, Path::new(dst), false)?;
    }
    copy(&payload.object, &r.join("test/lagran.o"))?;
    let mut list = String::new();
    for (name, exe) in &payload.tests {
        add_elf(r, exe, &Path::new("/test/bin").join(name), true)?;
        list.push_str(name);
        list.push('\n');
    }
    std::fs::write(r.join("test/tests"), list)?;

    // veth and its dependencies, decompressed (busybox insmod takes plain .ko).
    let mut cmd = Command::new("modprobe");
    cmd.arg("-d").arg(&kernel.root).args(["-S", &kernel.release, "--show-depends", "veth"]);
    let deps = util::output(&mut cmd)?;
    let mut load = String::new();
    for line in deps.lines() {
        let mut w = line.split_whitespace();
        let (Some("insmod"), Some(path)) = (w.next(), w.next()) else { continue };
        let path = Path::new(path);
        let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let name = file.trim_end_matches(".xz").trim_end_matches(".zst").trim_end_matches(".gz");
        let dst = r.join("lib/modules").join(name);
        let decompress = match path.extension().and_then(|e| e.to_str()) {
            Some("xz") => Some("xz"),
            Some("zst") => Some("zstd"),
            Some("gz") => Some("gzip"),
            _ => None,
        };
        match decompress {
            Some(tool) => {
                let mut cmd = Command::new(tool);
                cmd.arg("-dc").arg(path);
                let line = util::display(&cmd);
                let out = cmd.output().with_context(|| format!("failed to start `{line}`"))?;
                if !out.status.success() {
                    bail!("`{line}` failed with {}", out.status);
                }
                std::fs::write(&dst, out.stdout)?;
            }
            None => copy(path, &dst)?,
        }
        writeln!(load, "/lib/modules/{name}")?;
    }
    std::fs::write(r.join("etc/modules.load"), load)?;

    let mut cpio = Command::new("sh");
    cpio.arg("-c")
        .arg("cd \"$1\" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet > \"$2\"")
        .arg("sh")
        .arg(r)
        .arg(out);
    util::output(&mut cpio)?;
    Ok(())
}

fn copy(src: &Path, dst: &Path) -> anyhow::Result<()> {
    if let Some(dir) = dst.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::copy(src, dst).with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    Ok(())
}

fn write_exec(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn is_static(path: &Path) -> bool {
    Command::new("ldd").arg(path).output().is_ok_and(|o| {
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        text.contains("not a dynamic executable") || text.contains("statically linked")
    })
}

/// Copies an executable to `dst` inside the image (stripped of debug info when
/// `strip`), and its shared libraries (`ldd`) to the same absolute paths.
fn add_elf(root: &Path, src: &Path, dst: &Path, strip: bool) -> anyhow::Result<()> {
    let target = root.join(dst.strip_prefix("/").unwrap_or(dst));
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if strip && util::which("objcopy").is_some() {
        util::output(Command::new("objcopy").arg("--strip-debug").arg(src).arg(&target))?;
    } else {
        copy(src, &target)?;
    }
    if is_static(src) {
        return Ok(());
    }
    let ldd = util::output(Command::new("ldd").arg(src))?;
    for lib in ldd.split_whitespace().filter(|w| w.starts_with('/')) {
        let lib = Path::new(lib);
        let in_image = root.join(lib.strip_prefix("/").unwrap_or(lib));
        if !in_image.exists() {
            copy(lib, &in_image)?;
        }
    }
    Ok(())
}
