//! A body sent to its client and written into the disk tier at once: the
//! origin's chunks are read by one task, which hands each to the disk writer
//! ([`crate::cache::DiskFill`]) and then to the client, through bounded
//! channels of a few chunks each. The slower of the two sets the pace, so
//! memory stays at a few chunks whatever the object's size.
//!
//! A client that goes away ends the task: the origin's body is dropped and the
//! half-written file removed. A writer that fails drops its end of its channel
//! and the client is still served.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame};
use tokio::sync::mpsc;

use crate::body::{BoxError, EdgeBody};
use crate::cache::{Chunk, DiskFill};

/// Chunks in flight to each side at most.
const IN_FLIGHT: usize = 4;

/// `origin`, also written through `fill`.
pub fn tee(origin: EdgeBody, fill: DiskFill) -> EdgeBody {
    let (to_client, from_origin) = mpsc::channel(IN_FLIGHT);
    let (to_disk, mut disk_chunks) = mpsc::channel(IN_FLIGHT);
    tokio::task::spawn_blocking(move || fill.write(&mut disk_chunks));
    tokio::spawn(pump(origin, to_client, to_disk));
    Channel(from_origin).boxed()
}

async fn pump(mut origin: EdgeBody, to_client: mpsc::Sender<Result<Bytes, BoxError>>, to_disk: mpsc::Sender<Chunk>) {
    while let Some(frame) = origin.frame().await {
        let data = match frame.map(Frame::into_data) {
            Ok(Ok(data)) => data,
            Ok(Err(_trailers)) => continue,
            Err(e) => {
                let _ = to_client.send(Err(e)).await;
                return;
            }
        };
        // An error means the writer gave up; the client is served all the same.
        let _ = to_disk.send(Chunk::Data(data.clone())).await;
        if to_client.send(Ok(data)).await.is_err() {
            return;
        }
    }
    let _ = to_disk.send(Chunk::End).await;
}

/// The client's side: what the pump sends.
struct Channel(mpsc::Receiver<Result<Bytes, BoxError>>);

impl Body for Channel {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.get_mut().0.poll_recv(cx).map(|next| next.map(|r| r.map(Frame::data)))
    }
}
