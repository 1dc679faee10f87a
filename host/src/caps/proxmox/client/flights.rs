//! Concurrent identical reads share one request: the VM listing
//! (`/cluster/resources`) answers with every VM of the cluster, so a hundred
//! runs that each list it once cost the API a hundred full listings, and the
//! cost of each grows with the cluster (one run per VM makes that quadratic).
//!
//! Contract ("next flight", not "current flight"): a caller is answered only by
//! a request that was *sent after it asked*. Requests go one at a time; a caller
//! that arrives while one is in flight waits for it to end, and the next request
//! answers it together with everyone else who waited. So a caller never gets an
//! answer older than its question: a run that cloned a VM and then lists sees
//! its clone, exactly as with a request of its own. At most two requests are
//! outstanding for any burst of callers (the one in flight, the next).
//!
//! The price: a caller may wait for the request in flight before its own is
//! sent, so it waits up to two listings instead of one (each bounded by the
//! client's request timeout and retry policy, and the wait by the caller's own
//! deadline: a caller cut off while waiting or while its request runs gives up
//! its turn and nothing is recorded).
//!
//! Failure mode: a failed request is not shared. Its caller gets the error;
//! callers that waited for it send a request of their own (one at a time again),
//! so one caller's transient failure never becomes everyone's.

use std::future::Future;
use std::sync::Mutex;

/// One read that concurrent callers share (see the module docs).
#[derive(Debug)]
pub(crate) struct Flights<T> {
    /// Held while a request is in flight: requests go one at a time, in the
    /// order callers arrived (tokio's mutex is fair).
    turn: tokio::sync::Mutex<()>,
    /// Requests started so far, and the last answer with the number of the
    /// request that produced it.
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    started: u64,
    last: Option<(u64, T)>,
}

impl<T: Clone> Default for Flights<T> {
    fn default() -> Flights<T> {
        Flights { turn: tokio::sync::Mutex::new(()), state: Mutex::new(State { started: 0, last: None }) }
    }
}

impl<T: Clone> Flights<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The answer of a request sent after this call began: one that another
    /// caller sent meanwhile, or `fetch`'s own.
    pub(crate) async fn get<E, F, Fut>(&self, fetch: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        // Every request numbered up to `asked` was sent before this call: none
        // of their answers may be used.
        let asked = self.state().started;
        let _turn = self.turn.lock().await;
        let number = {
            let mut st = self.state();
            if let Some((n, answer)) = &st.last
                && *n > asked
            {
                return Ok(answer.clone());
            }
            st.started += 1;
            st.started
        };
        let answer = fetch().await?;
        self.state().last = Some((number, answer.clone()));
        Ok(answer)
    }

    /// How many requests were sent (for tests and counters).
    #[cfg(test)]
    pub(crate) fn sent(&self) -> u64 {
        self.state().started
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::Flights;

    /// A "cluster" whose listing is the number of changes made so far.
    #[derive(Default)]
    struct Cluster {
        changes: AtomicU64,
        requests: AtomicU64,
    }

    impl Cluster {
        async fn list(&self) -> Result<u64, String> {
            self.requests.fetch_add(1, Ordering::SeqCst);
            // The server reads the state when the request arrives, then answers late.
            let seen = self.changes.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(seen)
        }
    }

    #[tokio::test]
    async fn a_burst_of_callers_costs_at_most_two_requests() {
        let cluster = Arc::new(Cluster::default());
        let flights = Arc::new(Flights::<u64>::default());
        let calls: Vec<_> = (0..100)
            .map(|_| {
                let (c, f) = (cluster.clone(), flights.clone());
                tokio::spawn(async move { f.get(|| c.list()).await })
            })
            .collect();
        for c in calls {
            assert_eq!(c.await.unwrap(), Ok(0));
        }
        let sent = cluster.requests.load(Ordering::SeqCst);
        assert!(sent <= 2, "100 concurrent listings sent {sent} requests");
        assert_eq!(flights.sent(), sent);
    }

    #[tokio::test]
    async fn a_caller_never_gets_an_answer_to_a_request_sent_before_it_asked() {
        let cluster = Arc::new(Cluster::default());
        let flights = Arc::new(Flights::<u64>::default());
        // A listing is in flight (it read the cluster with 0 changes)...
        let early = {
            let (c, f) = (cluster.clone(), flights.clone());
            tokio::spawn(async move { f.get(|| c.list()).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        // ...when this caller changes the cluster and then lists: it must see its change.
        cluster.changes.fetch_add(1, Ordering::SeqCst);
        let after_change = flights.get(|| cluster.list()).await;
        assert_eq!(early.await.unwrap(), Ok(0));
        assert_eq!(after_change, Ok(1), "the caller was answered from a request older than its change");
        assert_eq!(cluster.requests.load(Ordering::SeqCst), 2);
        // A caller that comes after both asks anew.
        cluster.changes.fetch_add(1, Ordering::SeqCst);
        assert_eq!(flights.get(|| cluster.list()).await, Ok(2));
    }

    #[tokio::test]
    async fn a_failed_request_is_not_shared() {
        let flights = Arc::new(Flights::<u64>::default());
        let failing = {
            let f = flights.clone();
            tokio::spawn(async move {
                f.get(|| async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Err::<u64, _>("connection reset".to_string())
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        let waiter = flights.get(|| async { Ok::<_, String>(7) }).await;
        assert_eq!(failing.await.unwrap(), Err("connection reset".to_string()));
        assert_eq!(waiter, Ok(7), "the waiter sent its own request instead of inheriting the failure");
        assert_eq!(flights.sent(), 2);
    }
}
