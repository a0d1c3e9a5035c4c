//! A large object whose file is being written, as the requests that arrive
//! meanwhile see it ("read-while-writer"): its head, the file (open for
//! reading at any offset, so readers share no cursor) and how far the writer
//! got.
//!
//! The disk tier keeps one per key while the file is written
//! ([`super::disk::DiskTier::filling`]), from before the response head of the
//! fetch reaches the request collapser until the file is in the index or
//! gone, so every request for the object that misses in that time finds
//! either the file or this (unless a purge picked it: its bytes predate the
//! purge).
//!
//! The writer publishes its progress after each write ([`Publisher`]);
//! readers send what is written and wait for more until [`Stage::Done`].
//! A file renamed into place or removed stays readable through an open
//! handle, so a reader is never cut short by the end of the fill, only by its
//! failure ([`Stage::Failed`]: the bytes will never all be there).

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;

use super::CachedObject;

/// How far a fill got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Body bytes in the file so far.
    pub written: u64,
    pub stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// More bytes may come.
    Writing,
    /// The whole body is in the file (kept in the tier or not: a purge during
    /// the fill keeps it out, the bytes served are right all the same).
    Done,
    /// The origin's body failed, or the file could not be written: the body
    /// will never be whole.
    Failed,
}

/// A fill in progress, shared by its writer and its readers.
#[derive(Debug)]
pub struct Filling {
    /// The object without its body (an empty one).
    pub head: CachedObject,
    /// The file being written, open for reading.
    pub file: Arc<File>,
    /// Where the body starts in the file.
    pub body_offset: u64,
    /// The body's length, when the origin announced it.
    pub len: Option<u64>,
    progress: watch::Receiver<Progress>,
    /// Readers attached ([`Filling::reader`]).
    readers: AtomicUsize,
}

/// The writer's side: publishes progress. Dropped without [`Publisher::done`],
/// it publishes [`Stage::Failed`], so readers never wait for a writer that
/// is gone.
#[derive(Debug)]
pub struct Publisher(watch::Sender<Progress>);

/// Counts a reader of a fill while it lives.
pub struct Reader(Arc<Filling>);

impl Filling {
    pub fn new(head: CachedObject, file: Arc<File>, body_offset: u64, len: Option<u64>) -> (Arc<Filling>, Publisher) {
        let (tx, progress) = watch::channel(Progress { written: 0, stage: Stage::Writing });
        let filling = Filling { head, file, body_offset, len, progress, readers: AtomicUsize::new(0) };
        (Arc::new(filling), Publisher(tx))
    }

    /// The progress now.
    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    /// A receiver of the progress, to wait for more with.
    pub fn watch(&self) -> watch::Receiver<Progress> {
        self.progress.clone()
    }

    /// Waits until the fill is done or failed; returns which.
    pub async fn settled(&self) -> Stage {
        let mut progress = self.watch();
        let settled = progress.wait_for(|p| p.stage != Stage::Writing).await.map(|p| p.stage);
        // The publisher always sends a last stage before it goes.
        settled.unwrap_or_else(|_| progress.borrow().stage)
    }

    /// Marks one more reader until the returned guard is dropped.
    pub fn reader(self: &Arc<Self>) -> Reader {
        self.readers.fetch_add(1, Ordering::Relaxed);
        Reader(self.clone())
    }

    /// Whether some reader is attached.
    pub fn is_read(&self) -> bool {
        self.readers.load(Ordering::Relaxed) > 0
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Publisher {
    /// `written` body bytes are in the file.
    pub fn wrote(&self, written: u64) {
        self.0.send_replace(Progress { written, stage: Stage::Writing });
    }

    /// The whole body is in the file.
    pub fn done(self) {
        self.finish(Stage::Done);
    }

    fn finish(&self, stage: Stage) {
        self.0.send_modify(|p| {
            if p.stage == Stage::Writing {
                p.stage = stage;
            }
        });
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.finish(Stage::Failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filling() -> (Arc<Filling>, Publisher) {
        let head = CachedObject::fresh("a/x", Default::default(), bytes::Bytes::new().into());
        let file = tempfile::tempfile().unwrap();
        Filling::new(head, Arc::new(file), 0, Some(10))
    }

    #[tokio::test]
    async fn readers_see_the_progress_and_the_end() {
        let (filling, publisher) = filling();
        let mut watch = filling.watch();
        publisher.wrote(4);
        watch.changed().await.unwrap();
        assert_eq!(*watch.borrow_and_update(), Progress { written: 4, stage: Stage::Writing });
        let settled = tokio::spawn({
            let filling = filling.clone();
            async move { filling.settled().await }
        });
        tokio::task::yield_now().await;
        assert!(!settled.is_finished(), "not settled while writing");
        publisher.wrote(10);
        publisher.done();
        assert_eq!(settled.await.unwrap(), Stage::Done);
        assert_eq!(filling.progress(), Progress { written: 10, stage: Stage::Done });
    }

    #[tokio::test]
    async fn a_writer_gone_without_finishing_fails_the_fill() {
        let (filling, publisher) = filling();
        publisher.wrote(3);
        drop(publisher);
        assert_eq!(filling.settled().await, Stage::Failed);
        assert_eq!(filling.progress(), Progress { written: 3, stage: Stage::Failed });
    }

    #[test]
    fn readers_are_counted_while_they_live() {
        let (filling, _publisher) = filling();
        assert!(!filling.is_read());
        let (a, b) = (filling.reader(), filling.reader());
        drop(a);
        assert!(filling.is_read());
        drop(b);
        assert!(!filling.is_read());
    }
}
