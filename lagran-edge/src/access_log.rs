//! The access log: one JSON line per request, written by a thread of its own.
//!
//! The request path hands a line to a bounded queue and goes on; when the queue
//! is full the line is dropped and counted (`lagran_edge_access_log_dropped`), so a
//! slow disk never slows clients. The file is rotated by size: past
//! `access_log_max_bytes` it is renamed to `<name>.1` (replacing the previous
//! one) and a new file is started.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tracing::warn;

/// Lines queued for the writer at most.
const QUEUE: usize = 8192;

/// One request, as logged.
#[derive(Debug, Serialize)]
pub struct Line<'a> {
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub site: &'a str,
    pub client: String,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub bytes: u64,
    pub cache: &'static str,
    /// Milliseconds to the origin's response head; absent when the origin was not asked.
    pub origin_ms: Option<f64>,
    pub tls: Option<&'static str>,
    /// Milliseconds from the request head to the end of the response body.
    pub duration_ms: f64,
}

#[derive(Debug)]
pub struct AccessLog {
    lines: SyncSender<Vec<u8>>,
    dropped: Arc<AtomicU64>,
}

impl AccessLog {
    /// Opens (appending) `path` and starts the writer thread.
    pub fn open(path: &Path, max_bytes: u64) -> io::Result<AccessLog> {
        let writer = Writer::open(path.to_owned(), max_bytes)?;
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new().name("access-log".into()).spawn(move || writer.run(rx))?;
        Ok(AccessLog { lines: tx, dropped: Arc::default() })
    }

    /// Queues `line`; drops it when the queue is full.
    pub fn log(&self, line: &Line<'_>) {
        let mut bytes = serde_json::to_vec(line).expect("a log line serializes");
        bytes.push(b'\n');
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.lines.try_send(bytes) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lines dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    file: BufWriter<File>,
    size: u64,
}

impl Writer {
    fn open(path: PathBuf, max_bytes: u64) -> io::Result<Writer> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(Writer { path, max_bytes, file: BufWriter::new(file), size })
    }

    fn run(mut self, lines: Receiver<Vec<u8>>) {
        loop {
            // Flush once the queue is idle, so the file is current within a moment.
            let line = match lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.file.flush();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if let Err(e) = self.write(&line) {
                warn!(path = %self.path.display(), error = %e, "access log write failed");
            }
        }
        let _ = self.file.flush();
    }

    fn write(&mut self, line: &[u8]) -> io::Result<()> {
        if self.max_bytes > 0 && self.size + line.len() as u64 > self.max_bytes && self.size > 0 {
            self.file.flush()?;
            let mut rotated = self.path.clone().into_os_string();
            rotated.push(".1");
            fs::rename(&self.path, &rotated)?;
            self.file = BufWriter::new(OpenOptions::new().create(true).append(true).open(&self.path)?);
            self.size = 0;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }
}

/// `time` as RFC 3339 in UTC with milliseconds.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let (days, secs) = ((since.as_secs() / 86_400) as i64, since.as_secs() % 86_400);
    let (y, m, d) = civil_from_days(days);
    let (h, min, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{:03}Z", since.subsec_millis())
}

/// Year, month, day of a count of days since 1970-01-01 (the proleptic Gregorian
/// calendar's well-known conversion; ten lines spare a date crate for one format).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        let t = httpdate::parse_http_date("Fri, 04 Dec 2026 23:45:07 GMT").unwrap() + Duration::from_millis(42);
        assert_eq!(rfc3339(t), "2026-12-04T23:45:07.042Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = httpdate::parse_http_date("Tue, 29 Feb 2028 00:00:00 GMT").unwrap();
        assert_eq!(rfc3339(leap), "2028-02-29T00:00:00.000Z");
    }

    fn line(path: &str) -> Line<'_> {
        Line {
            time: rfc3339(SystemTime::now()),
            site: "a.test",
            client: "127.0.0.1".into(),
            method: "GET",
            path,
            status: 200,
            bytes: 5,
            cache: "HIT",
            origin_ms: None,
            tls: Some("TLSv1.3"),
            duration_ms: 0.5,
        }
    }

    #[test]
    fn writes_json_lines_and_rotates_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let log = AccessLog::open(&path, 600).unwrap();
        for i in 0..10 {
            log.log(&line(&format!("/file-{i}")));
        }
        drop(log);
        // The writer ends when the queue closes; wait for its last flush.
        let mut rotated = path.clone().into_os_string();
        rotated.push(".1");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let read = || (fs::read_to_string(&path).unwrap_or_default(), fs::read_to_string(&rotated).unwrap_or_default());
        while !read().0.contains("file-9") {
            assert!(std::time::Instant::now() < deadline, "the last line never came: {:?}", read());
            std::thread::sleep(Duration::from_millis(20));
        }
        let (current, old) = read();
        assert!(!old.is_empty(), "the log was rotated");
        assert!(current.len() <= 600);
        let last: serde_json::Value = serde_json::from_str(current.lines().last().unwrap()).unwrap();
        assert_eq!(
            (last["path"].as_str(), last["cache"].as_str(), last["tls"].as_str()),
            (Some("/file-9"), Some("HIT"), Some("TLSv1.3"))
        );
    }
}
