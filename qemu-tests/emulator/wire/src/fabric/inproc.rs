//! The in-process fabric: deterministic delivery with seeded fault injection.

use std::boxed::Box;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use std::vec::Vec;

use super::rng::SplitMix64;
use super::{Fabric, FabricError, Port, Received, Segment};
use crate::icrc::IPV4_UDP_HEADER_LEN;
use crate::packet::{Bth, HeaderKind, Ipv4Header, WireError, peek_ipv4_addrs};

/// What the fabric does to each frame sent on a path. Probabilities are per frame, clamped to
/// 0..=1 (NaN counts as 0).
///
/// The decisions for one frame are drawn in a fixed order from the fabric's one PRNG: loss,
/// duplication, then for each copy corruption, jitter, reordering. The same seed, the same
/// configuration and the same calls give the same deliveries, byte for byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    /// Probability that a frame is dropped.
    pub loss: f64,
    /// Probability that a frame is delivered twice (each copy then gets its own corruption,
    /// delay and reordering decisions).
    pub duplicate: f64,
    /// Probability that a frame is held back and delivered after later frames to the same
    /// destination.
    pub reorder: f64,
    /// A held frame is released right after 1..=`reorder_depth` (uniform) later frames to
    /// the same destination have been queued (0 counts as 1)…
    pub reorder_depth: u32,
    /// …or once this much fabric time has passed since it was due, whichever comes first.
    pub reorder_timeout_ns: u64,
    /// Probability that one byte of the frame's UDP payload (BTH … ICRC, except BTH byte 4,
    /// which the ICRC does not cover) is XORed with a random non-zero value. The receiver's
    /// ICRC check catches every such corruption.
    pub corrupt: f64,
    /// Fixed delay from send to delivery, in fabric nanoseconds.
    pub delay_ns: u64,
    /// Extra delay, uniform in 0..=`jitter_ns`. Jitter alone can reorder frames.
    pub jitter_ns: u64,
}

impl FaultConfig {
    /// A perfect link: no faults, no delay.
    pub const NONE: Self = Self {
        loss: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_depth: 3,
        reorder_timeout_ns: 100_000,
        corrupt: 0.0,
        delay_ns: 0,
        jitter_ns: 0,
    };
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self::NONE
    }
}

/// Frame counters of an [`InProcessFabric`]. Every frame accepted by `send` is counted in
/// `sent`; each copy then ends up delivered, dropped, or still in flight:
/// `sent + duplicated == delivered + dropped() + in_flight`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FabricStats {
    /// Frames accepted by a port's `send`.
    pub sent: u64,
    /// Frames handed out by a port's `recv`.
    pub delivered: u64,
    /// Frames dropped by the loss probability.
    pub dropped_loss: u64,
    /// Frames dropped because their path was cut.
    pub dropped_cut: u64,
    /// Frames dropped because no port was attached at the destination (at send time, or
    /// when the port detached with frames queued).
    pub dropped_no_route: u64,
    /// Extra copies made by duplication.
    pub duplicated: u64,
    /// Copies that had a byte flipped.
    pub corrupted: u64,
    /// Copies held back for reordering.
    pub reordered: u64,
    /// Segments carried whole over a fault-free path (their packets are counted in `sent`
    /// and `delivered` like frames).
    pub segments: u64,
    /// Packets of segments dropped because their payload was withdrawn before delivery (the
    /// sender flushed or destroyed its QP meanwhile).
    pub dropped_gone: u64,
}

impl FabricStats {
    /// All drops.
    pub const fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_cut + self.dropped_no_route + self.dropped_gone
    }
}

/// The fabric's clock. A virtual clock is an atomic so that reading it (every device poll
/// does) takes no lock; it only moves under the state lock, so a reader holding the lock sees
/// a stable time.
enum Clock {
    Virtual(AtomicU64),
    Real(Instant),
}

impl Clock {
    fn now(&self) -> u64 {
        match self {
            Clock::Virtual(t) => t.load(Ordering::Acquire),
            Clock::Real(start) => u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

struct Held {
    frame: Vec<u8>,
    due: u64,
    deadline: u64,
    remaining: u64,
}

/// What a queue holds: a frame, or a segment carried whole.
enum Item {
    Frame(Vec<u8>),
    Segment(Segment),
}

impl Item {
    /// The packets it stands for.
    fn packets(&self) -> usize {
        match self {
            Item::Frame(_) => 1,
            Item::Segment(s) => s.count() as usize,
        }
    }
}

/// Items by (delivery time, sequence number), earliest first, in a ring kept sorted.
/// Keys almost always arrive in order (the clock only moves forward; only jitter and
/// reordering make a frame due before one already queued), so an insertion is a push at the
/// back and a delivery a pop at the front, with no allocation once the ring has grown.
#[derive(Default)]
struct ReadyQueue {
    items: VecDeque<((u64, u64), Item)>,
    /// Packets the items stand for.
    packets: usize,
}

impl ReadyQueue {
    fn insert(&mut self, key: (u64, u64), item: Item) {
        self.packets += item.packets();
        match self.items.back() {
            Some((last, _)) if *last > key => {
                let at = self.items.partition_point(|(k, _)| *k < key);
                self.items.insert(at, (key, item));
            }
            _ => self.items.push_back((key, item)),
        }
    }

    /// Puts an item back at the front under `key`, which must not be later than the first
    /// key queued (a segment's frames where the segment was).
    fn push_front(&mut self, key: (u64, u64), item: Item) {
        self.packets += item.packets();
        self.items.push_front((key, item));
    }

    fn first_key(&self) -> Option<(u64, u64)> {
        self.items.front().map(|(k, _)| *k)
    }

    fn pop_first(&mut self) -> Option<((u64, u64), Item)> {
        let (k, item) = self.items.pop_front()?;
        self.packets -= item.packets();
        Some((k, item))
    }
}

#[derive(Default)]
struct Queue {
    /// Frames by (delivery time, sequence number).
    ready: ReadyQueue,
    /// Frames held back for reordering, oldest first.
    held: Vec<Held>,
}

struct State {
    rng: SplitMix64,
    faults: FaultConfig,
    path_faults: BTreeMap<(Ipv4Addr, Ipv4Addr), FaultConfig>,
    cut: BTreeSet<(Ipv4Addr, Ipv4Addr)>,
    queues: BTreeMap<Ipv4Addr, Queue>,
    seq: u64,
    stats: FabricStats,
    /// Receivers blocked in `recv_timeout` on `arrived`. Senders and clock steps notify only
    /// when there is one: a notification nobody waits for still costs a system call.
    waiters: usize,
}

struct Shared {
    clock: Clock,
    state: Mutex<State>,
    arrived: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the state half-updated in a way that
        // matters to the fabric's invariants more than losing a frame; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// XORs one byte with a random non-zero value: anywhere in BTH … ICRC but BTH byte 4
/// (which the ICRC does not cover); anywhere at all in a frame too short to have a BTH.
fn corrupt(rng: &mut SplitMix64, frame: &mut [u8]) {
    if frame.is_empty() {
        return;
    }
    let body = IPV4_UDP_HEADER_LEN;
    let at = if frame.len() >= body + Bth::LEN {
        let i = rng.below((frame.len() - body - 1) as u64) as usize;
        body + if i >= 4 { i + 1 } else { i }
    } else {
        rng.below(frame.len() as u64) as usize
    };
    let mask = 1 + rng.below(255) as u8;
    frame[at] ^= mask;
}

impl State {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn send(&mut self, port: Ipv4Addr, frame: Vec<u8>, now: u64) -> Result<(), FabricError> {
        let (src, dst) = peek_ipv4_addrs(&frame).ok_or(FabricError::Malformed(
            if frame.len() < Ipv4Header::LEN {
                WireError::Truncated(HeaderKind::Ipv4)
            } else {
                WireError::NotIpv4
            },
        ))?;
        if src != port {
            return Err(FabricError::SourceMismatch { port, frame: src });
        }
        self.stats.sent += 1;
        if self.cut.contains(&(src, dst)) {
            self.stats.dropped_cut += 1;
            return Ok(());
        }
        if !self.queues.contains_key(&dst) {
            self.stats.dropped_no_route += 1;
            return Ok(());
        }
        let f = self.faults_of(src, dst);
        if self.rng.chance(f.loss) {
            self.stats.dropped_loss += 1;
            return Ok(());
        }
        let copy = if self.rng.chance(f.duplicate) {
            self.stats.duplicated += 1;
            Some(frame.clone())
        } else {
            None
        };
        self.inject(dst, frame, &f, now);
        if let Some(c) = copy {
            self.inject(dst, c, &f, now);
        }
        Ok(())
    }

    /// The faults of the one-way path `src → dst`.
    fn faults_of(&self, src: Ipv4Addr, dst: Ipv4Addr) -> FaultConfig {
        self.path_faults
            .get(&(src, dst))
            .copied()
            .unwrap_or(self.faults)
    }

    /// Sends a segment: whole over a path that is up, leads somewhere and does nothing to
    /// single frames (no loss, duplication, corruption, reordering or jitter; a fixed delay
    /// applies to it as a whole), else cut into its frames, each of which then goes its own
    /// way (and is counted as frames are).
    fn send_segment(&mut self, port: Ipv4Addr, seg: Segment, now: u64) -> Result<(), FabricError> {
        let (src, dst) = (seg.head().src_ip, seg.head().dst_ip);
        if src != port {
            return Err(FabricError::SourceMismatch { port, frame: src });
        }
        let f = self.faults_of(src, dst);
        // A probability that is not a plain 0 (NaN counts as 0 but is not worth a case).
        let on = |p: f64| p != 0.0;
        let whole = !(on(f.loss)
            || on(f.duplicate)
            || on(f.corrupt)
            || on(f.reorder)
            || f.jitter_ns > 0
            || self.cut.contains(&(src, dst))
            || !self.queues.contains_key(&dst));
        if !whole {
            let mut frame = Vec::new();
            for j in 0..seg.count() {
                seg.encode_packet(j, &mut frame)
                    .unwrap_or(Err(super::PayloadGone))
                    .map_err(|_| FabricError::PayloadGone)?;
                self.send(port, std::mem::take(&mut frame), now)?;
            }
            return Ok(());
        }
        self.stats.sent += u64::from(seg.count());
        self.stats.segments += 1;
        let due = now.saturating_add(f.delay_ns);
        self.queue(dst, due, Item::Segment(seg));
        Ok(())
    }

    fn inject(&mut self, dst: Ipv4Addr, mut frame: Vec<u8>, f: &FaultConfig, now: u64) {
        if self.rng.chance(f.corrupt) {
            corrupt(&mut self.rng, &mut frame);
            self.stats.corrupted += 1;
        }
        let jitter = if f.jitter_ns > 0 {
            self.rng.below(f.jitter_ns.saturating_add(1))
        } else {
            0
        };
        let due = now.saturating_add(f.delay_ns).saturating_add(jitter);
        if self.rng.chance(f.reorder) {
            let remaining = 1 + self.rng.below(u64::from(f.reorder_depth.max(1)));
            self.stats.reordered += 1;
            if let Some(q) = self.queues.get_mut(&dst) {
                q.held.push(Held {
                    frame,
                    due,
                    deadline: due.saturating_add(f.reorder_timeout_ns),
                    remaining,
                });
            }
            return;
        }
        self.queue(dst, due, Item::Frame(frame));
    }

    /// Queues an item for `dst`, due at `due`; frames held back for reordering count it as
    /// as many later frames as it has packets.
    fn queue(&mut self, dst: Ipv4Addr, due: u64, item: Item) {
        let seq = self.next_seq();
        let mut seq_next = self.seq;
        let packets = item.packets() as u64;
        if let Some(q) = self.queues.get_mut(&dst) {
            q.ready.insert((due, seq), item);
            let mut i = 0;
            while i < q.held.len() {
                q.held[i].remaining = q.held[i].remaining.saturating_sub(packets);
                if q.held[i].remaining == 0 {
                    let h = q.held.remove(i);
                    seq_next += 1;
                    q.ready
                        .insert((h.due.max(due), seq_next), Item::Frame(h.frame));
                } else {
                    i += 1;
                }
            }
        }
        self.seq = seq_next;
    }

    /// Moves held frames of `addr` whose deadline has passed into the ready queue.
    fn release_expired(&mut self, addr: Ipv4Addr, now: u64) {
        let mut seq = self.seq;
        if let Some(q) = self.queues.get_mut(&addr) {
            let mut i = 0;
            while i < q.held.len() {
                if q.held[i].deadline <= now {
                    let h = q.held.remove(i);
                    seq += 1;
                    q.ready.insert((h.deadline, seq), Item::Frame(h.frame));
                } else {
                    i += 1;
                }
            }
        }
        self.seq = seq;
    }

    /// The next item due for `addr`.
    fn try_recv(&mut self, addr: Ipv4Addr, now: u64) -> Option<Item> {
        self.release_expired(addr, now);
        let q = self.queues.get_mut(&addr)?;
        let (due, _) = q.ready.first_key()?;
        if due > now {
            return None;
        }
        let (_, item) = q.ready.pop_first()?;
        self.stats.delivered += item.packets() as u64;
        Some(item)
    }

    /// The next frame due for `addr`: a segment at the head of the queue is cut into its
    /// frames first (they take its place), or dropped if its payload is gone.
    fn try_recv_frame(&mut self, addr: Ipv4Addr, now: u64) -> Option<Vec<u8>> {
        loop {
            self.release_expired(addr, now);
            let q = self.queues.get_mut(&addr)?;
            let (due, _) = q.ready.first_key()?;
            if due > now {
                return None;
            }
            let (key, item) = q.ready.pop_first()?;
            match item {
                Item::Frame(f) => {
                    self.stats.delivered += 1;
                    return Some(f);
                }
                Item::Segment(s) => match s.frames() {
                    Ok(frames) => {
                        for f in frames.into_iter().rev() {
                            q.ready.push_front(key, Item::Frame(f));
                        }
                    }
                    Err(_) => self.stats.dropped_gone += u64::from(s.count()),
                },
            }
        }
    }

    fn next_event_for(&self, addr: Ipv4Addr) -> Option<u64> {
        let q = self.queues.get(&addr)?;
        let ready = q.ready.first_key().map(|(t, _)| t);
        let held = q.held.iter().map(|h| h.deadline).min();
        match (ready, held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn in_flight(&self) -> usize {
        self.queues
            .values()
            .map(|q| q.ready.packets + q.held.len())
            .sum()
    }
}

/// A deterministic in-memory network.
///
/// Cloning gives another handle to the same network. Time is the fabric's own: a virtual
/// clock ([`InProcessFabric::new`]) that only moves when told to ([`advance`],
/// [`advance_to`]), or the monotonic wall clock ([`InProcessFabric::with_real_clock`]).
/// A frame sent at time `t` becomes receivable at `t + delay_ns + jitter`; with no delay it
/// is receivable at once. With a virtual clock, delivery does not depend on thread timing.
///
/// [`advance`]: InProcessFabric::advance
/// [`advance_to`]: InProcessFabric::advance_to
#[derive(Clone)]
pub struct InProcessFabric {
    shared: Arc<Shared>,
}

impl InProcessFabric {
    fn with_clock(seed: u64, clock: Clock) -> Self {
        Self {
            shared: Arc::new(Shared {
                clock,
                state: Mutex::new(State {
                    rng: SplitMix64::new(seed),
                    faults: FaultConfig::NONE,
                    path_faults: BTreeMap::new(),
                    cut: BTreeSet::new(),
                    queues: BTreeMap::new(),
                    seq: 0,
                    stats: FabricStats::default(),
                    waiters: 0,
                }),
                arrived: Condvar::new(),
            }),
        }
    }

    /// A fault-free fabric with a virtual clock at 0, fault decisions seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_clock(seed, Clock::Virtual(AtomicU64::new(0)))
    }

    /// A fabric whose clock is the monotonic wall clock (nanoseconds since creation). Delays
    /// are then real; [`advance`](Self::advance) does nothing. Fault decisions stay seeded,
    /// but delivery order under delay depends on thread timing.
    pub fn with_real_clock(seed: u64) -> Self {
        Self::with_clock(seed, Clock::Real(Instant::now()))
    }

    /// Attaches a NIC at `addr` and returns the concrete port type.
    pub fn attach_port(&self, addr: Ipv4Addr) -> Result<InProcessPort, FabricError> {
        let mut st = self.shared.lock();
        if st.queues.contains_key(&addr) {
            return Err(FabricError::AddrInUse(addr));
        }
        st.queues.insert(addr, Queue::default());
        Ok(InProcessPort {
            shared: Arc::clone(&self.shared),
            addr,
        })
    }

    /// Sets the faults of every path without its own configuration.
    pub fn set_faults(&self, faults: FaultConfig) {
        self.shared.lock().faults = faults;
    }

    /// The faults of paths without their own configuration.
    pub fn faults(&self) -> FaultConfig {
        self.shared.lock().faults
    }

    /// Gives the one-way path `src → dst` its own faults (`None`: back to the fabric's).
    pub fn set_path_faults(&self, src: Ipv4Addr, dst: Ipv4Addr, faults: Option<FaultConfig>) {
        let mut st = self.shared.lock();
        match faults {
            Some(f) => st.path_faults.insert((src, dst), f),
            None => st.path_faults.remove(&(src, dst)),
        };
    }

    /// Cuts the link between `a` and `b`, both ways: frames sent on it are dropped (frames
    /// already in flight still arrive).
    pub fn cut_link(&self, a: Ipv4Addr, b: Ipv4Addr) {
        let mut st = self.shared.lock();
        st.cut.insert((a, b));
        st.cut.insert((b, a));
    }

    /// Restores the link between `a` and `b`, both ways.
    pub fn heal_link(&self, a: Ipv4Addr, b: Ipv4Addr) {
        let mut st = self.shared.lock();
        st.cut.remove(&(a, b));
        st.cut.remove(&(b, a));
    }

    /// Cuts the one-way path `src → dst` (for example to lose only ACKs).
    pub fn cut_path(&self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.shared.lock().cut.insert((src, dst));
    }

    /// Restores the one-way path `src → dst`.
    pub fn heal_path(&self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.shared.lock().cut.remove(&(src, dst));
    }

    /// Whether the one-way path `src → dst` is cut.
    pub fn is_cut(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        self.shared.lock().cut.contains(&(src, dst))
    }

    /// The fabric's time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.shared.clock.now()
    }

    /// Moves a virtual clock forward by `ns` and returns the new time; wakes waiting
    /// receivers. No effect on a real clock.
    pub fn advance(&self, ns: u64) -> u64 {
        self.step_clock(|t| t.saturating_add(ns))
    }

    /// Moves a virtual clock forward to `t_ns` (never backwards) and returns the new time;
    /// wakes waiting receivers. No effect on a real clock.
    pub fn advance_to(&self, t_ns: u64) -> u64 {
        self.step_clock(|t| t.max(t_ns))
    }

    /// Moves a virtual clock to `to(now)` under the state lock and wakes waiting receivers.
    fn step_clock(&self, to: impl FnOnce(u64) -> u64) -> u64 {
        let st = self.shared.lock();
        if let Clock::Virtual(t) = &self.shared.clock {
            t.store(to(t.load(Ordering::Acquire)), Ordering::Release);
        }
        let now = self.shared.clock.now();
        let wake = st.waiters > 0;
        drop(st);
        if wake {
            self.shared.arrived.notify_all();
        }
        now
    }

    /// The earliest time at which a frame in flight becomes receivable (a queued frame's due
    /// time or a held frame's reorder deadline); `None` if nothing is in flight. An inline
    /// simulation can jump the clock there with [`advance_to`](Self::advance_to).
    pub fn next_event_ns(&self) -> Option<u64> {
        let st = self.shared.lock();
        st.queues.keys().filter_map(|&a| st.next_event_for(a)).min()
    }

    /// Frames queued or held, not yet received.
    pub fn in_flight(&self) -> usize {
        self.shared.lock().in_flight()
    }

    /// The counters.
    pub fn stats(&self) -> FabricStats {
        self.shared.lock().stats
    }
}

impl Fabric for InProcessFabric {
    fn attach(&self, addr: Ipv4Addr) -> Result<Box<dyn Port>, FabricError> {
        Ok(Box::new(self.attach_port(addr)?))
    }
}

/// A NIC's port on an [`InProcessFabric`]. Dropping it detaches the address; frames still
/// queued for it are counted as `dropped_no_route`.
pub struct InProcessPort {
    shared: Arc<Shared>,
    addr: Ipv4Addr,
}

impl InProcessPort {
    /// Runs `send` under the state lock at the current time, then wakes waiting receivers
    /// (only if there are any: a notification nobody waits for still costs a system call).
    fn sending(
        &self,
        send: impl FnOnce(&mut State, Ipv4Addr, u64) -> Result<(), FabricError>,
    ) -> Result<(), FabricError> {
        let mut st = self.shared.lock();
        let now = self.shared.clock.now();
        send(&mut st, self.addr, now)?;
        let wake = st.waiters > 0;
        drop(st);
        if wake {
            self.shared.arrived.notify_all();
        }
        Ok(())
    }
}

impl Port for InProcessPort {
    fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    fn send(&self, frame: Vec<u8>) -> Result<(), FabricError> {
        self.sending(|st, addr, now| st.send(addr, frame, now))
    }

    fn recv(&self) -> Result<Option<Vec<u8>>, FabricError> {
        let mut st = self.shared.lock();
        Ok(st.try_recv_frame(self.addr, self.shared.clock.now()))
    }

    fn takes_segments(&self) -> bool {
        true
    }

    fn send_segment(&self, seg: Segment) -> Result<(), FabricError> {
        self.sending(|st, addr, now| st.send_segment(addr, seg, now))
    }

    fn recv_any(&self) -> Result<Option<Received>, FabricError> {
        let mut st = self.shared.lock();
        let item = st.try_recv(self.addr, self.shared.clock.now());
        Ok(item.map(|item| match item {
            Item::Frame(f) => Received::Frame(f),
            Item::Segment(s) => Received::Segment(s),
        }))
    }

    fn recv_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>, FabricError> {
        let give_up = Instant::now().checked_add(timeout);
        let mut st = self.shared.lock();
        loop {
            if let Some(f) = st.try_recv_frame(self.addr, self.shared.clock.now()) {
                return Ok(Some(f));
            }
            let left = match give_up {
                Some(g) => g.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Ok(None);
            }
            // With a real clock, wake up when the next frame falls due.
            let wait = match (&self.shared.clock, st.next_event_for(self.addr)) {
                (Clock::Real(_), Some(t)) => left.min(Duration::from_nanos(
                    t.saturating_sub(self.shared.clock.now()),
                )),
                _ => left,
            };
            st.waiters += 1;
            st = self
                .shared
                .arrived
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            st.waiters -= 1;
        }
    }
}

impl Drop for InProcessPort {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(q) = st.queues.remove(&self.addr) {
            st.stats.dropped_no_route += (q.ready.packets + q.held.len()) as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_never_touches_bth_byte_4() {
        let mut rng = SplitMix64::new(3);
        for len in [40usize, 41, 60, 200] {
            for _ in 0..2000 {
                let mut f = std::vec![0u8; len];
                corrupt(&mut rng, &mut f);
                let changed: Vec<usize> = (0..len).filter(|&i| f[i] != 0).collect();
                assert_eq!(changed.len(), 1);
                assert!(
                    changed[0] >= IPV4_UDP_HEADER_LEN && changed[0] != 32,
                    "{changed:?}"
                );
            }
        }
        let mut short = std::vec![0u8; 5];
        corrupt(&mut rng, &mut short);
        assert_eq!(short.iter().filter(|&&b| b != 0).count(), 1);
    }
}
