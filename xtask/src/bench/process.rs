//! Background processes the bench starts, each stopped on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::util;

/// A background process, stopped (SIGTERM, then SIGKILL after 5 s) on drop.
pub(super) struct Bg {
    pub(super) name: String,
    pub(super) child: Option<Child>,
    pub(super) log: PathBuf,
}

impl Bg {
    pub(super) fn spawn(name: &str, cmd: &mut Command, log: &Path) -> anyhow::Result<Bg> {
        let line = util::display(cmd);
        eprintln!("+ {line} &> {}", log.display());
        let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("failed to start `{line}`"))?;
        Ok(Bg { name: name.to_string(), child: Some(child), log: log.to_path_buf() })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Fails (with the log's tail) when the process has exited.
    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(c) = &mut self.child
            && let Some(status) = c.try_wait()?
        {
            self.child = None;
            bail!(
                "{} exited early ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 20)
            );
        }
        Ok(())
    }

    pub(super) fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = c.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: {} did not stop on SIGTERM within 5 s; killing it", self.name);
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(super) fn tail(path: &Path, n: usize) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
