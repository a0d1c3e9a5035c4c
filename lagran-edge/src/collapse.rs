//! Request collapsing: of the requests missing one object at the same time, one
//! (the leader) goes to the origin; the others wait for it to finish and then
//! look in the cache again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

#[derive(Debug, Default)]
pub struct Collapser {
    in_flight: Arc<Mutex<HashMap<String, watch::Receiver<()>>>>,
}

/// What a request does about a miss.
pub enum Turn {
    /// Fetch; others wait until this guard is dropped.
    Lead(Leader),
    /// Another request is fetching; wait with [`Follower::wait`].
    Follow(Follower),
}

/// Held by the request fetching an object; dropping it releases the followers.
pub struct Leader {
    key: String,
    in_flight: Arc<Mutex<HashMap<String, watch::Receiver<()>>>>,
    _done: watch::Sender<()>,
}

impl Drop for Leader {
    fn drop(&mut self) {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
    }
}

pub struct Follower(watch::Receiver<()>);

impl Follower {
    /// Returns once the leader is done (whatever it achieved).
    pub async fn wait(mut self) {
        // An error means the sender is gone: the leader finished.
        let _ = self.0.changed().await;
    }
}

impl Collapser {
    pub fn turn(&self, key: &str) -> Turn {
        let mut map = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rx) = map.get(key) {
            return Turn::Follow(Follower(rx.clone()));
        }
        let (tx, rx) = watch::channel(());
        map.insert(key.to_owned(), rx);
        Turn::Lead(Leader { key: key.to_owned(), in_flight: self.in_flight.clone(), _done: tx })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_leads_the_rest_follow_until_it_is_done() {
        let c = Collapser::default();
        let Turn::Lead(leader) = c.turn("k") else { panic!("the first leads") };
        let Turn::Follow(follower) = c.turn("k") else { panic!("the second follows") };
        assert!(matches!(c.turn("other"), Turn::Lead(_)), "other keys are independent");
        let waiting = tokio::spawn(follower.wait());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(leader);
        waiting.await.unwrap();
        assert!(matches!(c.turn("k"), Turn::Lead(_)), "after the leader, the next miss leads");
    }
}
