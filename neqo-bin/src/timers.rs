//! One timer structure for every connection: a min-heap of deadlines with lazy invalidation.

use std::{cmp::Reverse, collections::BinaryHeap, time::Instant};

/// A deadline for one key; a newer arm of the same key makes older entries stale.
#[derive(Debug, Default)]
pub struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize, u64)>>,
}

/// The per-key state [`Timers`] needs: which arm is live.
#[derive(Debug, Default, Clone, Copy)]
pub struct TimerSlot {
    generation: u64,
    armed: Option<Instant>,
}

impl TimerSlot {
    /// Whether the entry of `generation` is the live one; if so it is consumed.
    pub const fn fire(&mut self, generation: u64) -> bool {
        if self.generation == generation && self.armed.is_some() {
            self.armed = None;
            true
        } else {
            false
        }
    }

    /// The live deadline.
    #[must_use]
    pub const fn deadline(&self) -> Option<Instant> {
        self.armed
    }
}

impl Timers {
    /// Sets `key`'s deadline (none to disarm). Cheap when unchanged.
    pub fn arm(&mut self, key: usize, slot: &mut TimerSlot, deadline: Option<Instant>) {
        if slot.armed == deadline {
            return;
        }
        slot.generation += 1;
        slot.armed = deadline;
        if let Some(at) = deadline {
            self.heap.push(Reverse((at, key, slot.generation)));
        }
    }

    /// The earliest deadline, stale or not (waking early for a stale one is harmless).
    #[must_use]
    pub fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Pops every entry due by `now`, calling `due` with its key and generation; the caller
    /// hands that to [`TimerSlot::fire`] to learn whether the entry is live.
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

    /// Whether no entry is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Drops stale entries: rebuilds the heap from the live deadlines.
    pub fn compact(&mut self, live: impl Iterator<Item = (usize, TimerSlot)>) {
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
        let mut timers = Timers::default();
        let mut slots = [TimerSlot::default(); 2];
        timers.arm(0, &mut slots[0], Some(t0 + Duration::from_millis(5)));
        timers.arm(0, &mut slots[0], Some(t0 + Duration::from_millis(20)));
        timers.arm(1, &mut slots[1], Some(t0 + Duration::from_millis(10)));
        assert_eq!(timers.next(), Some(t0 + Duration::from_millis(5)));
        let mut fired = vec![];
        timers.expire(t0 + Duration::from_millis(15), |k, g| {
            if slots[k].fire(g) {
                fired.push(k);
            }
        });
        assert_eq!(fired, vec![1]);
        assert_eq!(timers.next(), Some(t0 + Duration::from_millis(20)));
    }
}
