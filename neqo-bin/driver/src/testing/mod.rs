//! An in-memory network on a virtual clock, to test applications on the [`Driver`] (in the
//! spirit of quinn-proto's test `Pair`): each endpoint's driver runs over a [`Network::path`]
//! instead of a socket, and the clock jumps to the next thing due (a driver's deadline, a
//! datagram's arrival). Deterministic for a seed: no sockets, no sleeping, no timing
//! thresholds; an hour of handshake timeouts takes milliseconds.
//!
//! The network delivers each datagram after its one-way delay, and can be made to misbehave:
//! seeded loss and reordering, an address that receives nothing, a socket that is full for
//! a number of calls; each path's "kernel" ([`Behaviour`]) takes a bounded number of
//! transmits per call, says `WouldBlock` every so often, and can break GSO mid-transfer.
//!
//! ```
//! # use std::time::{Duration, Instant};
//! # use neqo_driver::testing::{Behaviour, Network};
//! let net = Network::new(7, Instant::now()).with_one_way(Duration::from_millis(10));
//! let server = net.path("127.0.0.1:4433".parse().unwrap(), Behaviour::default());
//! let client = net.path("127.0.0.1:5555".parse().unwrap(), Behaviour::default());
//! // Each goes to `Driver::with_datapaths(vec![path], ...)`; then, in a loop bounded in
//! // turns: `net.turn(&mut driver, &mut app)` for each endpoint, and
//! // `net.advance(&[deadlines...], queued)` to move the clock.
//! # drop((server, client));
//! ```

use std::{
    cell::RefCell,
    collections::{HashMap, HashSet, VecDeque},
    io,
    net::SocketAddr,
    rc::Rc,
    time::{Duration, Instant},
};

use rand::{Rng as _, SeedableRng as _, rngs::StdRng};

use super::{Application, Datapath, Driver, Turn};

mod path;

use path::Path;

/// How a path's kernel takes what the driver sends.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Behaviour {
    /// Transmits one send call takes at most.
    pub per_call: usize,
    /// Every this many send calls, one says `WouldBlock` (0: never).
    pub block_every: usize,
    /// Segments one message may carry.
    pub gso_segments: usize,
    /// After this many send calls GSO breaks: from then on every run is sent segment by
    /// segment, one per call (as a socket's fallback sends a refused run), and stays so.
    pub gso_breaks_after: Option<usize>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            per_call: usize::MAX,
            block_every: 0,
            gso_segments: 10,
            gso_breaks_after: None,
        }
    }
}

impl Behaviour {
    /// At most `n` transmits per call.
    #[must_use]
    pub const fn per_call(mut self, n: usize) -> Self {
        self.per_call = n;
        self
    }

    /// `WouldBlock` every `n` calls.
    #[must_use]
    pub const fn block_every(mut self, n: usize) -> Self {
        self.block_every = n;
        self
    }

    /// GSO breaks after `n` calls.
    #[must_use]
    pub const fn gso_breaks_after(mut self, n: usize) -> Self {
        self.gso_breaks_after = Some(n);
        self
    }
}

/// A datagram on its way: when it arrives, its bytes, who sent it.
type InFlight = (Instant, Vec<u8>, SocketAddr);

/// The network's state, shared by its paths.
#[derive(Debug)]
struct Net {
    now: Instant,
    one_way: Duration,
    rng: StdRng,
    /// Probability that a datagram is lost.
    loss: f64,
    /// Probability that a datagram is held back by `reorder_by`, so later ones overtake it.
    reorder: f64,
    reorder_by: Duration,
    /// Addresses whose datagrams never arrive.
    unreachable: HashSet<SocketAddr>,
    queues: HashMap<SocketAddr, VecDeque<InFlight>>,
    /// Datagrams each address sent, counted where they went on the wire.
    wire: HashMap<SocketAddr, u64>,
    lost: u64,
    /// A full socket: the next this many send calls from that address say `WouldBlock`.
    full_for: HashMap<SocketAddr, usize>,
    /// Most datagrams waiting for an address (its receive buffer); more are dropped.
    queue_limit: HashMap<SocketAddr, usize>,
    /// Datagrams dropped at each address's full queue.
    overflowed: HashMap<SocketAddr, u64>,
    /// Runs each path saw after its GSO broke: (queued before the break, offered afresh,
    /// resumed where the last call stopped).
    gso_break_runs: HashMap<SocketAddr, (usize, usize, usize)>,
    /// What each address's send calls carried, call by call: each message's destination and
    /// datagrams.
    send_calls: HashMap<SocketAddr, Vec<Vec<(SocketAddr, usize)>>>,
}

/// The network: clock, delays, faults, and the datagrams in flight. Cheap to clone (a
/// handle).
#[derive(Debug, Clone)]
pub struct Network(Rc<RefCell<Net>>);

impl Network {
    /// A network whose clock starts at `start`, faults drawn from `seed`, 1 ms one way.
    #[must_use]
    pub fn new(seed: u64, start: Instant) -> Self {
        Self(Rc::new(RefCell::new(Net {
            now: start,
            one_way: Duration::from_millis(1),
            rng: StdRng::seed_from_u64(seed),
            loss: 0.0,
            reorder: 0.0,
            reorder_by: Duration::ZERO,
            unreachable: HashSet::new(),
            queues: HashMap::new(),
            wire: HashMap::new(),
            lost: 0,
            full_for: HashMap::new(),
            queue_limit: HashMap::new(),
            overflowed: HashMap::new(),
            gso_break_runs: HashMap::new(),
            send_calls: HashMap::new(),
        })))
    }

    /// Every datagram takes `one_way` to arrive.
    #[must_use]
    pub fn with_one_way(self, one_way: Duration) -> Self {
        self.0.borrow_mut().one_way = one_way;
        self
    }

    /// Loses each datagram with probability `p` (0 to 1).
    pub fn set_loss(&self, p: f64) {
        self.0.borrow_mut().loss = p.clamp(0.0, 1.0);
    }

    /// Holds each datagram back by `by` with probability `p`, so that later ones overtake it.
    pub fn set_reorder(&self, p: f64, by: Duration) {
        let mut n = self.0.borrow_mut();
        n.reorder = p.clamp(0.0, 1.0);
        n.reorder_by = by;
    }

    /// Datagrams to `addr` are lost (`true`) or delivered again (`false`); those in flight
    /// to it are dropped.
    pub fn set_unreachable(&self, addr: SocketAddr, unreachable: bool) {
        let mut n = self.0.borrow_mut();
        if unreachable {
            n.unreachable.insert(addr);
            n.queues.remove(&addr);
        } else {
            n.unreachable.remove(&addr);
        }
    }

    /// The next `calls` send calls from `addr` say `WouldBlock`: a full socket.
    pub fn fill(&self, addr: SocketAddr, calls: usize) {
        self.0.borrow_mut().full_for.insert(addr, calls);
    }

    /// At most `limit` datagrams wait for `addr`, as in a receive buffer; the rest are
    /// dropped and counted ([`overflowed`](Self::overflowed)).
    pub fn set_queue_limit(&self, addr: SocketAddr, limit: usize) {
        self.0.borrow_mut().queue_limit.insert(addr, limit);
    }

    /// Datagrams dropped at `addr`'s full queue: its path's kernel drops.
    #[must_use]
    pub fn overflowed(&self, addr: SocketAddr) -> u64 {
        self.0.borrow().overflowed.get(&addr).copied().unwrap_or(0)
    }

    /// Send calls from `addr` still to be refused.
    #[must_use]
    pub fn full_for(&self, addr: SocketAddr) -> usize {
        self.0.borrow().full_for.get(&addr).copied().unwrap_or(0)
    }

    /// The clock.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.0.borrow().now
    }

    /// Sets the clock (never back).
    pub fn set_now(&self, now: Instant) {
        let mut n = self.0.borrow_mut();
        n.now = n.now.max(now);
    }

    /// Datagrams `addr` put on the wire (lost ones included).
    #[must_use]
    pub fn wire(&self, addr: SocketAddr) -> u64 {
        self.0.borrow().wire.get(&addr).copied().unwrap_or(0)
    }

    /// Datagrams lost so far, by [`set_loss`](Self::set_loss) or to an unreachable address.
    #[must_use]
    pub fn lost(&self) -> u64 {
        self.0.borrow().lost
    }

    /// When the next datagram arrives anywhere.
    #[must_use]
    pub fn next_arrival(&self) -> Option<Instant> {
        self.0
            .borrow()
            .queues
            .values()
            .flat_map(|q| q.iter().map(|x| x.0))
            .min()
    }

    /// After the GSO of `addr`'s path broke: runs it was offered that were queued before the
    /// break, runs offered afresh since, and runs resumed where the last call stopped.
    #[must_use]
    pub fn gso_break_runs(&self, addr: SocketAddr) -> (usize, usize, usize) {
        self.0
            .borrow()
            .gso_break_runs
            .get(&addr)
            .copied()
            .unwrap_or_default()
    }

    /// What `addr`'s send calls carried, call by call (calls that sent segment by segment
    /// after a GSO break excepted): each message's destination and datagrams, in order.
    #[must_use]
    pub fn send_calls(&self, addr: SocketAddr) -> Vec<Vec<(SocketAddr, usize)>> {
        self.0
            .borrow()
            .send_calls
            .get(&addr)
            .cloned()
            .unwrap_or_default()
    }

    /// A datagram from `from` to `to`, as if sent now (a peer the test plays by hand: a
    /// spoofed source, a crafted packet).
    pub fn inject(&self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        self.deliver(from, to, bytes);
    }

    /// A datapath at `addr`, behaving as `how`, for [`Driver::with_datapaths`].
    #[must_use]
    pub fn path(&self, addr: SocketAddr, how: Behaviour) -> Box<dyn Datapath> {
        Box::new(Path::new(addr, self.clone(), how))
    }

    /// One turn of an endpoint at the network's time: what has arrived for it, then its
    /// turn (wake-ups, events, the application, transmits).
    ///
    /// # Errors
    /// A path error other than `WouldBlock` (these paths return none).
    pub fn turn<A: Application>(&self, driver: &mut Driver, app: &mut A) -> io::Result<Turn> {
        let now = self.now();
        driver.receive(app, now)?;
        driver.turn(app, now)
    }

    /// Moves the clock to what is due first: the earliest of `deadlines` and the next
    /// arrival; stays put when `queued` (a driver with datagrams queued turns again at once:
    /// its socket is writable). False when nothing at all is due (the exchange is stuck).
    pub fn advance(&self, deadlines: &[Option<Instant>], queued: bool) -> bool {
        let next = deadlines
            .iter()
            .flatten()
            .copied()
            .chain(self.next_arrival())
            .min();
        match next {
            Some(_) if queued => true,
            Some(t) => {
                self.set_now(t);
                true
            }
            None => queued,
        }
    }

    fn deliver(&self, from: SocketAddr, to: SocketAddr, bytes: &[u8]) {
        let mut guard = self.0.borrow_mut();
        let n = &mut *guard;
        *n.wire.entry(from).or_default() += 1;
        let lost = n.unreachable.contains(&to) || (n.loss > 0.0 && n.rng.random_bool(n.loss));
        if lost {
            n.lost += 1;
            return;
        }
        let mut at = n.now + n.one_way;
        if n.reorder > 0.0 && n.rng.random_bool(n.reorder) {
            at += n.reorder_by;
        }
        let queue = n.queues.entry(to).or_default();
        if n.queue_limit
            .get(&to)
            .is_some_and(|&limit| queue.len() >= limit)
        {
            *n.overflowed.entry(to).or_default() += 1;
            return;
        }
        // In arrival order: a held-back datagram goes behind those that overtake it.
        let i = queue.partition_point(|x| x.0 <= at);
        queue.insert(i, (at, bytes.to_vec(), from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// Delivery after the one-way delay, in order; reordering lets later datagrams overtake;
    /// loss is drawn from the seed (the same seed, the same losses).
    #[test]
    fn the_network_delays_reorders_and_loses_by_its_seed() {
        let start = Instant::now();
        let net = Network::new(1, start).with_one_way(Duration::from_millis(5));
        let mut rx = net.path(addr(2), Behaviour::default());
        for i in 0..3u8 {
            net.inject(addr(1), addr(2), &[i]);
        }
        let mut out = Vec::new();
        assert_eq!(
            rx.recv(&mut out).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert!(net.advance(&[], false));
        assert_eq!(net.now(), start + Duration::from_millis(5));
        rx.recv(&mut out).unwrap();
        let got: Vec<u8> = out.iter().map(|d| d.data[0]).collect();
        assert_eq!(got, [0, 1, 2]);

        net.set_reorder(1.0, Duration::from_millis(3));
        net.inject(addr(1), addr(2), &[9]);
        net.set_reorder(0.0, Duration::ZERO);
        net.inject(addr(1), addr(2), &[10]);
        assert!(net.advance(&[], false));
        out.clear();
        rx.recv(&mut out).unwrap();
        assert_eq!(out[0].data[0], 10, "the held-back one is overtaken");

        let losses = |seed| {
            let net = Network::new(seed, start);
            net.set_loss(0.5);
            for _ in 0..100 {
                net.inject(addr(1), addr(2), &[0]);
            }
            net.lost()
        };
        assert_eq!(losses(3), losses(3));
        assert!((20..80).contains(&losses(3)), "{}", losses(3));
        net.set_unreachable(addr(2), true);
        net.inject(addr(1), addr(2), &[1]);
        assert_eq!(net.next_arrival(), None);
    }
}
