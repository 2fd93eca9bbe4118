//! The passive end of a run ([`Responder`]: perftest's server), the bookkeeping of sends and
//! receives both ends share ([`Queue`]), and what the client's loops ask of the far end
//! ([`Peer`]): in the embedded mode the responder is driven from the client's thread, in the
//! two-process mode it runs in the server process and the client only talks to it at the end.

use verbs::{SendFlags, WcOpcode, WorkCompletion, WrOpcode};

use crate::bw;
use crate::cli::Test;
use crate::lat::{self, LAT_RQ, LAT_SQ};
use crate::port::{Pace, Port, Request, Target, Wait};
use crate::setup::{Result, check_ok, compare, fnv1a};

/// A verdict: `Ok` when every check passed, else the first failure.
pub type Verdict = std::result::Result<(), String>;

/// One end's signalled sends and posted receives.
#[derive(Debug)]
pub struct Queue {
    /// Signalled sends not completed yet.
    pub outstanding: u32,
    /// Receives completed.
    pub recvs: u64,
    /// Receives posted: `wr_id` 0, 1, ..., each into DST slot `wr_id % slots`.
    pub posted: u64,
    /// No receive is posted beyond this many (the messages the peer sends, when known).
    pub limit: u64,
    /// Immediate data of the last RDMA WRITE with immediate that arrived (control messages).
    pub imm: Option<u32>,
    /// The run is over (the verdict is on its way): the peer may disconnect any time now, and
    /// receives flushed by that are the unused rest of the ring, not a failure.
    pub closing: bool,
    size: usize,
    slots: usize,
}

impl Queue {
    /// Nothing posted yet, for `size`-byte messages received into `slots` DST slots.
    pub fn new(size: usize, slots: usize) -> Queue {
        Queue {
            outstanding: 0,
            recvs: 0,
            posted: 0,
            limit: u64::MAX,
            imm: None,
            closing: false,
            size,
            slots: slots.max(1),
        }
    }

    /// Posts receives until `upto` were posted (none beyond [`Queue::limit`]).
    pub fn post_recvs<E: Port>(&mut self, e: &mut E, upto: u64) -> Result<()> {
        while self.posted < upto.min(self.limit) {
            let off = e.dst_off(self.posted as usize % self.slots, self.size);
            e.post_recv(self.posted, off, self.size)?;
            self.posted += 1;
        }
        Ok(())
    }

    /// Posts `r` (signalled) and counts it.
    pub fn post<E: Port>(&mut self, e: &mut E, r: &Request) -> Result<()> {
        e.post(r)?;
        self.outstanding += 1;
        Ok(())
    }

    /// Polls `e` once: sends free queue slots; receives are checked (order, size, and with
    /// `want_stamp` the last byte of DST slot 0) and reposted; an RDMA WRITE with immediate
    /// leaves its data in [`Queue::imm`]. A mismatch is recorded in `bad` (a verification
    /// failure), an error status fails the run. Returns the completions seen.
    pub fn reap<E: Port>(
        &mut self,
        e: &mut E,
        wc: &mut [WorkCompletion],
        want_stamp: Option<u8>,
        bad: &mut Option<String>,
    ) -> Result<usize> {
        let n = e.poll(wc)?;
        let size = self.size;
        for w in &wc[..n] {
            match w.opcode {
                WcOpcode::Recv if self.closing && w.status == verbs::WcStatus::WrFlushErr => {}
                WcOpcode::Recv => {
                    check_ok(w, "receive")?;
                    if w.wr_id != self.recvs || w.byte_len as usize != size {
                        bad.get_or_insert(format!(
                            "receive {}: wr_id {} with {} bytes, want {size}",
                            self.recvs, w.wr_id, w.byte_len
                        ));
                    }
                    if let Some(want) = want_stamp {
                        let got = e.read_u8(e.dst_off(0, size) + size - 1)?;
                        if got != want {
                            bad.get_or_insert(format!(
                                "receive {}: last byte {got}, want stamp {want}",
                                self.recvs
                            ));
                        }
                    }
                    self.recvs += 1;
                    self.post_recvs(e, self.posted + 1)?;
                }
                WcOpcode::RecvRdmaWithImm => {
                    check_ok(w, "control message")?;
                    self.imm = Some(u32::from_be(w.imm_data));
                }
                _ => {
                    check_ok(w, "send")?;
                    self.outstanding = self.outstanding.saturating_sub(1);
                }
            }
        }
        Ok(n)
    }

    /// Makes room for one more signalled send (reaping, and waiting while the queue is full).
    pub fn room<E: Port, P: Pace>(
        &mut self,
        e: &mut E,
        wc: &mut [WorkCompletion],
        pace: &P,
        bad: &mut Option<String>,
    ) -> Result<()> {
        self.reap_below(e, wc, pace, bad, LAT_SQ, "send completion")
    }

    /// Waits until every signalled send completed.
    pub fn drain<E: Port, P: Pace>(
        &mut self,
        e: &mut E,
        wc: &mut [WorkCompletion],
        pace: &P,
        bad: &mut Option<String>,
    ) -> Result<()> {
        self.reap_below(e, wc, pace, bad, 1, "the last send completions")
    }

    /// With sends outstanding: reaps, then waits until fewer than `n` are.
    fn reap_below<E: Port, P: Pace>(
        &mut self,
        e: &mut E,
        wc: &mut [WorkCompletion],
        pace: &P,
        bad: &mut Option<String>,
        n: u32,
        what: &'static str,
    ) -> Result<()> {
        if self.outstanding == 0 {
            return Ok(());
        }
        // No receive is due on this side while it waits for its sends: no stamp to check.
        self.reap(e, wc, None, bad)?;
        let mut w = pace.wait(what);
        while self.outstanding >= n {
            w.relax()?;
            self.reap(e, wc, None, bad)?;
        }
        Ok(())
    }
}

/// The far end of a run as the client's loops see it.
pub trait Peer<E: Port> {
    /// The client posted the next ping (`send_lat`, `write_lat`): the far end answers it
    /// (driven from here until it did, when it is driven from here).
    fn answer(&mut self) -> Result<()>;
    /// The client's next READ (stamp `st`) comes: sets up what it must fetch into the last
    /// byte of the client's DST slot 0 and returns that byte.
    fn before_read(&mut self, c: &mut E, size: usize, st: u8) -> Result<u8>;
    /// One look at the far end during a bandwidth run of `limit` messages (`send_bw`'s
    /// receives); whether anything moved.
    fn serve(&mut self, limit: u64) -> Result<bool>;
    /// Whether the far end has all of the `limit` messages it must receive.
    fn received(&self, limit: u64) -> bool;
    /// The end of the run after `count` iterations: the far end's verdict.
    fn finish(&mut self, c: &mut E, count: u64) -> Result<Verdict>;
}

/// The passive end: answers the pings of `send_lat` and `write_lat`, keeps the receives of
/// `send_lat` and `send_bw` posted, and checks what arrived.
pub struct Responder {
    test: Test,
    size: usize,
    flags: SendFlags,
    /// Receives posted up front.
    ring: u64,
    /// Sends and receives.
    pub q: Queue,
    /// Pings answered.
    pub answered: u64,
    /// Messages may land out of order (EFA's SRD: a retransmitted SEND takes the receive
    /// posted next): `send_bw`'s check accepts any of the sender's slots in a DST slot.
    pub unordered: bool,
    bad: Option<String>,
    wc: [WorkCompletion; 64],
}

impl Responder {
    /// Prepares `e`'s buffer for `test` at `size` and posts the receives it keeps: `send_lat`'s
    /// ring, `send_bw`'s `rx_depth` (none beyond `limit`, the messages the client sends when
    /// known).
    pub fn new<E: Port>(
        e: &mut E,
        test: Test,
        size: usize,
        use_inline: bool,
        rx_depth: u32,
        limit: u64,
    ) -> Result<Responder> {
        let slots = if test.is_lat() { 1 } else { bw::slots(size) };
        e.prepare(size, slots)?;
        let ring = match test {
            Test::SendLat => u64::from(LAT_RQ),
            Test::SendBw => u64::from(rx_depth.max(1)),
            _ => 0,
        };
        let mut q = Queue::new(size, slots);
        q.limit = limit;
        q.post_recvs(e, ring)?;
        Ok(Responder {
            test,
            size,
            flags: if use_inline {
                SendFlags::SIGNALED | SendFlags::INLINE
            } else {
                SendFlags::SIGNALED
            },
            ring,
            q,
            answered: 0,
            unordered: false,
            bad: None,
            wc: [WorkCompletion::default(); 64],
        })
    }

    /// Whether it keeps receives posted (else a control message needs one of its own).
    pub fn has_ring(&self) -> bool {
        self.ring > 0
    }

    /// One look at `e`: answers a ping that arrived, else reaps completions (reposting
    /// receives). Whether anything moved.
    pub fn step<E: Port, P: Pace>(&mut self, e: &mut E, pace: &P) -> Result<bool> {
        let (test, size) = (self.test, self.size);
        let st = lat::stamp(self.answered);
        // write_lat: the client's WRITE shows in the last byte.
        let mut ping = test == Test::WriteLat && e.read_u8(e.dst_off(0, size) + size - 1)? == st;
        let mut moved = ping;
        if !ping {
            let want = (test == Test::SendLat).then_some(st);
            moved = self.q.reap(e, &mut self.wc, want, &mut self.bad)? > 0;
            ping = test == Test::SendLat && self.q.recvs > self.answered;
        }
        if ping {
            // The pong, stamped as the ping was.
            self.q.room(e, &mut self.wc, pace, &mut self.bad)?;
            e.stamp(size, st)?;
            let r = Request::new(self.answered, WrOpcode::Send, self.flags, 0, size);
            let r = if test == Test::SendLat {
                r
            } else {
                let (addr, rkey) = e.peer_dst(0, size);
                Request {
                    opcode: WrOpcode::RdmaWrite,
                    ..r.to(Target::Rdma(addr, rkey))
                }
            };
            self.q.post(e, &r)?;
            self.answered += 1;
        }
        Ok(moved)
    }

    /// Waits for the last sends; then the verdict on `count` iterations (the client's count):
    /// what the loop found, the counts, and what `e`'s buffer holds.
    pub fn finish<E: Port, P: Pace>(&mut self, e: &mut E, pace: &P, count: u64) -> Result<Verdict> {
        self.q.drain(e, &mut self.wc, pace, &mut self.bad)?;
        if let Some(b) = self.bad.take() {
            return Ok(Err(b));
        }
        let (answered, received) = (self.answered, self.q.recvs);
        if matches!(self.test, Test::SendLat | Test::WriteLat) && count != answered {
            return Ok(Err(format!(
                "{answered} pings answered, the client counted {count}"
            )));
        }
        if self.test == Test::SendBw && received != count {
            return Ok(Err(format!(
                "{received} messages received, the client sent {count}"
            )));
        }
        if self.unordered && self.test == Test::SendBw {
            return Ok(check_unordered(e, self.size, count));
        }
        Ok(check(e, self.test, self.size, count))
    }

    /// Waits for the last sends (a control message's).
    pub fn drain<E: Port, P: Pace>(&mut self, e: &mut E, pace: &P) -> Result<()> {
        self.q.drain(e, &mut self.wc, pace, &mut self.bad)
    }
}

/// `send_bw`'s check on an unordered transport after `count` messages: each DST slot a
/// receive used holds, whole, one of the slots the client sends from (which one depends on
/// the order the messages arrived in).
pub fn check_unordered<E: Port>(e: &E, size: usize, count: u64) -> Verdict {
    let slots = bw::slots(size);
    let sums: Vec<u64> = (0..slots)
        .map(|slot| fnv1a(&e.peer_pattern(size, slot)))
        .collect();
    let used = slots.min(usize::try_from(count).unwrap_or(usize::MAX));
    for slot in 0..used {
        let got = e
            .read(e.dst_off(slot, size), size)
            .map_err(|x| x.to_string())?;
        let sum = fnv1a(&got);
        match sums.iter().position(|&s| s == sum) {
            Some(k) if got == e.peer_pattern(size, k) => {}
            _ => {
                // Report it against the slot in order, the likeliest.
                compare(
                    &got,
                    &e.peer_pattern(size, slot),
                    &format!(
                        "client -> server, slot {slot} (unordered: no slot of the client matches)"
                    ),
                )?;
            }
        }
    }
    Ok(())
}

/// The passive end's check of its buffer after `count` iterations of `test` at `size`.
pub fn check<E: Port>(e: &E, test: Test, size: usize, count: u64) -> Verdict {
    let read = |off: usize, len: usize| e.read(off, len).map_err(|x| x.to_string());
    match test {
        Test::SendLat | Test::WriteLat => {
            let mut want = e.peer_pattern(size, 0);
            want[size - 1] = lat::stamp(count.saturating_sub(1));
            compare(&read(e.dst_off(0, size), size)?, &want, "client -> server")
        }
        Test::AtomicLat => {
            let v = read(e.dst_off(0, 8), 8)?;
            let got = u64::from_be_bytes(v.try_into().map_err(|_| "short read".to_string())?);
            if got == count {
                Ok(())
            } else {
                Err(format!(
                    "the counter holds {got} after {count} fetch-and-adds of 1"
                ))
            }
        }
        Test::SendBw | Test::WriteBw => {
            let used = bw::slots(size).min(usize::try_from(count).unwrap_or(usize::MAX));
            for slot in 0..used {
                compare(
                    &read(e.dst_off(slot, size), size)?,
                    &e.peer_pattern(size, slot),
                    &format!("client -> server, slot {slot}"),
                )?;
            }
            Ok(())
        }
        // READs leave the responder's memory alone: SRC must still hold what it put there.
        Test::ReadLat | Test::ReadBw => {
            let used = if test.is_lat() { 1 } else { bw::slots(size) };
            compare(
                &read(0, used * size)?,
                &e.buf().mirror[..used * size],
                "server SRC after READs",
            )
        }
    }
}

#[cfg(all(test, feature = "emulator"))]
mod tests {
    use super::*;
    use crate::bw::{self, BwConfig};
    use crate::cli::Plan;
    use crate::progress::Progress;
    use crate::setup::{Pair, QpConfig};

    #[test]
    fn send_bw_on_an_unordered_transport_takes_the_clients_slots_in_any_order() {
        let size = 256;
        let qp = QpConfig {
            sq: 8,
            rq: 8,
            inline: 0,
            mtu: None,
        };
        let mut pair = Pair::new(bw::slots(size) * size, &qp, 1).unwrap();
        {
            let s = &mut pair.lanes[0].1;
            let put = |s: &mut crate::setup::End<_>, slot: usize, from: usize| {
                let data = s.peer_pattern(size, from);
                let at = s.dst_off(slot, size);
                s.buf.mem.write(at, &data).unwrap();
            };
            // In order: both checks pass.
            put(s, 0, 0);
            put(s, 1, 1);
            assert_eq!(check(s, Test::SendBw, size, 2), Ok(()));
            assert_eq!(check_unordered(s, size, 2), Ok(()));
            // The two messages swapped (a retransmitted one took the next receive).
            put(s, 0, 1);
            put(s, 1, 0);
            assert!(check(s, Test::SendBw, size, 2).is_err());
            assert_eq!(check_unordered(s, size, 2), Ok(()));
            // A byte that no slot of the client holds there fails either way.
            let at = s.dst_off(1, size) + 7;
            let b = s.buf.mem.read_u8(at).unwrap();
            s.buf.mem.write_u8(at, !b).unwrap();
            let e = check_unordered(s, size, 2).unwrap_err();
            assert!(e.contains("slot 1 (unordered"), "{e}");
            // Slots beyond the messages counted are not looked at.
            assert_eq!(check_unordered(s, size, 1), Ok(()));
        }
        pair.teardown().unwrap();
    }

    #[test]
    fn the_responder_holds_the_clients_count_against_its_own() {
        for test in [Test::SendLat, Test::WriteLat, Test::SendBw] {
            let size = 64;
            let qp = QpConfig {
                sq: 32,
                rq: 32,
                inline: 0,
                mtu: None,
            };
            let mut pair = Pair::new(bw::slots(size) * size, &qp, 1).unwrap();
            let mut p = Progress::with_terminal(vec![1.0], false);
            let plan = Plan::Iters(20);
            let (c, mut near, world) = pair.split(test, size, false, 32, 20).unwrap();
            let verified = if test.is_lat() {
                lat::measure(c, &mut near, world, test, size, plan, false, &mut p)
                    .unwrap()
                    .verified
            } else {
                let cfg = BwConfig::new(16, 4, 0);
                bw::measure(c, &mut near, world, test, size, plan, cfg, &mut p)
                    .unwrap()
                    .verified
            };
            assert_eq!(verified, Ok(()), "{test:?}");
            assert_eq!(near.finish(c, 20).unwrap(), Ok(()), "{test:?}");
            let e = near.finish(c, 21).unwrap().unwrap_err();
            let want = if test.is_lat() {
                "20 pings answered, the client counted 21"
            } else {
                "20 messages received, the client sent 21"
            };
            assert_eq!(e, want, "{test:?}");
            drop(near);
            pair.teardown().unwrap();
        }
    }
}
