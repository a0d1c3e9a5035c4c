//! hyper's timer for one connection, with one tokio timer behind it.
//!
//! hyper asks its timer for a new sleep each time it starts waiting for an
//! HTTP/1 request head (the header read timeout) and drops it when the head
//! has come: with `TokioTimer` that was a timer entered in tokio's wheel and
//! taken out again for every request. Here each sleep holds its deadline and
//! waits on the connection's one timer, which is moved only when it fires
//! before the deadline of the sleep being polled: once per timeout period on
//! a busy connection, not once per request. Deadlines are kept exactly.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

/// The timer of one connection.
#[derive(Clone, Default)]
pub struct ConnTimer(Arc<Mutex<Option<Pin<Box<Sleep>>>>>);

impl hyper::rt::Timer for ConnTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Deadline { at: deadline.into(), timer: self.0.clone() })
    }
}

/// A sleep until `at` on the connection's timer.
struct Deadline {
    at: tokio::time::Instant,
    timer: Arc<Mutex<Option<Pin<Box<Sleep>>>>>,
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        let mut timer = self.timer.lock().unwrap_or_else(PoisonError::into_inner);
        let sleep = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if sleep.deadline() > at {
            sleep.as_mut().reset(at);
        }
        loop {
            ready!(sleep.as_mut().poll(cx));
            if sleep.deadline() >= at {
                return Poll::Ready(());
            }
            // It fired for an earlier deadline: on to this one.
            sleep.as_mut().reset(at);
        }
    }
}

impl hyper::rt::Sleep for Deadline {}

#[cfg(test)]
mod tests {
    use hyper::rt::Timer;

    use super::*;

    #[tokio::test]
    async fn each_sleep_ends_at_its_own_deadline_on_one_timer() {
        let timer = ConnTimer::default();
        let start = Instant::now();
        let (first_at, later_at) = (start + Duration::from_millis(30), start + Duration::from_millis(80));
        let first = timer.sleep_until(first_at);
        let later = timer.sleep_until(later_at);
        let limit = Duration::from_secs(5);
        tokio::time::timeout(limit, first).await.expect("the first sleep ends");
        assert!(Instant::now() >= first_at, "not before its deadline");
        tokio::time::timeout(limit, later).await.expect("the later sleep ends, the timer moved on");
        assert!(Instant::now() >= later_at, "not at the earlier deadline the timer was set to");

        let mut long = timer.sleep(Duration::from_secs(3600));
        let pending = std::future::poll_fn(|cx| Poll::Ready(long.as_mut().poll(cx).is_pending())).await;
        assert!(pending, "the timer is set an hour ahead");
        let earlier_at = Instant::now() + Duration::from_millis(20);
        tokio::time::timeout(limit, timer.sleep_until(earlier_at)).await.expect("an earlier deadline pulls it in");
        assert!(Instant::now() >= earlier_at);
    }
}
