//! The task that owns the reader's socket: connects (with backoff while the
//! reader is absent), opens a Frame Streams session, writes the queued
//! exchanges as dnstap messages in batches, reconnects when the reader goes
//! away, and at shutdown writes what is queued and ends with STOP/FINISH.
//!
//! Exchanges queued while no reader is connected wait in the queue; once it
//! is full, [`Tap::log`] drops new ones (counted). A batch whose write fails
//! is lost with the connection and counted too.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Exchange, Source, Tap, frame_streams, schema};

/// First pause after a failed connection; doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A handshake, a batch's write or the closing exchange taking longer than
/// this ends the connection: a reader that stopped reading is a reader gone.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Exchanges written in one write.
const BATCH: usize = 256;

/// What the responders queue: an exchange and who logged it.
pub type Queued = (Source, Exchange);

/// Why a connection ended.
enum Ended {
    Shutdown,
    Broken(io::Error),
}

/// Runs until `shutdown`, then returns once the stream is closed (or could
/// not be, within [`IO_TIMEOUT`]).
pub async fn run(tap: Arc<Tap>, mut rx: mpsc::Receiver<Queued>, socket: PathBuf, shutdown: CancellationToken) {
    let mut backoff = MIN_BACKOFF;
    let mut reported = false;
    loop {
        let opened = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(IO_TIMEOUT, connect(&socket)) => r.unwrap_or_else(|_| Err(timed_out())),
        };
        let mut stream = match opened {
            Ok(s) => s,
            Err(e) => {
                // Once per outage, not once per attempt.
                if !reported {
                    tracing::warn!(socket = %socket.display(), error = %e, "dnstap reader unreachable; retrying");
                    reported = true;
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        tracing::info!(socket = %socket.display(), "dnstap reader connected");
        (backoff, reported) = (MIN_BACKOFF, false);
        match forward(&tap, &mut rx, &mut stream, &shutdown).await {
            Ended::Shutdown => {
                match tokio::time::timeout(IO_TIMEOUT, finish(&tap, &mut rx, &mut stream)).await {
                    Ok(Ok(())) => tracing::info!(socket = %socket.display(), "dnstap stream closed"),
                    Ok(Err(e)) => {
                        tracing::warn!(socket = %socket.display(), error = %e, "dnstap stream not closed cleanly")
                    }
                    Err(_) => tracing::warn!(socket = %socket.display(), "dnstap reader did not answer STOP in time"),
                }
                return;
            }
            Ended::Broken(e) => {
                tracing::warn!(socket = %socket.display(), error = %e, "dnstap reader gone; reconnecting")
            }
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "timed out")
}

async fn connect(socket: &Path) -> io::Result<UnixStream> {
    let mut stream = UnixStream::connect(socket).await?;
    frame_streams::open(&mut stream).await?;
    Ok(stream)
}

/// Writes queued exchanges until shutdown or a failed write.
async fn forward(
    tap: &Tap,
    rx: &mut mpsc::Receiver<Queued>,
    stream: &mut UnixStream,
    shutdown: &CancellationToken,
) -> Ended {
    let mut frames = Vec::new();
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return Ended::Shutdown,
            q = rx.recv() => match q {
                Some(q) => q,
                None => return Ended::Shutdown,
            },
        };
        let mut batch = vec![first];
        while batch.len() < BATCH
            && let Ok(q) = rx.try_recv()
        {
            batch.push(q);
        }
        if let Err(e) = write_batch(tap, batch, &mut frames, stream).await {
            return Ended::Broken(e);
        }
    }
}

/// Encodes and writes `batch` in one write; on failure its exchanges are
/// counted as dropped.
async fn write_batch(tap: &Tap, batch: Vec<Queued>, frames: &mut Vec<u8>, stream: &mut UnixStream) -> io::Result<()> {
    frames.clear();
    let mut messages = 0;
    let mut lost = [0u64; Source::ALL.len()];
    for (source, exchange) in batch {
        lost[source as usize] += 1;
        for m in schema::messages(exchange) {
            frames.extend_from_slice(&(m.encoded_len() as u32).to_be_bytes());
            m.encode(frames).map_err(io::Error::other)?;
            messages += 1;
        }
    }
    let written = tokio::time::timeout(IO_TIMEOUT, stream.write_all(frames)).await.unwrap_or_else(|_| Err(timed_out()));
    match written {
        Ok(()) => {
            tap.count_written(messages);
            Ok(())
        }
        Err(e) => {
            for source in Source::ALL {
                tap.count_dropped(source, lost[source as usize]);
            }
            Err(e)
        }
    }
}

/// At shutdown: what is still queued, then STOP and the reader's FINISH.
async fn finish(tap: &Tap, rx: &mut mpsc::Receiver<Queued>, stream: &mut UnixStream) -> io::Result<()> {
    let mut frames = Vec::new();
    let mut batch = Vec::new();
    while let Ok(q) = rx.try_recv() {
        batch.push(q);
    }
    if !batch.is_empty() {
        write_batch(tap, batch, &mut frames, stream).await?;
    }
    frame_streams::close(stream).await
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use prost::Message as _;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    use super::*;
    use crate::dnstap::Protocol;
    use crate::dnstap::frame_streams::{Control, DNSTAP_CONTENT_TYPE, control_frame, read_control};
    use crate::dnstap::schema::{AUTH_QUERY, AUTH_RESPONSE, Dnstap};

    fn exchange(id: u8) -> Exchange {
        Exchange {
            protocol: Protocol::Udp,
            client: "192.0.2.1:5000".parse().unwrap(),
            server: Some("127.0.0.1:53".parse().unwrap()),
            query_time: SystemTime::now(),
            query: vec![id],
            response: Some((SystemTime::now(), vec![id, 0x80])),
        }
    }

    /// A reader: accepts one connection, reads `n` dnstap messages, and (when
    /// `finish`) waits for STOP and answers FINISH; else closes after them.
    async fn reader(listener: &UnixListener, n: usize, finish: bool) -> Vec<Dnstap> {
        let (mut s, _) = listener.accept().await.unwrap();
        assert_eq!(read_control(&mut s).await.unwrap().control, Control::Ready as u32);
        s.write_all(&control_frame(Control::Accept, Some(DNSTAP_CONTENT_TYPE))).await.unwrap();
        assert_eq!(read_control(&mut s).await.unwrap().control, Control::Start as u32);
        let mut out = Vec::new();
        for _ in 0..n {
            let len = s.read_u32().await.unwrap();
            let mut body = vec![0; len as usize];
            s.read_exact(&mut body).await.unwrap();
            out.push(Dnstap::decode(&body[..]).unwrap());
        }
        if finish {
            assert_eq!(read_control(&mut s).await.unwrap().control, Control::Stop as u32);
            s.write_all(&control_frame(Control::Finish, None)).await.unwrap();
        }
        out
    }

    fn query_of(m: &Dnstap) -> (i32, Vec<u8>) {
        let m = m.message.as_ref().unwrap();
        (m.r#type, m.query_message.clone().or(m.response_message.clone()).unwrap())
    }

    #[tokio::test]
    async fn waits_for_a_reader_reconnects_after_it_goes_and_ends_with_stop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tap.sock");
        let (tap, rx) = Tap::new(16);
        let (tap, shutdown) = (Arc::new(tap), CancellationToken::new());
        // Queued before any reader listens: kept, written once one does.
        tap.log(Source::Userspace, exchange(1));
        let task = tokio::spawn(run(tap.clone(), rx, path.clone(), shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listener = UnixListener::bind(&path).unwrap();
        let first = reader(&listener, 2, false).await;
        let seen: Vec<_> = first.iter().map(query_of).collect();
        assert_eq!(seen, [(AUTH_QUERY, vec![1]), (AUTH_RESPONSE, vec![1, 0x80])]);
        // The first reader has gone: the next write fails, its exchange is
        // counted, and the writer connects again.
        let second = tokio::spawn(async move { reader(&listener, 2, true).await });
        tap.log(Source::Userspace, exchange(2));
        for _ in 0..100 {
            if tap.dropped(Source::Userspace) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(tap.dropped(Source::Userspace), 1);
        tap.log(Source::Userspace, exchange(3));
        tokio::time::sleep(Duration::from_millis(500)).await;
        shutdown.cancel();
        let got = tokio::time::timeout(Duration::from_secs(10), second).await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
        let seen: Vec<_> = got.iter().map(query_of).collect();
        assert_eq!(seen, [(AUTH_QUERY, vec![3]), (AUTH_RESPONSE, vec![3, 0x80])]);
        assert_eq!(tap.written.load(std::sync::atomic::Ordering::Relaxed), 4);
    }
}
