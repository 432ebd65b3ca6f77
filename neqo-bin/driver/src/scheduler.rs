//! The driver's one schedule: when each connection next needs the driver, the earlier of its
//! quinn-proto timer (`Connection::poll_timeout`, rounded up to the next [`TICK`]) and its
//! pacer's release time (exact). A min-heap of deadlines with lazy invalidation: re-arming a
//! connection leaves its old entry in the heap, marked stale by a generation number, rather
//! than searching for it; stale entries are dropped when they reach the head.
//!
//! The driver's precise timer waits on the head. Pacer releases need that precision (a late
//! one costs rate or lumps the bursts); quinn-proto's timers (loss detection, its own pacer,
//! idle) do not, and woken exactly for each of them a busy connection would wake far more
//! often than it receives, so they keep the millisecond grid tokio's timers have anyway.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    time::{Duration, Instant},
};

/// The grid quinn-proto's timers are rounded up to.
pub const TICK: Duration = Duration::from_millis(1);

/// `at` rounded up to the next [`TICK`] after `epoch`.
#[must_use]
pub fn on_tick(epoch: Instant, at: Instant) -> Instant {
    let since = at.saturating_duration_since(epoch);
    let ticks = since.as_nanos().div_ceil(TICK.as_nanos());
    epoch + TICK * u32::try_from(ticks).unwrap_or(u32::MAX)
}

/// A deadline for one key; a newer arm of the same key makes older entries stale.
#[derive(Debug, Default)]
pub struct Scheduler {
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

/// The per-key state [`Scheduler`] needs: which arm is live.
#[derive(Debug, Default, Clone, Copy)]
pub struct Slot {
    generation: u64,
    armed: Option<Instant>,
}

impl Slot {
    /// Whether the entry of `generation` is the live one; if so it is consumed.
    pub const fn fire(&mut self, generation: u64) -> bool {
        if self.generation == generation && self.armed.is_some() {
            self.armed = None;
            true
        } else {
            false
        }
    }

    /// Whether the entry of `generation` is the live one.
    #[must_use]
    pub const fn is_live(&self, generation: u64) -> bool {
        self.generation == generation && self.armed.is_some()
    }
}

impl Scheduler {
    /// Sets `key`'s deadline (none to disarm). Cheap when unchanged.
    pub fn arm(&mut self, key: usize, slot: &mut Slot, deadline: Option<Instant>) {
        if slot.armed == deadline {
            return;
        }
        slot.generation += 1;
        slot.armed = deadline;
        if let Some(at) = deadline {
            self.heap.push(Reverse((at, key, slot.generation)));
        }
    }

    /// The earliest live deadline: stale entries at the head (`live(key, generation)` says
    /// which are not) are dropped on the way.
    pub fn next(&mut self, live: impl Fn(usize, u64) -> bool) -> Option<Instant> {
        while let Some(&Reverse((at, key, generation))) = self.heap.peek() {
            if live(key, generation) {
                return Some(at);
            }
            self.heap.pop();
        }
        None
    }

    /// Pops every entry due by `now`, calling `due` with its key and generation; the caller
    /// hands that to [`Slot::fire`] to learn whether the entry is live.
    pub fn expire(&mut self, now: Instant, mut due: impl FnMut(usize, u64)) {
        while let Some(Reverse((at, key, generation))) = self.heap.peek().copied() {
            if at > now {
                break;
            }
            self.heap.pop();
            due(key, generation);
        }
    }

    /// Entries held, stale ones included.
    #[must_use]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Drops stale entries: rebuilds the heap from the live deadlines.
    pub fn compact(&mut self, live: impl Iterator<Item = (usize, Slot)>) {
        self.heap.clear();
        for (key, slot) in live {
            if let Some(at) = slot.armed {
                self.heap.push(Reverse((at, key, slot.generation)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn stale_entries_do_not_fire() {
        let t0 = Instant::now();
        let mut scheduler = Scheduler::default();
        let mut slots = [Slot::default(); 2];
        scheduler.arm(0, &mut slots[0], Some(t0 + Duration::from_millis(5)));
        scheduler.arm(0, &mut slots[0], Some(t0 + Duration::from_millis(20)));
        scheduler.arm(1, &mut slots[1], Some(t0 + Duration::from_millis(10)));
        // The stale 5 ms entry is dropped from the head: the live earliest is 10 ms.
        assert_eq!(
            scheduler.next(|k, g| slots[k].is_live(g)),
            Some(t0 + Duration::from_millis(10))
        );
        let mut fired = vec![];
        scheduler.expire(t0 + Duration::from_millis(15), |k, g| {
            if slots[k].fire(g) {
                fired.push(k);
            }
        });
        assert_eq!(fired, vec![1]);
        assert_eq!(
            scheduler.next(|k, g| slots[k].is_live(g)),
            Some(t0 + Duration::from_millis(20))
        );
        assert_eq!(scheduler.len(), 1, "nothing stale left");
    }
}
