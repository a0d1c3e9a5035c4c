//! A body sent to its client and written into the disk tier at once: the
//! origin's chunks are read by one task, which hands each to the disk writer
//! ([`crate::cache::DiskFill`]) and then to the client, through bounded
//! channels of a few chunks each. The slower of the two sets the pace, so
//! memory stays at a few chunks whatever the object's size.
//!
//! A client that goes away ends the task, the origin's body is dropped and the
//! half-written file removed, unless other requests are reading the file as
//! it is written ([`crate::cache::Filling`]): then the task goes on for them,
//! at the disk's pace, and ends as this rule says when the last of them is
//! gone. A writer that fails drops its end of its channel and the client is
//! still served.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;
use tokio::sync::mpsc;

use crate::body::{self, BoxError, EdgeBody};
use crate::cache::{Chunk, DiskFill, Filling};

/// Chunks in flight to each side at most.
const IN_FLIGHT: usize = 4;

/// `origin`, also written through `fill`.
pub fn tee(origin: EdgeBody, fill: DiskFill) -> EdgeBody {
    let (to_client, from_origin) = mpsc::channel(IN_FLIGHT);
    let (to_disk, mut disk_chunks) = mpsc::channel(IN_FLIGHT);
    let filling = fill.filling();
    tokio::task::spawn_blocking(move || fill.write(&mut disk_chunks));
    tokio::spawn(pump(origin, to_client, to_disk, filling));
    body::channel(from_origin)
}

async fn pump(
    mut origin: EdgeBody,
    to_client: mpsc::Sender<Result<Bytes, BoxError>>,
    to_disk: mpsc::Sender<Chunk>,
    filling: Arc<Filling>,
) {
    let mut client = Some(to_client);
    while let Some(frame) = origin.frame().await {
        let data = match frame.map(Frame::into_data) {
            Ok(Ok(data)) => data,
            Ok(Err(_trailers)) => continue,
            Err(e) => {
                if let Some(client) = &client {
                    let _ = client.send(Err(e)).await;
                }
                return;
            }
        };
        // An error means the writer gave up; the client is served all the same.
        let writing = to_disk.send(Chunk::Data(data.clone())).await.is_ok();
        if let Some(to) = &client
            && to.send(Ok(data)).await.is_err()
        {
            client = None;
        }
        if client.is_none() && !(writing && filling.is_read()) {
            return;
        }
    }
    let _ = to_disk.send(Chunk::End).await;
}
