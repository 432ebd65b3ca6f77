//! The connection table: quinn-proto's [`Endpoint`] and its connections, each with its
//! scheduler slot and pacer, and two work lists: connections with events to route
//! (*touched*) and connections that may have packets to send (*ready*, in round-robin
//! order).

use std::{collections::VecDeque, time::Instant};

use quinn_proto::{Connection, ConnectionHandle, Endpoint};

use super::pacer::Pacer;
use super::scheduler::{Slot, on_tick};

/// One connection and the driver's state for it.
pub(super) struct Conn {
    pub(super) conn: Connection,
    /// The path (socket) it sends on.
    pub(super) path: usize,
    pub(super) slot: Slot,
    pub(super) pacer: Pacer,
    touched: bool,
    ready: bool,
    /// Counted in [`Connections::paced`]: its pacer holds it back.
    paced: bool,
}

impl Conn {
    /// When the driver must next look at this connection: its quinn-proto timer (on the
    /// schedule's tick after `epoch`) or its pacer's release time, whichever comes first.
    pub(super) fn wake_at(&mut self, epoch: Instant) -> Option<Instant> {
        let timeout = self.conn.poll_timeout().map(|t| on_tick(epoch, t));
        match (timeout, self.pacer.release()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// quinn-proto's endpoint and its connections.
pub(super) struct Connections {
    pub(super) endpoint: Endpoint,
    slots: Vec<Option<Conn>>,
    live: usize,
    /// The most live at once.
    peak: usize,
    /// Connections whose pacer holds them back (a release time pending).
    paced: usize,
    touched: Vec<usize>,
    ready: VecDeque<usize>,
}

impl Connections {
    pub(super) fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            slots: Vec::new(),
            live: 0,
            peak: 0,
            paced: 0,
            touched: Vec::new(),
            ready: VecDeque::new(),
        }
    }

    /// Connections not yet drained.
    pub(super) const fn len(&self) -> usize {
        self.live
    }

    /// The most connections live at once so far.
    pub(super) const fn peak(&self) -> usize {
        self.peak
    }

    pub(super) fn get(&self, ch: ConnectionHandle) -> Option<&Conn> {
        self.slots.get(ch.0)?.as_ref()
    }

    pub(super) fn get_mut(&mut self, idx: usize) -> Option<&mut Conn> {
        self.slots.get_mut(idx)?.as_mut()
    }

    /// A connection and the endpoint, to route events between them.
    pub(super) fn with_endpoint(&mut self, idx: usize) -> Option<(&mut Endpoint, &mut Conn)> {
        let c = self.slots.get_mut(idx)?.as_mut()?;
        Some((&mut self.endpoint, c))
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (ConnectionHandle, &Conn)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (ConnectionHandle(i), c)))
    }

    /// Adds a connection (touched, so that its first events and packets are handled).
    pub(super) fn insert(
        &mut self,
        ch: ConnectionHandle,
        conn: Connection,
        path: usize,
        now: Instant,
    ) {
        if self.slots.len() <= ch.0 {
            self.slots.resize_with(ch.0 + 1, || None);
        }
        self.slots[ch.0] = Some(Conn {
            conn,
            path,
            slot: Slot::default(),
            pacer: Pacer::new(now),
            touched: false,
            ready: false,
            paced: false,
        });
        self.live += 1;
        self.peak = self.peak.max(self.live);
        self.touch(ch.0);
    }

    /// Drops a drained connection.
    pub(super) fn remove(&mut self, idx: usize) -> Option<Conn> {
        let c = self.slots.get_mut(idx)?.take()?;
        self.live -= 1;
        self.paced -= usize::from(c.paced);
        Some(c)
    }

    /// Connections their pacers hold back now.
    pub(super) const fn paced(&self) -> usize {
        self.paced
    }

    /// Recounts a connection in [`paced`](Self::paced) after its pacer was asked.
    pub(super) fn pacer_checked(&mut self, idx: usize) {
        if let Some(Some(c)) = self.slots.get_mut(idx) {
            let now = c.pacer.release().is_some();
            if now != c.paced {
                c.paced = now;
                if now {
                    self.paced += 1;
                } else {
                    self.paced -= 1;
                }
            }
        }
    }

    /// Marks a connection as having events to route (something happened to it).
    pub(super) fn touch(&mut self, idx: usize) {
        if let Some(Some(c)) = self.slots.get_mut(idx)
            && !c.touched
        {
            c.touched = true;
            self.touched.push(idx);
        }
    }

    /// The next touched connection, no longer marked.
    pub(super) fn pop_touched(&mut self) -> Option<usize> {
        loop {
            let idx = self.touched.pop()?;
            if let Some(c) = self.get_mut(idx) {
                c.touched = false;
                return Some(idx);
            }
        }
    }

    /// Puts a connection at the end of the send round, unless it is in it already.
    pub(super) fn make_ready(&mut self, idx: usize) {
        if let Some(c) = self.get_mut(idx)
            && !c.ready
        {
            c.ready = true;
            self.ready.push_back(idx);
        }
    }

    /// Puts a connection at the front of the send round, to go again before any other,
    /// unless it is in the round already.
    pub(super) fn make_ready_next(&mut self, idx: usize) {
        if let Some(c) = self.get_mut(idx)
            && !c.ready
        {
            c.ready = true;
            self.ready.push_front(idx);
        }
    }

    /// Connections in the send round.
    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The next connection of the send round, taken out of it.
    pub(super) fn pop_ready(&mut self) -> Option<usize> {
        loop {
            let idx = self.ready.pop_front()?;
            if let Some(c) = self.get_mut(idx) {
                c.ready = false;
                return Some(idx);
            }
        }
    }

    /// The `i`th connection in the send round.
    pub(super) fn ready_at(&self, i: usize) -> Option<usize> {
        self.ready.get(i).copied()
    }

    /// Whether `generation` is a live entry of connection `idx`'s schedule.
    pub(super) fn is_scheduled(&self, idx: usize, generation: u64) -> bool {
        self.slots
            .get(idx)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.slot.is_live(generation))
    }

    /// Each live connection's scheduler slot, to rebuild the schedule from.
    pub(super) fn slots(&self) -> impl Iterator<Item = (usize, Slot)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c.slot)))
    }
}
