//! The access log: one JSON line per request, written by a thread of its own.
//!
//! The request path serializes its line straight into a shared buffer and goes
//! on; the writer thread takes the whole buffer when it passes [`BATCH`] bytes
//! or every [`IDLE_FLUSH`], and writes it with one call. So a request costs one
//! short, rarely contended lock and no allocation or thread wake-up of its own
//! (a queue of single lines woke the writer for nearly every request). When the
//! buffer holds [`MAX_PENDING`] bytes the writer has fallen behind: lines are
//! dropped and counted (`lagran_edge_access_log_dropped`), so a slow disk never
//! slows clients. The file is rotated by size: past `access_log_max_bytes` it
//! is renamed to `<name>.1` (replacing the previous one) and a new file is
//! started, between lines.
//!
//! Lines are written by [`Line::write_json`] rather than through `serde_json`:
//! the keys are fixed, so they are copied as they are instead of escaped one by
//! one, and numbers skip `fmt`: less than half the instructions per line.

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tracing::warn;

/// Bytes after which the writer is woken to write them.
const BATCH: usize = 64 * 1024;
/// Bytes waiting at most; past this lines are dropped.
const MAX_PENDING: usize = 4 * 1024 * 1024;
/// How long the writer waits before writing a smaller batch.
const IDLE_FLUSH: Duration = Duration::from_millis(200);

/// One request, as logged.
#[derive(Debug)]
pub struct Line<'a> {
    /// RFC 3339, UTC, milliseconds.
    pub time: SystemTime,
    pub site: &'a str,
    pub client: IpAddr,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub bytes: u64,
    pub cache: &'static str,
    /// Time to the origin's response head (`origin_ms`); `null` when the origin was not asked.
    pub origin: Option<Duration>,
    pub tls: Option<&'static str>,
    /// From the request head to the end of the response body (`duration_ms`).
    pub duration: Duration,
}

impl Line<'_> {
    /// Appends the line as one JSON object (no newline); milliseconds with
    /// three decimals.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"time\":\"");
        write_rfc3339(out, self.time);
        out.extend_from_slice(b"\",\"site\":");
        json_str(out, self.site);
        out.extend_from_slice(b",\"client\":\"");
        match self.client {
            IpAddr::V4(v4) => {
                let mut digits = itoa::Buffer::new();
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push(b'.');
                    }
                    out.extend_from_slice(digits.format(octet).as_bytes());
                }
            }
            IpAddr::V6(v6) => {
                let _ = write!(out, "{v6}");
            }
        }
        out.extend_from_slice(b"\",\"method\":");
        json_str(out, self.method);
        out.extend_from_slice(b",\"path\":");
        json_str(out, self.path);
        out.extend_from_slice(b",\"status\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
        out.extend_from_slice(b",\"bytes\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.bytes).as_bytes());
        out.extend_from_slice(b",\"cache\":");
        json_str(out, self.cache);
        out.extend_from_slice(b",\"origin_ms\":");
        match self.origin {
            Some(took) => write_ms(out, took),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"tls\":");
        match self.tls {
            Some(tls) => json_str(out, tls),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"duration_ms\":");
        write_ms(out, self.duration);
        out.push(b'}');
    }
}

/// `s` as a JSON string: `"` and `\` escaped, control characters as `\u00XX`
/// (RFC 8259 §7); everything else, UTF-8 included, as it is.
fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut plain = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.extend_from_slice(&bytes[plain..i]);
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
        }
        plain = i + 1;
    }
    out.extend_from_slice(&bytes[plain..]);
    out.push(b'"');
}

/// A duration in milliseconds with three decimals (`12.345`).
fn write_ms(out: &mut Vec<u8>, d: Duration) {
    let micros = d.as_micros();
    out.extend_from_slice(itoa::Buffer::new().format(micros / 1000).as_bytes());
    out.push(b'.');
    push_padded(out, (micros % 1000) as u64, 3);
}

/// `n` in decimal, zero-padded to `width` digits.
fn push_padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(n);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits.len())));
    out.extend_from_slice(digits.as_bytes());
}

/// What the request path and the writer share.
#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<Pending>,
    /// Signalled when `pending` passes [`BATCH`] or the log is closed.
    ready: Condvar,
    dropped: AtomicU64,
}

#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
pub struct AccessLog {
    shared: Arc<Shared>,
}

impl AccessLog {
    /// Opens (appending) `path` and starts the writer thread.
    pub fn open(path: &Path, max_bytes: u64) -> io::Result<AccessLog> {
        let writer = Writer::open(path.to_owned(), max_bytes)?;
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        std::thread::Builder::new().name("access-log".into()).spawn(move || writer.run(&theirs))?;
        Ok(AccessLog { shared })
    }

    /// Adds `line` to the batch; drops it when the writer has fallen behind.
    pub fn log(&self, line: &Line<'_>) {
        let mut pending = self.shared.lock();
        if pending.bytes.len() >= MAX_PENDING {
            drop(pending);
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let before = pending.bytes.len();
        line.write_json(&mut pending.bytes);
        pending.bytes.push(b'\n');
        let full = before < BATCH && pending.bytes.len() >= BATCH;
        drop(pending);
        if full {
            self.shared.ready.notify_one();
        }
    }

    /// Lines dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for AccessLog {
    /// The writer writes what is left and ends.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_one();
    }
}

struct Writer {
    path: PathBuf,
    max_bytes: u64,
    file: File,
    size: u64,
}

impl Writer {
    fn open(path: PathBuf, max_bytes: u64) -> io::Result<Writer> {
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let size = file.metadata()?.len();
        Ok(Writer { path, max_bytes, file, size })
    }

    fn run(mut self, shared: &Shared) {
        lower_own_priority();
        let mut batch = Vec::with_capacity(BATCH * 2);
        loop {
            let closed = {
                let pending = shared.lock();
                let (mut pending, _) = shared
                    .ready
                    .wait_timeout_while(pending, IDLE_FLUSH, |p| p.bytes.len() < BATCH && !p.closed)
                    .unwrap_or_else(|e| e.into_inner());
                std::mem::swap(&mut pending.bytes, &mut batch);
                pending.closed
            };
            if let Err(e) = self.write(&batch) {
                warn!(path = %self.path.display(), error = %e, "access log write failed");
            }
            batch.clear();
            if closed {
                return;
            }
        }
    }

    /// Writes a batch of whole lines, rotating the file first when they would
    /// take it past its limit.
    fn write(&mut self, batch: &[u8]) -> io::Result<()> {
        let mut rest = batch;
        while !rest.is_empty() {
            let room = if self.max_bytes == 0 { u64::MAX } else { self.max_bytes.saturating_sub(self.size) };
            let fits = whole_lines_within(rest, room);
            if fits == 0 && self.size > 0 {
                self.rotate()?;
                continue;
            }
            // A single line longer than the limit goes into a file of its own.
            let take = if fits == 0 { line_len(rest) } else { fits };
            self.file.write_all(&rest[..take])?;
            self.size += take as u64;
            rest = &rest[take..];
        }
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        let mut rotated = self.path.clone().into_os_string();
        rotated.push(".1");
        fs::rename(&self.path, &rotated)?;
        self.file = OpenOptions::new().create(true).append(true).open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

/// Gives the calling thread a lower scheduling weight (nice 10), so that on a
/// busy core its writes yield to the threads answering requests rather than
/// preempting one mid-request; it still gets its share, and the batch bound
/// drops lines only if it falls behind for good.
fn lower_own_priority() {
    // SAFETY: gettid(2) and setpriority(2) have no memory effects; on Linux
    // PRIO_PROCESS with a thread id sets that thread's nice value alone.
    let failed = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10) != 0
    };
    if failed {
        tracing::debug!(error = %io::Error::last_os_error(), "access log writer keeps its priority");
    }
}

/// The length of the first line of `bytes`, its newline included.
fn line_len(bytes: &[u8]) -> usize {
    bytes.iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| i + 1)
}

/// How many leading bytes of `bytes`, ending at a line's end, fit in `room`.
fn whole_lines_within(bytes: &[u8], room: u64) -> usize {
    let limit = bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX));
    if limit == bytes.len() {
        return limit;
    }
    bytes[..limit].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
}

/// The text of one second (`YYYY-MM-DDThh:mm:ss`), kept per thread: the
/// lines of a second share it, and only the milliseconds are written anew.
#[derive(Clone, Copy)]
struct SecondText {
    /// Seconds since 1970-01-01.
    second: u64,
    len: usize,
    text: [u8; 32],
}

thread_local! {
    static LAST_SECOND: Cell<SecondText> = const { Cell::new(SecondText { second: u64::MAX, len: 0, text: [0; 32] }) };
}

/// Appends a time as RFC 3339 in UTC with milliseconds (`YYYY-MM-DDThh:mm:ss.sssZ`).
fn write_rfc3339(out: &mut Vec<u8>, time: SystemTime) {
    let since = time.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let last = LAST_SECOND.with(Cell::get);
    if last.second == since.as_secs() {
        out.extend_from_slice(&last.text[..last.len]);
    } else {
        let start = out.len();
        write_second(out, since.as_secs());
        let written = &out[start..];
        if written.len() <= 32 {
            let mut text = [0u8; 32];
            text[..written.len()].copy_from_slice(written);
            LAST_SECOND.with(|c| c.set(SecondText { second: since.as_secs(), len: written.len(), text }));
        }
    }
    out.push(b'.');
    push_padded(out, u64::from(since.subsec_millis()), 3);
    out.push(b'Z');
}

/// `YYYY-MM-DDThh:mm:ss` of a count of seconds since 1970-01-01.
fn write_second(out: &mut Vec<u8>, second: u64) {
    let (days, secs) = ((second / 86_400) as i64, second % 86_400);
    let (y, m, d) = civil_from_days(days);
    push_padded(out, y.max(0) as u64, 4);
    for (sep, n) in
        [(b'-', u64::from(m)), (b'-', u64::from(d)), (b'T', secs / 3600), (b':', secs / 60 % 60), (b':', secs % 60)]
    {
        out.push(sep);
        push_padded(out, n, 2);
    }
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
        let rfc3339 = |t| {
            let mut out = Vec::new();
            write_rfc3339(&mut out, t);
            String::from_utf8(out).unwrap()
        };
        // A leap day of a century year divisible by 400, and its last second:
        // the next one is in March.
        let t = httpdate::parse_http_date("Tue, 29 Feb 2000 23:59:59 GMT").unwrap() + Duration::from_millis(42);
        assert_eq!(rfc3339(t), "2000-02-29T23:59:59.042Z");
        assert_eq!(rfc3339(t + Duration::from_millis(900)), "2000-02-29T23:59:59.942Z", "the same second");
        assert_eq!(rfc3339(t + Duration::from_millis(958)), "2000-03-01T00:00:00.000Z", "the next one");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = httpdate::parse_http_date("Tue, 29 Feb 2028 00:00:00 GMT").unwrap();
        assert_eq!(rfc3339(leap), "2028-02-29T00:00:00.000Z");
    }

    fn line(path: &str) -> Line<'_> {
        Line {
            time: SystemTime::now(),
            site: "a.test",
            client: IpAddr::from([127, 0, 0, 1]),
            method: "GET",
            path,
            status: 200,
            bytes: 5,
            cache: "HIT",
            origin: None,
            tls: Some("TLSv1.3"),
            duration: Duration::from_micros(500),
        }
    }

    #[test]
    fn a_line_is_json_with_odd_characters_escaped() {
        let mut out = Vec::new();
        let odd = "/a\"b\\c\u{1}d/é";
        let v6 = Line {
            client: "2001:db8::1".parse().unwrap(),
            origin: Some(Duration::from_micros(12_345)),
            tls: None,
            ..line(odd)
        };
        v6.write_json(&mut out);
        let parsed: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(parsed["path"], odd);
        assert_eq!(parsed["client"], "2001:db8::1");
        assert_eq!((parsed["origin_ms"].as_f64(), parsed["duration_ms"].as_f64()), (Some(12.345), Some(0.5)));
        assert!(parsed["tls"].is_null());
        let mut v4 = Vec::new();
        line("/x").write_json(&mut v4);
        let parsed: serde_json::Value = serde_json::from_slice(&v4).unwrap();
        assert_eq!(
            (parsed["client"].as_str(), parsed["status"].as_u64(), parsed["bytes"].as_u64()),
            (Some("127.0.0.1"), Some(200), Some(5))
        );
        assert!(parsed["time"].as_str().unwrap().ends_with('Z'));
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
        assert!(current.len() <= 600 && old.len() <= 600);
        for line in old.lines().chain(current.lines()) {
            serde_json::from_str::<serde_json::Value>(line).expect("every line whole");
        }
        let last: serde_json::Value = serde_json::from_str(current.lines().last().unwrap()).unwrap();
        assert_eq!(
            (last["path"].as_str(), last["cache"].as_str(), last["tls"].as_str()),
            (Some("/file-9"), Some("HIT"), Some("TLSv1.3"))
        );
    }
}
