//! Live updates for the status page: the journal directory is watched
//! (inotify through `notify`, by `serve::view::watch`), changed runs are read
//! into the [`Board`](super::board::Board), and each change goes to every open
//! page as one server-sent event ([`Live::publish`]).
//!
//! Contract:
//! - a change to a journal reaches the open pages after at most [`COALESCE`]
//!   plus the time to re-read that journal (only the journals the watcher
//!   named are looked at); every [`RECHECK`] the whole directory is checked
//!   and the running runs are read again even without a change (a killed
//!   process turns `interrupted`), and a directory the watcher cannot watch is
//!   read on that tick alone (logged once);
//! - events: `hello` on connecting (the page then reloads its list: it may
//!   have missed changes while disconnected), `run` with a card, `removed`
//!   with a run id, `resync` when a slow page fell more than [`BACKLOG`]
//!   events behind, and a comment every [`KEEPALIVE`] so proxies keep the
//!   connection open;
//! - at most [`MAX_STREAMS`] pages at once (more get `503`); a page that goes
//!   away ends its stream's task at its next event or keepalive; a stream
//!   opened with a session ends when the session does.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::sync::{broadcast, mpsc};

use super::board::Change;
use super::render::page_json;

/// Open pages at once.
pub const MAX_STREAMS: usize = 64;
/// Events a page may fall behind before it is told to reload its list.
pub const BACKLOG: usize = 256;
/// How often an idle stream sends a comment.
pub const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often running runs are read again without a change.
pub const RECHECK: Duration = Duration::from_secs(2);
/// How long the watcher gathers file events before reading.
pub const COALESCE: Duration = Duration::from_millis(20);

/// The broadcast side of the live updates.
pub struct Live {
    tx: broadcast::Sender<Arc<str>>,
    streams: Arc<AtomicUsize>,
}

impl Default for Live {
    fn default() -> Self {
        Live::new()
    }
}

impl Live {
    /// No page open yet.
    pub fn new() -> Live {
        Live { tx: broadcast::channel(BACKLOG).0, streams: Arc::new(AtomicUsize::new(0)) }
    }

    /// Send `changes` to every open page.
    pub fn publish(&self, changes: Vec<Change>) {
        for change in changes {
            let text = match change {
                Change::Run(card) => format!("event: run\ndata: {}\n\n", page_json(&*card)),
                Change::Removed(id) => format!("event: removed\ndata: {}\n\n", page_json(&id)),
            };
            // No page open is not an error.
            let _ = self.tx.send(text.into());
        }
    }

    /// A new page's event stream, ending at `until` (the end of the reader's
    /// session) if given; `None` when [`MAX_STREAMS`] are open.
    pub fn open(&self, until: Option<std::time::Instant>) -> Option<EventStream> {
        let count = self.streams.clone();
        if count.fetch_add(1, Ordering::SeqCst) >= MAX_STREAMS {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let guard = StreamGuard(count);
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        let mut events = self.tx.subscribe();
        tokio::spawn(async move {
            if tx.send(Bytes::from_static(b"retry: 2000\nevent: hello\ndata: {}\n\n")).await.is_err() {
                return;
            }
            let mut keepalive = tokio::time::interval(KEEPALIVE);
            keepalive.tick().await;
            // The session's end closes the stream; the page then asks again
            // and is sent to the sign-in form.
            let end = async move {
                match until {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(end);
            loop {
                let next = tokio::select! {
                    () = &mut end => break,
                    e = events.recv() => match e {
                        Ok(text) => Bytes::copy_from_slice(text.as_bytes()),
                        Err(broadcast::error::RecvError::Lagged(_)) => Bytes::from_static(b"event: resync\ndata: {}\n\n"),
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    _ = keepalive.tick() => Bytes::from_static(b": keepalive\n\n"),
                    () = tx.closed() => break,
                };
                if tx.send(next).await.is_err() {
                    break;
                }
            }
        });
        Some(EventStream { rx, _guard: guard })
    }
}

/// Counts an open stream until it is dropped.
struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One page's `text/event-stream` body.
pub struct EventStream {
    rx: mpsc::Receiver<Bytes>,
    _guard: StreamGuard,
}

impl Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}
