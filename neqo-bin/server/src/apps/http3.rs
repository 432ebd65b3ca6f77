//! The connections of one worker that a [`Service`] answers: `h3`'s server over neqo-h3's
//! [`Engine`](neqo_h3::Engine), a task per connection accepting its requests and a task per
//! request calling the service and sending its response ([`request`](super::request)). What
//! a request held is freed with its task.
//!
//! At shutdown each connection sends GOAWAY (RFC 9114 section 5.2): the requests it accepted
//! finish, later ones are rejected (`H3_REQUEST_REJECTED`), and the server waits for the
//! responses to be acknowledged, within its drain period.

use std::{
    borrow::Cow,
    cell::{Cell, RefCell},
    future::poll_fn,
    net::SocketAddr,
    pin::pin,
    rc::Rc,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::Instant,
};

use bytes::Bytes;
use neqo_driver::Driver;
use neqo_h3::{Connections, H3Connection, Spawner};
use quinn_proto::{Connection, ConnectionHandle, Event, VarInt};

use super::{
    request::{Ledger, reject, respond},
    service::Service,
};
use crate::{
    access_log::AccessLog,
    http3::{Http3Counters, MAX_FIELD_SECTION},
};

/// The most a connection holds for `h3` beyond what quinn-proto holds in its window: room
/// for the largest frame `h3` takes whole (neqo-h3's frame limit) twice over.
const HELD: usize = crate::MIN_WINDOW as usize;

/// What a worker's service connections share with their tasks: the counts and the log.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) counters: RefCell<Http3Counters>,
    /// Requests the service's code panicked on.
    pub(super) panics: Cell<u64>,
    pub(super) log: Option<AccessLog>,
}

/// One connection's state beside its tasks.
#[derive(Debug)]
pub(super) struct Conn {
    /// The server is shutting down: the accepting task sends GOAWAY.
    goaway: Cell<bool>,
    /// It has.
    goaway_sent: Cell<bool>,
    /// The accepting task, to wake for the GOAWAY.
    accepting: RefCell<Option<Waker>>,
    /// Requests accepted and not yet ended.
    pub(super) open: Cell<usize>,
    /// The shutdown's drain period ended with requests under way: they end with the
    /// connection, cut, and are logged so.
    pub(super) cut: Cell<bool>,
    pub(super) peer: SocketAddr,
    pub(super) alpn: Cow<'static, str>,
}

impl Conn {
    fn go_away(&self) {
        self.goaway.set(true);
        if let Some(w) = self.accepting.borrow_mut().take() {
            w.wake();
        }
    }
}

/// The service connections of one worker.
#[derive(Debug)]
pub(crate) struct Services {
    conns: Connections<Rc<Conn>>,
    shared: Rc<Shared>,
    /// The counts already added to the report.
    reported: Http3Counters,
    reported_panics: u64,
    shutting_down: bool,
}

impl Services {
    pub(crate) fn new(log: Option<AccessLog>) -> Self {
        Self {
            conns: Connections::default(),
            shared: Rc::new(Shared {
                counters: RefCell::default(),
                panics: Cell::new(0),
                log,
            }),
            reported: Http3Counters::default(),
            reported_panics: 0,
            shutting_down: false,
        }
    }

    /// Whether `ch` is one of its connections.
    pub(crate) fn serves(&self, ch: ConnectionHandle) -> bool {
        !self.conns.is_empty() && self.conns.contains(ch)
    }

    /// `ch` negotiated `alpn`, which `service` answers: its streams are HTTP/3 from now on,
    /// and it gets `window` from the receive budget, as any connection.
    pub(crate) fn start(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        (service, alpn): (Arc<dyn Service>, &str),
        window: Option<u64>,
        now: Instant,
    ) {
        if let Some(w) = window {
            conn.set_receive_window(VarInt::from_u64(w).unwrap_or(VarInt::MAX));
        }
        let engine = self.conns.engine(ch);
        // What is read off the streams for `h3` and not yet taken (a body the service has not
        // read yet, frames not yet whole) stays within the smallest window the budget grants
        // on top of the connection's own.
        engine.limit_held(HELD);
        let state = Rc::new(Conn {
            goaway: Cell::new(self.shutting_down),
            goaway_sent: Cell::new(false),
            accepting: RefCell::default(),
            open: Cell::new(0),
            cut: Cell::new(false),
            peer: conn.remote_address(),
            alpn: Cow::Owned(alpn.to_owned()),
        });
        engine.spawner().spawn(accept(
            engine.transport(),
            engine.spawner(),
            service,
            Rc::clone(&state),
            Rc::clone(&self.shared),
        ));
        self.conns.insert(ch, engine, state);
        if let Some((engine, _)) = self.conns.get_mut(ch) {
            engine.drive(conn, now);
        }
    }

    /// An event of one of its connections.
    pub(crate) fn event(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Connection,
        event: &Event,
        now: Instant,
    ) {
        self.conns.on_event(ch, conn, event, now);
    }

    /// Drives the connections whose tasks were woken or have work left.
    pub(crate) fn poll(&mut self, driver: &mut Driver, now: Instant) {
        for ch in self.conns.due([]) {
            self.conns.drive(driver, ch, now);
        }
    }

    /// Whether a connection has work left for the next turn.
    pub(crate) fn busy(&self) -> bool {
        self.conns.busy()
    }

    /// Ready once a task was woken off the driver's thread.
    pub(crate) fn poll_wake(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.conns.poll_wake(cx)
    }

    /// `ch` is lost or drained: its tasks are dropped, and the requests they had under way
    /// counted and logged as the connection's loss.
    pub(crate) fn gone(&mut self, ch: ConnectionHandle) {
        self.conns.remove(ch);
    }

    /// The server shuts down: every connection sends GOAWAY. Returns whether there are
    /// connections to let finish.
    pub(crate) fn shut_down(&mut self) -> bool {
        self.shutting_down = true;
        for (_, _, state) in self.conns.iter() {
            state.go_away();
        }
        !self.conns.is_empty()
    }

    /// After [`shut_down`](Self::shut_down): every connection sent its GOAWAY, ended the
    /// requests it accepted and had their responses acknowledged (or has ended).
    pub(crate) fn settled(&self) -> bool {
        self.conns.iter().all(|(_, engine, state)| {
            engine.ended()
                || (state.goaway_sent.get() && state.open.get() == 0 && engine.unacked() == 0)
        })
    }

    /// The shutdown's drain period is over: the requests under way end with their
    /// connections' closes (the `h3` crate's streams are not ours to reset), counted and
    /// logged as cut. Returns how many.
    pub(crate) fn cut(&mut self) -> usize {
        let mut n = 0;
        for (_, engine, state) in self.conns.iter() {
            if !engine.ended() {
                state.cut.set(true);
                n += state.open.get();
            }
        }
        n
    }

    /// Requests under way and tasks running over all its connections, for tests of what is
    /// freed.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> (usize, usize) {
        self.conns
            .iter()
            .fold((0, 0), |(r, t), (_, engine, state)| {
                (r + state.open.get(), t + engine.tasks())
            })
    }

    /// The most bytes one of its connections held for `h3` at once.
    #[cfg(test)]
    pub(crate) fn peak_held(&self) -> usize {
        self.conns
            .iter()
            .map(|(_, engine, _)| engine.peak_held())
            .max()
            .unwrap_or(0)
    }

    /// Brings `report` up to date with what its requests did since the last call.
    pub(crate) fn report(&mut self, report: &mut crate::ServerReport) {
        let now = *self.shared.counters.borrow();
        report.credit_http3(&now.since(&self.reported));
        self.reported = now;
        let panics = self.shared.panics.get();
        report.app_panics += panics - self.reported_panics;
        self.reported_panics = panics;
    }
}

/// A connection's accepting task: `h3`'s server on it, a task per request, and its GOAWAY
/// when the server shuts down.
async fn accept(
    transport: H3Connection,
    spawner: Spawner,
    service: Arc<dyn Service>,
    conn: Rc<Conn>,
    shared: Rc<Shared>,
) {
    let mut h3 = match h3::server::builder()
        .max_field_section_size(MAX_FIELD_SECTION)
        .build::<_, Bytes>(transport)
        .await
    {
        Ok(h3) => h3,
        Err(e) => {
            tracing::debug!("HTTP/3 service connection not set up: {e}");
            return;
        }
    };
    loop {
        let next = {
            let mut accepting = pin!(h3.accept());
            poll_fn(|cx| {
                if conn.goaway.get() && !conn.goaway_sent.get() {
                    return Poll::Ready(None);
                }
                *conn.accepting.borrow_mut() = Some(cx.waker().clone());
                accepting.as_mut().poll(cx).map(Some)
            })
            .await
        };
        match next {
            None => {
                // RFC 9114 section 5.2: the requests accepted so far are processed, later
                // ones rejected. `h3` names the ID after the last it accepted, as it should,
                // but then rejects only the IDs above it: the one it names is rejected below.
                if let Err(e) = h3.shutdown(1).await {
                    tracing::debug!("HTTP/3 service GOAWAY not sent: {e}");
                    return;
                }
                conn.goaway_sent.set(true);
            }
            Some(Ok(Some(resolver))) => {
                conn.open.set(conn.open.get() + 1);
                let ledger = Ledger::new(&conn, &shared);
                // Streams are accepted in the order of their IDs, so one accepted after the
                // GOAWAY has the ID it named, or a higher one.
                if conn.goaway_sent.get() {
                    spawner.spawn(reject(resolver, ledger));
                } else {
                    spawner.spawn(respond(resolver, Arc::clone(&service), ledger));
                }
            }
            Some(Ok(None)) => {
                // The client's GOAWAY, and every request ended. Kept until the connection
                // ends: dropping `h3` would close it under responses not yet acknowledged.
                conn.goaway_sent.set(true);
                std::future::pending::<()>().await;
            }
            Some(Err(e)) => {
                tracing::debug!("HTTP/3 service connection ended: {e}");
                return;
            }
        }
    }
}
