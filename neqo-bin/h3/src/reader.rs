//! Reading a connection's streams for `h3`: each through its
//! [`Guard`](super::guard::Guard), cut into the pieces `h3` takes, within what the connection
//! may hold ([`Holding`]).
//!
//! What is held is counted as the memory it keeps:
//! - every piece is copied out of the datagram it arrived in (quinn-proto's chunks are
//!   slices of their datagrams: a one-byte piece kept as such pins a datagram of up to 64
//!   KiB), in one allocation per read for all the pieces cut from it;
//! - each piece counts its bytes and [`PIECE_COST`] for its record and its share of an
//!   allocation, so a peer that sends its frames a byte at a time pays for what it makes the
//!   server keep;
//! - `h3` is given only whole pieces (a frame other than DATA whole, DATA as it comes): the
//!   bytes of a frame not yet complete stay here, in one buffer per stream, so `h3` holds
//!   nothing of a stream between its reads;
//! - bytes read that would not fit stay as they came, unscanned, in one copy: quinn-proto
//!   cannot take them back. A connection holds at most its limit plus one such read.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use h3::error::Code;
use neqo_driver::IdSet;
use quinn_proto::{Connection, ReadError, StreamId};

use super::{
    guard::{Cut, Guard, Take, Violation},
    mailbox::code,
    stream::Stream,
};

/// The most a stream holds read from quinn-proto and not yet taken by `h3`, [`PIECE_COST`]s
/// included: more waits in quinn-proto, under its flow control.
pub const RECV_HELD: usize = 64 * 1024;

/// A stream is read again once it holds no more than this. Topping it up as `h3` takes a
/// piece would read as little as the piece, and the stream would go on in pieces that
/// small: a client saving a body a piece at a time ran at a third of its speed.
pub(super) const REFILL_AT: usize = RECV_HELD / 2;

/// What a held piece costs beside its bytes: its record here (and in `h3`'s hands the
/// `Bytes` it arrives as) and its share of an allocation's header.
pub const PIECE_COST: usize = 64;

/// One stream's received bytes on their way to `h3`.
#[derive(Debug)]
pub(super) struct Inbound {
    /// Whole pieces, in order, for `h3` to take.
    pieces: VecDeque<Bytes>,
    /// The frame being read, not yet whole.
    partial: BytesMut,
    /// Bytes read from quinn-proto that did not fit: scanned before anything more is read.
    unscanned: Bytes,
    /// What the three hold, [`PIECE_COST`]s included.
    held: usize,
    guard: Guard,
}

impl Inbound {
    pub(super) fn new(guard: Guard) -> Self {
        Self {
            pieces: VecDeque::new(),
            partial: BytesMut::new(),
            unscanned: Bytes::new(),
            held: 0,
            guard,
        }
    }

    /// What it holds, [`PIECE_COST`]s included.
    pub(super) const fn held(&self) -> usize {
        self.held
    }

    /// Whether a whole piece waits for `h3`.
    pub(super) fn has_pieces(&self) -> bool {
        !self.pieces.is_empty()
    }

    /// Whether bytes read are still on their way to `h3`: whole pieces, or ones that will be
    /// once the rest arrives or there is room.
    pub(super) fn is_empty(&self) -> bool {
        self.pieces.is_empty() && self.partial.is_empty() && self.unscanned.is_empty()
    }

    /// The next whole piece; what it held is released from `holding`.
    pub(super) fn take(
        &mut self,
        holding: &mut Holding,
        dirty: &mut IdSet<StreamId>,
    ) -> Option<Bytes> {
        let piece = self.pieces.pop_front()?;
        let cost = piece.len() + PIECE_COST;
        self.held -= cost;
        holding.release(cost, dirty);
        Some(piece)
    }

    /// Whether [`Reader::receive`] should read more: what is held is at most
    /// [`REFILL_AT`], or `h3` has taken every whole piece (and may wait for the rest of a
    /// frame).
    pub(super) fn wants_more(&self) -> bool {
        self.held <= REFILL_AT || self.pieces.is_empty()
    }

    /// Drops everything held: the stream will not be read further.
    pub(super) fn forget(&mut self, holding: &mut Holding, dirty: &mut IdSet<StreamId>) {
        self.pieces.clear();
        self.partial = BytesMut::new();
        self.unscanned = Bytes::new();
        holding.release(std::mem::take(&mut self.held), dirty);
    }

    /// The peer finished the stream: a frame cut short goes to `h3` as it is, which answers
    /// it with `H3_FRAME_ERROR` (RFC 9114 section 7.1).
    fn end(&mut self) {
        if !self.partial.is_empty() {
            self.pieces.push_back(self.partial.split().freeze());
        }
    }

    fn count(&mut self, holding: &mut Holding, n: usize) {
        self.held += n;
        holding.bytes += n;
        holding.peak = holding.peak.max(holding.bytes);
    }

    /// Cuts `bytes` into pieces as the guard says, as many as fit in `room`; returns how many
    /// of the bytes it took (all, or up to the first piece that did not fit).
    fn take_in(
        &mut self,
        bytes: &[u8],
        room: usize,
        holding: &mut Holding,
        cuts: &mut Vec<Cut>,
    ) -> Result<usize, Violation> {
        let mut trial = self.guard;
        cuts.clear();
        trial.scan(bytes, cuts)?;
        // The cuts that fit: a piece costs its bytes and PIECE_COST (a frame's first bytes
        // as they start the partial buffer); `whole` are the bytes of pieces that are whole
        // in this read, which its allocation holds.
        let (mut fit, mut len, mut cost, mut whole) = (0, 0, 0, 0);
        let mut partial = !self.partial.is_empty();
        for cut in cuts.iter() {
            let c = match cut.take {
                Take::Discard => 0,
                Take::Partial | Take::Complete => cut.len + if partial { 0 } else { PIECE_COST },
            };
            if cost + c > room {
                break;
            }
            if cut.take == Take::Complete && !partial {
                whole += cut.len;
            }
            cost += c;
            partial = cut.take == Take::Partial || partial && cut.take == Take::Discard;
            fit += 1;
            len += cut.len;
        }
        if fit == cuts.len() {
            self.guard = trial;
        } else {
            // Scanned again, up to the cuts that fit: the guard is where they end.
            let mut redo = Vec::with_capacity(fit);
            self.guard
                .scan(&bytes[..len], &mut redo)
                .expect("a prefix of what passed");
        }
        // One allocation for the pieces whole in this read (a frame's partial bytes grow
        // their own buffer, so that a frame sent a byte at a time is copied in amortized
        // linear time).
        let mut out = BytesMut::with_capacity(whole);
        let mut at = 0;
        for cut in &cuts[..fit] {
            let piece = &bytes[at..at + cut.len];
            at += cut.len;
            match cut.take {
                Take::Discard => {}
                Take::Partial => self.partial.extend_from_slice(piece),
                Take::Complete if self.partial.is_empty() => {
                    out.extend_from_slice(piece);
                    self.pieces.push_back(out.split().freeze());
                }
                Take::Complete => {
                    self.partial.extend_from_slice(piece);
                    self.pieces.push_back(self.partial.split().freeze());
                }
            }
        }
        if self.partial.is_empty() {
            // Nothing of the frame's buffer is left to grow: let its allocation go with the
            // pieces cut from it.
            self.partial = BytesMut::new();
        }
        self.count(holding, cost);
        Ok(len)
    }

    /// Keeps `rest`, read and not taken in, as one copy.
    fn keep_unscanned(&mut self, rest: &[u8], holding: &mut Holding) {
        debug_assert!(self.unscanned.is_empty());
        if !rest.is_empty() {
            self.unscanned = Bytes::copy_from_slice(rest);
            self.count(holding, rest.len() + PIECE_COST);
        }
    }

    /// Takes back what was kept unscanned, to be taken in again (its count goes, not as a
    /// release: nothing left the connection).
    fn unkeep(&mut self, holding: &mut Holding) -> Bytes {
        let raw = std::mem::take(&mut self.unscanned);
        if !raw.is_empty() {
            let cost = raw.len() + PIECE_COST;
            self.held -= cost;
            holding.bytes -= cost;
        }
        raw
    }
}

/// What the mailbox holds of a connection's received data, and the most it may.
#[derive(Debug, Default)]
pub(super) struct Holding {
    /// Bytes held for `h3` ([`Inbound::held`] of every stream).
    pub(super) bytes: usize,
    pub(super) limit: Option<usize>,
    /// The most `bytes` has been.
    pub(super) peak: usize,
    /// Streams left unread because the limit was reached: read again once there is room.
    starved: IdSet<StreamId>,
    /// The most streams `starved` has held.
    pub(super) peak_starved: usize,
    /// Where the guard cuts a chunk: kept between reads so that reading allocates nothing.
    cuts: Vec<Cut>,
}

impl Holding {
    /// Stream `id` is left unread for want of room.
    fn starve(&mut self, id: StreamId) {
        self.starved.insert(id);
        self.peak_starved = self.peak_starved.max(self.starved.len());
    }

    /// Caps `bytes` at `limit`; with room left, streams left unread are read again.
    pub(super) fn set_limit(&mut self, limit: usize, dirty: &mut IdSet<StreamId>) {
        self.limit = Some(limit);
        if self.room() > 0 {
            dirty.extend(self.starved.drain());
        }
    }

    pub(super) fn room(&self) -> usize {
        self.limit
            .map_or(usize::MAX, |l| l.saturating_sub(self.bytes))
    }

    /// `n` bytes are no longer held: streams left unread for want of room are read again.
    pub(super) fn release(&mut self, n: usize, dirty: &mut IdSet<StreamId>) {
        self.bytes -= n;
        if n > 0 && self.room() > 0 {
            dirty.extend(self.starved.drain());
        }
    }
}

/// Reads streams for `h3` within the connection's [`Holding`].
pub(super) struct Reader<'a> {
    pub(super) holding: &'a mut Holding,
    pub(super) dirty: &'a mut IdSet<StreamId>,
    pub(super) close: &'a mut Option<(u64, Bytes)>,
}

impl Reader<'_> {
    /// What stream `s` may take in now, [`PIECE_COST`]s included.
    fn room(&self, s: &Stream) -> usize {
        RECV_HELD
            .saturating_sub(s.inbound.held())
            .min(self.holding.room())
    }

    pub(super) fn receive(&mut self, conn: &mut Connection, id: StreamId, s: &mut Stream) {
        if s.recv_done {
            return;
        }
        if let Some(c) = s.stop.take() {
            let _ = conn.recv_stream(id).stop(code(c));
            s.inbound.forget(self.holding, self.dirty);
            s.recv_done = true;
            return;
        }
        if !s.inbound.wants_more() {
            return;
        }
        let mut cuts = std::mem::take(&mut self.holding.cuts);
        let result = self.read(conn, id, s, &mut cuts);
        self.holding.cuts = cuts;
        match result {
            Err(Violation::Stream(c)) => {
                // Both sides end with the error; `h3` hears it from either.
                let _ = conn.recv_stream(id).stop(code(c));
                if !s.send_done {
                    let _ = conn.send_stream(id).reset(code(c));
                    s.send_done = true;
                    s.writing = None;
                    s.stopped = Some(c);
                }
                s.inbound.forget(self.holding, self.dirty);
                s.recv_end = Some(Some(c));
                s.wake();
            }
            Err(Violation::Connection(c, reason)) => {
                if self.close.is_none() {
                    *self.close = Some((c, Bytes::from_static(reason.as_bytes())));
                }
            }
            Ok(true) => {
                if let Some(w) = s.recv_waker.take() {
                    w.wake();
                }
            }
            Ok(false) => {}
        }
    }

    /// Takes in what was kept unscanned, then reads on while there is room; returns whether
    /// there is something new for `h3` (a piece, or the end).
    fn read(
        &mut self,
        conn: &mut Connection,
        id: StreamId,
        s: &mut Stream,
        cuts: &mut Vec<Cut>,
    ) -> Result<bool, Violation> {
        let before = s.inbound.pieces.len();
        let raw = s.inbound.unkeep(self.holding);
        if !raw.is_empty() {
            let room = self.room(s);
            let took = s.inbound.take_in(&raw, room, self.holding, cuts)?;
            s.inbound.keep_unscanned(&raw[took..], self.holding);
            if took < raw.len() {
                self.holding.starve(id);
                return Ok(s.inbound.pieces.len() > before);
            }
        }
        if s.recv_end.is_some() {
            return Ok(s.inbound.pieces.len() > before);
        }
        let mut input = conn.recv_stream(id);
        let Ok(mut chunks) = input.read(true) else {
            // Gone from quinn-proto (the connection is closing): as a reset.
            s.recv_end = Some(Some(Code::H3_REQUEST_CANCELLED.value()));
            return Ok(true);
        };
        let mut result = Ok(());
        loop {
            let room = self.room(s);
            // A read of at most this many bytes: any one piece cut from it fits (its cost
            // is its bytes and one PIECE_COST), so the first always does.
            let max = room.saturating_sub(PIECE_COST);
            if max == 0 {
                self.holding.starve(id);
                break;
            }
            match chunks.next(max) {
                Ok(Some(c)) => match s.inbound.take_in(&c.bytes, room, self.holding, cuts) {
                    Ok(took) if took == c.bytes.len() => {}
                    Ok(took) => {
                        s.inbound.keep_unscanned(&c.bytes[took..], self.holding);
                        self.holding.starve(id);
                        break;
                    }
                    Err(v) => {
                        result = Err(v);
                        break;
                    }
                },
                Ok(None) => {
                    s.inbound.end();
                    s.recv_end = Some(None);
                    break;
                }
                Err(ReadError::Reset(c)) => {
                    s.recv_end = Some(Some(c.into_inner()));
                    break;
                }
                Err(ReadError::Blocked) => break,
            }
        }
        let _ = chunks.finalize();
        result?;
        Ok(s.inbound.pieces.len() > before || s.recv_end.is_some())
    }
}

#[cfg(test)]
mod tests {
    use quinn_proto::VarInt;

    use super::*;

    const HEADERS: u8 = 0x01;

    fn take_all(inbound: &mut Inbound, holding: &mut Holding) -> Vec<Bytes> {
        let mut dirty = IdSet::default();
        std::iter::from_fn(|| inbound.take(holding, &mut dirty)).collect()
    }

    /// A HEADERS frame of `len` bytes of payload (`len` below 16 384).
    fn headers(len: usize) -> Vec<u8> {
        let mut f = vec![HEADERS, 0x40 | (len >> 8) as u8, len as u8];
        f.extend((0..len).map(|i| i as u8));
        f
    }

    #[test]
    fn pieces_are_copied_out_of_the_datagram_they_came_in() {
        let mut inbound = Inbound::new(Guard::bidi());
        let (mut holding, mut cuts) = (Holding::default(), Vec::new());
        // A small frame at the start of a large datagram.
        let mut datagram = headers(10);
        datagram.resize(9000, 0);
        let took = inbound
            .take_in(&datagram[..13], usize::MAX, &mut holding, &mut cuts)
            .unwrap();
        assert_eq!(took, 13);
        assert_eq!(
            (inbound.held(), holding.bytes),
            (13 + PIECE_COST, 13 + PIECE_COST)
        );
        let pieces = take_all(&mut inbound, &mut holding);
        assert_eq!(pieces, vec![Bytes::copy_from_slice(&datagram[..13])]);
        let inside = datagram.as_ptr_range();
        assert!(!inside.contains(&pieces[0].as_ptr()), "a copy, not a slice");
        assert_eq!((inbound.held(), holding.bytes), (0, 0));
    }

    #[test]
    fn a_frame_sent_a_byte_at_a_time_is_one_buffer_until_it_is_whole() {
        let mut inbound = Inbound::new(Guard::bidi());
        let (mut holding, mut cuts) = (Holding::default(), Vec::new());
        let frame = headers(1000);
        for (i, b) in frame.iter().enumerate() {
            let took = inbound
                .take_in(&[*b], usize::MAX, &mut holding, &mut cuts)
                .unwrap();
            assert_eq!(took, 1);
            if i + 1 < frame.len() {
                assert!(
                    !inbound.has_pieces(),
                    "nothing for h3 before the frame is whole"
                );
                assert_eq!(inbound.held(), i + 1 + PIECE_COST, "one record");
            }
        }
        assert_eq!(inbound.held(), frame.len() + PIECE_COST);
        assert_eq!(
            take_all(&mut inbound, &mut holding),
            vec![Bytes::from(frame)]
        );
        assert_eq!(holding.bytes, 0);
    }

    /// 10 000 empty DATA frames (2 bytes each): each piece costs its record, so with 64 KiB
    /// of room 992 are taken in and the rest is kept as one copy, unscanned, until h3 has
    /// taken them; then the rest goes on where it stopped.
    #[test]
    fn empty_data_frames_cost_their_records_and_stop_at_the_room() {
        let mut inbound = Inbound::new(Guard::bidi());
        let (mut holding, mut cuts) = (Holding::default(), Vec::new());
        let bytes = [0u8; 20_000];
        let room = 64 * 1024;
        let fit = room / (2 + PIECE_COST);
        let took = inbound
            .take_in(&bytes, room, &mut holding, &mut cuts)
            .unwrap();
        assert_eq!(took, 2 * fit);
        inbound.keep_unscanned(&bytes[took..], &mut holding);
        let rest = bytes.len() - took;
        assert_eq!(inbound.held(), fit * (2 + PIECE_COST) + rest + PIECE_COST);
        assert!(inbound.held() <= room + rest + PIECE_COST);
        assert_eq!(take_all(&mut inbound, &mut holding).len(), fit);
        // The rest, taken back and in: the guard goes on at a frame's start.
        let raw = inbound.unkeep(&mut holding);
        assert_eq!((raw.len(), holding.bytes), (rest, 0));
        let took = inbound
            .take_in(&raw, usize::MAX, &mut holding, &mut cuts)
            .unwrap();
        assert_eq!(took, rest);
        let pieces = take_all(&mut inbound, &mut holding);
        assert_eq!(pieces.len(), rest / 2);
        assert!(pieces.iter().all(|p| p[..] == [0, 0]));
    }

    #[test]
    fn a_piece_that_does_not_fit_is_not_taken_in() {
        let mut inbound = Inbound::new(Guard::bidi());
        let (mut holding, mut cuts) = (Holding::default(), Vec::new());
        let frame = headers(100);
        let took = inbound
            .take_in(&frame, 100 + PIECE_COST, &mut holding, &mut cuts)
            .unwrap();
        assert_eq!((took, inbound.held()), (0, 0), "103 bytes and a record");
        let took = inbound
            .take_in(&frame, frame.len() + PIECE_COST, &mut holding, &mut cuts)
            .unwrap();
        assert_eq!(took, frame.len());
    }

    #[test]
    fn a_stream_left_unread_is_listed_once() {
        let mut holding = Holding {
            limit: Some(0),
            ..Holding::default()
        };
        for _ in 0..1000 {
            holding.starve(StreamId::from(VarInt::from_u32(4)));
            holding.starve(StreamId::from(VarInt::from_u32(8)));
        }
        assert_eq!((holding.starved.len(), holding.peak_starved), (2, 2));
    }
}
