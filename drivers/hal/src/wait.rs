//! The blocking wait of a driver: check an event source until it has something, sleeping on
//! its interrupt vectors in between where the platform delivers them.
//!
//! [`wait_for`] is the loop both NIC drivers' blocking calls (`ibv_get_cq_event`,
//! `ibv_get_async_event`) run. It follows the race-free order of the [`irq`](crate::irq)
//! module: read the vectors' counts, check (a check that finds its event queue empty leaves it
//! armed), and only then sleep until a count moves. An event that arrives after the counts were
//! read raises a vector whose count has moved past the one the sleep names, so the sleep ends
//! at once and the next check finds it.

use alloc::vec::Vec;

use crate::{IrqError, IrqWatch, Platform};

/// Runs `check` until it returns a value or an error, or until `timeout_ns` nanoseconds of
/// [`Platform::now_ns`] have passed (`Ok(None)`).
///
/// Each round:
/// 1. where the platform delivers interrupts ([`Platform::interrupts`]), reads the delivery
///    count of every vector of `vectors`;
/// 2. runs `check`: `Ok(Some(x))` returns `Ok(Some(x))`, an error is returned as it is, and
///    `Ok(None)` goes on. `check` is run at least once, even with a zero timeout;
/// 3. when the deadline has passed, returns `Ok(None)`;
/// 4. with interrupts and at least one vector, sleeps ([`Interrupts::wait`](crate::Interrupts::wait))
///    until one of the vectors is delivered past the count read in step 1, for at most
///    `recheck_ns` and never past the deadline. The bound is a safety net: an event source
///    that did not raise its vector (a lost or never-armed interrupt) is still looked at every
///    `recheck_ns`. A failed sleep returns its [`IrqError`] as `E`;
/// 5. calls [`Platform::relax`], with interrupts or without (then it is the whole pause
///    between checks: a spin hint on hardware; on a platform whose device runs inline, it is
///    what moves the device and the clock on).
///
/// `recheck_ns` of `u64::MAX` sleeps until a vector fires or the deadline passes. The loop
/// allocates one [`IrqWatch`] per vector; it does not allocate per round.
pub fn wait_for<P, T, E, F>(
    platform: &P,
    vectors: &[u16],
    timeout_ns: u64,
    recheck_ns: u64,
    mut check: F,
) -> Result<Option<T>, E>
where
    P: Platform + ?Sized,
    E: From<IrqError>,
    F: FnMut() -> Result<Option<T>, E>,
{
    let deadline = platform.now_ns().saturating_add(timeout_ns);
    let mut watch: Vec<IrqWatch> = vectors
        .iter()
        .map(|&vector| IrqWatch { vector, seen: 0 })
        .collect();
    loop {
        let irq = platform.interrupts();
        if let Some(i) = irq {
            for w in watch.iter_mut() {
                w.seen = i.count(w.vector);
            }
        }
        if let Some(x) = check()? {
            return Ok(Some(x));
        }
        let now = platform.now_ns();
        if now >= deadline {
            return Ok(None);
        }
        if let Some(i) = irq
            && !watch.is_empty()
        {
            i.wait(&watch, (deadline - now).min(recheck_ns))?;
        }
        platform.relax();
    }
}

/// [`wait_for`] on several event sources at once (as `poll(2)` on several descriptors):
/// sleeps on the vectors of all of `sources` (each one's is `vector(source)`; a vector
/// shared by several is watched once) and checks them in order each round, so the first
/// source's events come first. Returns the index of the source whose `check` found
/// something, and what it found; `Ok(None)` when the timeout passed. No source: nothing to
/// sleep on, it checks nothing and polls (with [`Platform::relax`]) until the timeout, so a
/// caller that must refuse an empty set refuses it before.
pub fn wait_for_any<P, S, T, E, V, F>(
    platform: &P,
    sources: &mut [S],
    vector: V,
    timeout_ns: u64,
    recheck_ns: u64,
    mut check: F,
) -> Result<Option<(usize, T)>, E>
where
    P: Platform + ?Sized,
    E: From<IrqError>,
    V: Fn(&S) -> u16,
    F: FnMut(&mut S) -> Result<Option<T>, E>,
{
    let mut vectors: Vec<u16> = sources.iter().map(vector).collect();
    vectors.sort_unstable();
    vectors.dedup();
    wait_for(platform, &vectors, timeout_ns, recheck_ns, || {
        for (i, s) in sources.iter_mut().enumerate() {
            if let Some(x) = check(s)? {
                return Ok(Some((i, x)));
            }
        }
        Ok(None)
    })
}

#[cfg(test)]
mod tests {
    use super::{wait_for, wait_for_any};
    use crate::{Interrupts, IrqError, IrqWatch, Platform};
    use std::cell::{Cell, RefCell};
    use std::collections::VecDeque;

    /// What the fake backend does when a wait finds no watched count moved.
    #[derive(Clone, Copy, Debug)]
    enum Sleep {
        /// Vector `v` is delivered after `ns` nanoseconds (if that is within the wait).
        Fire { vector: u16, after_ns: u64 },
        /// The host call fails.
        Fail,
    }

    /// A virtual clock and interrupt backend: time moves only when a wait sleeps (by the time
    /// it slept) or, without interrupts, on relax (`relax_ns` each).
    struct Fake {
        now: Cell<u64>,
        relax_ns: u64,
        irqs: bool,
        counts: RefCell<Vec<u64>>,
        /// One entry per sleep; none left: nothing fires (the sleep times out).
        script: RefCell<VecDeque<Sleep>>,
        /// Each wait's watch list and timeout.
        waits: RefCell<Vec<(Vec<IrqWatch>, u64)>>,
        relaxes: Cell<u32>,
    }

    impl Fake {
        fn new(irqs: bool) -> Fake {
            Fake {
                now: Cell::new(1_000),
                relax_ns: 1_000_000,
                irqs,
                counts: RefCell::new(vec![0; 4]),
                script: RefCell::new(VecDeque::new()),
                waits: RefCell::new(Vec::new()),
                relaxes: Cell::new(0),
            }
        }
        fn then(&self, s: Sleep) -> &Fake {
            self.script.borrow_mut().push_back(s);
            self
        }
        fn raise(&self, vector: u16) {
            self.counts.borrow_mut()[usize::from(vector)] += 1;
        }
        fn naps(&self) -> Vec<u64> {
            self.waits.borrow().iter().map(|w| w.1).collect()
        }
    }

    impl Platform for Fake {
        fn relax(&self) {
            self.relaxes.set(self.relaxes.get() + 1);
            if !self.irqs {
                self.now.set(self.now.get() + self.relax_ns);
            }
        }
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
        fn interrupts(&self) -> Option<&dyn Interrupts> {
            if self.irqs { Some(self) } else { None }
        }
    }

    impl Interrupts for Fake {
        fn vectors(&self) -> u16 {
            4
        }
        fn enable(&self, _vector: u16) -> Result<(), IrqError> {
            Ok(())
        }
        fn count(&self, vector: u16) -> u64 {
            self.counts
                .borrow()
                .get(usize::from(vector))
                .copied()
                .unwrap_or(0)
        }
        fn wait(&self, watch: &[IrqWatch], timeout_ns: u64) -> Result<bool, IrqError> {
            // A loop that never reaches its deadline fails here instead of hanging the test.
            assert!(timeout_ns > 0, "a sleep of no time");
            assert!(self.waits.borrow().len() < 1000, "the wait does not end");
            self.waits.borrow_mut().push((watch.to_vec(), timeout_ns));
            let moved = |me: &Fake| watch.iter().any(|w| me.count(w.vector) != w.seen);
            if moved(self) {
                return Ok(true);
            }
            let next = self.script.borrow_mut().pop_front();
            match next {
                Some(Sleep::Fail) => Err(IrqError::Backend),
                Some(Sleep::Fire { vector, after_ns }) if after_ns <= timeout_ns => {
                    self.now.set(self.now.get() + after_ns);
                    self.raise(vector);
                    Ok(moved(self))
                }
                _ => {
                    self.now.set(self.now.get() + timeout_ns);
                    Ok(false)
                }
            }
        }
    }

    #[derive(Debug, PartialEq, Eq)]
    enum E {
        Irq(IrqError),
        Check,
    }

    impl From<IrqError> for E {
        fn from(e: IrqError) -> E {
            E::Irq(e)
        }
    }

    const MS: u64 = 1_000_000;

    /// A check that finds nothing `n` times, then `Some(round)`; counts its calls.
    fn after(n: u32, calls: &Cell<u32>) -> impl FnMut() -> Result<Option<u32>, E> + '_ {
        move || {
            calls.set(calls.get() + 1);
            Ok((calls.get() > n).then_some(calls.get()))
        }
    }

    #[test]
    fn a_check_that_finds_something_returns_at_once() {
        for irqs in [true, false] {
            let f = Fake::new(irqs);
            let calls = Cell::new(0);
            assert_eq!(
                wait_for(&f, &[1], 50 * MS, 10 * MS, after(0, &calls)),
                Ok(Some(1))
            );
            assert_eq!(calls.get(), 1);
            assert!(f.waits.borrow().is_empty());
            assert_eq!(f.relaxes.get(), 0);
            assert_eq!(f.now.get(), 1_000);
        }
    }

    #[test]
    fn a_zero_timeout_still_checks_once() {
        let f = Fake::new(true);
        let calls = Cell::new(0);
        assert_eq!(wait_for(&f, &[1], 0, 10 * MS, after(5, &calls)), Ok(None));
        assert_eq!(calls.get(), 1);
        assert!(f.waits.borrow().is_empty());
        let calls = Cell::new(0);
        assert_eq!(
            wait_for(&f, &[1], 0, 10 * MS, after(0, &calls)),
            Ok(Some(1))
        );
    }

    #[test]
    fn sleeps_on_the_vectors_and_rechecks_when_one_fires() {
        let f = Fake::new(true);
        f.raise(2);
        f.raise(3);
        f.raise(3);
        f.then(Sleep::Fire {
            vector: 3,
            after_ns: 2 * MS,
        });
        let calls = Cell::new(0);
        let got = wait_for(&f, &[2, 3], 50 * MS, 10 * MS, after(1, &calls));
        assert_eq!(got, Ok(Some(2)));
        assert_eq!(calls.get(), 2);
        let waits = f.waits.borrow();
        assert_eq!(waits.len(), 1);
        // It watched both vectors at the counts read before the check, for the recheck
        // interval, and woke when vector 3 fired (2 ms, not 10).
        assert_eq!(
            waits[0].0,
            vec![
                IrqWatch { vector: 2, seen: 1 },
                IrqWatch { vector: 3, seen: 2 },
            ]
        );
        assert_eq!(waits[0].1, 10 * MS);
        assert_eq!(f.now.get(), 1_000 + 2 * MS);
        // Relax runs after the sleep (an inline device moves on it).
        assert_eq!(f.relaxes.get(), 1);
    }

    #[test]
    fn an_interrupt_during_the_check_ends_the_sleep_at_once() {
        let f = Fake::new(true);
        let calls = Cell::new(0);
        // The event arrives after the counts were read, while the check looks (and finds the
        // queue empty): the sleep names the old count and returns at once.
        let got: Result<Option<u32>, E> = wait_for(&f, &[1], 50 * MS, u64::MAX, || {
            calls.set(calls.get() + 1);
            if calls.get() == 1 {
                f.raise(1);
                return Ok(None);
            }
            Ok(Some(calls.get()))
        });
        assert_eq!(got, Ok(Some(2)));
        assert_eq!(f.waits.borrow()[0].0, vec![IrqWatch { vector: 1, seen: 0 }]);
        assert_eq!(f.now.get(), 1_000);
    }

    #[test]
    fn times_out_when_the_virtual_time_has_passed() {
        let f = Fake::new(true);
        let calls = Cell::new(0);
        let got = wait_for(&f, &[1], 25 * MS, 10 * MS, after(u32::MAX, &calls));
        assert_eq!(got, Ok(None));
        // Sleeps of the recheck interval, the last one cut to the deadline, and a check
        // after each.
        assert_eq!(f.naps(), vec![10 * MS, 10 * MS, 5 * MS]);
        assert_eq!(calls.get(), 4);
        assert_eq!(f.now.get(), 1_000 + 25 * MS);
    }

    #[test]
    fn rechecks_after_the_interval_without_an_interrupt() {
        let f = Fake::new(true);
        let calls = Cell::new(0);
        // Nothing fires; the event is there on the second look.
        let got = wait_for(&f, &[0], 60_000 * MS, 10 * MS, after(1, &calls));
        assert_eq!(got, Ok(Some(2)));
        assert_eq!(f.naps(), vec![10 * MS]);
        assert_eq!(f.now.get(), 1_000 + 10 * MS);
    }

    #[test]
    fn an_unbounded_recheck_sleeps_to_the_deadline() {
        let f = Fake::new(true);
        let calls = Cell::new(0);
        let got = wait_for(&f, &[0], 30 * MS, u64::MAX, after(u32::MAX, &calls));
        assert_eq!(got, Ok(None));
        assert_eq!(f.naps(), vec![30 * MS]);
        assert_eq!(calls.get(), 2);
    }

    #[test]
    fn without_interrupts_it_polls_with_relax() {
        let f = Fake::new(false);
        let calls = Cell::new(0);
        assert_eq!(
            wait_for(&f, &[1], 5 * MS, 10 * MS, after(u32::MAX, &calls)),
            Ok(None)
        );
        // One relax (1 ms of the fake clock) between checks, until the deadline.
        assert_eq!(f.relaxes.get(), 5);
        assert_eq!(calls.get(), 6);
        let calls = Cell::new(0);
        assert_eq!(
            wait_for(&f, &[1], 5 * MS, 10 * MS, after(2, &calls)),
            Ok(Some(3))
        );
        assert_eq!(f.relaxes.get(), 7);
    }

    #[test]
    fn no_vector_to_watch_polls_even_with_interrupts() {
        let f = Fake::new(true);
        let calls = Cell::new(0);
        assert_eq!(
            wait_for(&f, &[], 5 * MS, 10 * MS, after(3, &calls)),
            Ok(Some(4))
        );
        assert!(f.waits.borrow().is_empty());
        assert_eq!(f.relaxes.get(), 3);
    }

    #[test]
    fn a_failed_sleep_is_the_callers_error() {
        let f = Fake::new(true);
        f.then(Sleep::Fail);
        let calls = Cell::new(0);
        assert_eq!(
            wait_for(&f, &[1], 50 * MS, 10 * MS, after(u32::MAX, &calls)),
            Err(E::Irq(IrqError::Backend))
        );
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn a_failed_check_ends_the_wait() {
        let f = Fake::new(true);
        let calls = Cell::new(0);
        let got: Result<Option<u32>, E> = wait_for(&f, &[1], 50 * MS, 10 * MS, || {
            calls.set(calls.get() + 1);
            if calls.get() == 2 {
                Err(E::Check)
            } else {
                Ok(None)
            }
        });
        assert_eq!(got, Err(E::Check));
        assert_eq!(f.naps(), vec![10 * MS]);
    }

    #[test]
    fn a_huge_timeout_does_not_overflow() {
        let f = Fake::new(true);
        f.now.set(u64::MAX - 5);
        let calls = Cell::new(0);
        assert_eq!(
            wait_for(&f, &[1], u64::MAX, 10 * MS, after(1, &calls)),
            Ok(Some(2))
        );
        assert_eq!(f.naps(), vec![5]);
    }

    /// An event source of the `wait_for_any` tests: its vector and the events queued on it.
    struct Source {
        vector: u16,
        events: VecDeque<u32>,
        looks: u32,
    }

    fn source(vector: u16, events: &[u32]) -> Source {
        Source {
            vector,
            events: events.iter().copied().collect(),
            looks: 0,
        }
    }

    fn take(s: &mut Source) -> Result<Option<u32>, E> {
        s.looks += 1;
        Ok(s.events.pop_front())
    }

    #[test]
    fn any_watches_each_vector_once_and_takes_the_first_source_first() {
        let f = Fake::new(true);
        f.raise(2);
        let mut sources = [source(2, &[]), source(1, &[]), source(2, &[])];
        let got = wait_for_any(&f, &mut sources, |s| s.vector, 50 * MS, 10 * MS, take);
        assert_eq!(got, Ok(None));
        // Sorted, deduplicated, at the counts read before the checks.
        assert_eq!(
            f.waits.borrow()[0].0,
            vec![
                IrqWatch { vector: 1, seen: 0 },
                IrqWatch { vector: 2, seen: 1 },
            ]
        );
        assert_eq!(f.naps(), vec![10 * MS; 5]);
        assert!(sources.iter().all(|s| s.looks == 6));

        let f = Fake::new(true);
        let mut sources = [source(1, &[]), source(3, &[7]), source(1, &[8])];
        let got = wait_for_any(&f, &mut sources, |s| s.vector, 50 * MS, 10 * MS, take);
        assert_eq!(got, Ok(Some((1, 7))));
        // The third source was not looked at: the second one answered.
        assert_eq!(sources.map(|s| s.looks), [1, 1, 0]);
        assert!(f.waits.borrow().is_empty());
    }

    #[test]
    fn any_wakes_when_a_later_sources_vector_fires() {
        let f = Fake::new(true);
        f.then(Sleep::Fire {
            vector: 3,
            after_ns: 4 * MS,
        });
        let mut sources = [source(1, &[]), source(3, &[])];
        let mut round = 0;
        let got = wait_for_any(
            &f,
            &mut sources,
            |s| s.vector,
            50 * MS,
            10 * MS,
            |s| {
                // The event is there once the vector fired.
                if s.vector == 3 && f.count(3) > 0 {
                    round += 1;
                    return Ok(Some(round));
                }
                take(s)
            },
        );
        assert_eq!(got, Ok(Some((1, 1))));
        assert_eq!(f.naps(), vec![10 * MS]);
        assert_eq!(f.now.get(), 1_000 + 4 * MS);
    }

    #[test]
    fn any_without_sources_polls_until_the_timeout() {
        let f = Fake::new(false);
        let mut sources: [Source; 0] = [];
        let got = wait_for_any(&f, &mut sources, |s| s.vector, 3 * MS, 10 * MS, take);
        assert_eq!(got, Ok(None));
        assert_eq!(f.relaxes.get(), 3);
    }
}
