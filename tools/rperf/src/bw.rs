//! Bandwidth tests, as perftest runs them: the client keeps `tx_depth` requests in flight,
//! signals one in `cq_mod` (and the last), and records when each request was posted and when
//! the signalled completion covering it was seen. `send_bw`'s server keeps receives posted
//! and reposts each as it completes (in this same thread in the embedded mode, [`run`]; in its
//! own process in the two-process mode). [`measure`] is the client's loop in both modes.
//!
//! Requests cycle over a few message-sized slots (up to 16, within 1 MiB); after the run each
//! slot that was a target is compared with the source slot that fed it.

use std::time::Instant;

use verbs::{SendFlags, WcOpcode, WorkCompletion, WrOpcode};

use crate::cli::{Plan, Test};
use crate::port::{Pace, Port, Request, Target, Wait};
use crate::progress::Progress;
use crate::serve::Peer;
#[cfg(feature = "emulator")]
use crate::setup::Pair;
use crate::setup::{Error, Result, check_ok, compare};

/// Slots of one side fit in this many bytes (at least one slot).
const SLOT_BUDGET: usize = 1 << 20;
/// At most this many slots.
const MAX_SLOTS: usize = 16;
/// Receives the `send_bw` server keeps posted (perftest's `rx_depth`), at least the depth.
pub const RX_DEPTH: u32 = 512;

/// Number of buffer slots for `size`-byte messages.
pub fn slots(size: usize) -> usize {
    (SLOT_BUDGET / size).clamp(1, MAX_SLOTS)
}

/// The outcome of one bandwidth run.
#[derive(Debug)]
pub struct BwRun {
    /// When each message was posted, ns from the start.
    pub posted: Vec<u64>,
    /// When each message's completion was seen, ns from the start.
    pub completed: Vec<u64>,
    /// `Ok` when every check passed, else the first failure.
    pub verified: std::result::Result<(), String>,
}

/// Knobs of a bandwidth run.
#[derive(Clone, Copy, Debug)]
pub struct BwConfig {
    /// Requests in flight.
    pub tx_depth: u32,
    /// Signal one request in this many.
    pub cq_mod: u32,
    /// Send messages up to this size inline.
    pub inline: u32,
    /// Receives kept posted (`send_bw`).
    pub rx_depth: u32,
}

impl BwConfig {
    /// The knobs of `test` with `tx_depth` requests in flight, one signalled in `cq_mod`, and
    /// messages up to `inline` bytes inline.
    pub fn new(tx_depth: u32, cq_mod: u32, inline: u32) -> BwConfig {
        BwConfig {
            tx_depth,
            cq_mod,
            inline,
            rx_depth: RX_DEPTH.max(tx_depth),
        }
    }
}

#[cfg(feature = "emulator")]
/// Runs `test` (a bandwidth test) at `size` on `pair`: the client's loop with the server
/// driven from this thread.
pub fn run<D: device_open::Device>(
    pair: &mut Pair<D>,
    test: Test,
    size: usize,
    plan: Plan,
    cfg: BwConfig,
    progress: &mut Progress,
) -> Result<BwRun> {
    let use_inline = test.inline_at(cfg.inline, size);
    let (c, mut near, world) = pair.split(test, size, use_inline, cfg.rx_depth, plan.count())?;
    measure(c, &mut near, world, test, size, plan, cfg, progress)
}

/// The client's loop of `test` (a bandwidth test) at `size` on `c`, whose far end is `peer`;
/// after the run, what READs brought here is compared with what the peer holds, and the
/// peer's verdict is added.
#[allow(clippy::too_many_arguments)]
pub fn measure<E: Port, P: Pace, A: Peer<E>>(
    c: &mut E,
    peer: &mut A,
    pace: &P,
    test: Test,
    size: usize,
    plan: Plan,
    cfg: BwConfig,
    progress: &mut Progress,
) -> Result<BwRun> {
    let nslots = slots(size);
    c.prepare(size, nslots)?;
    let use_inline = test.inline_at(cfg.inline, size);
    let depth = u64::from(cfg.tx_depth);
    let cq_mod = u64::from(cfg.cq_mod.clamp(1, cfg.tx_depth));
    let (opcode, wc_opcode) = match test {
        Test::SendBw => (WrOpcode::Send, WcOpcode::Send),
        Test::WriteBw => (WrOpcode::RdmaWrite, WcOpcode::RdmaWrite),
        Test::ReadBw => (WrOpcode::RdmaRead, WcOpcode::RdmaRead),
        _ => unreachable!("bandwidth tests only"),
    };
    // Messages to send: known up front, or fixed once the duration has passed.
    let mut limit = plan.count();
    let cap = match plan {
        Plan::Iters(n) => n.min(1 << 26) as usize,
        Plan::Duration(_) => 1 << 16,
    };
    let mut posted: Vec<u64> = Vec::with_capacity(cap);
    let mut completed: Vec<u64> = Vec::with_capacity(cap);
    let mut wc = [WorkCompletion::default(); 64];

    let (mut scnt, mut ccnt) = (0u64, 0u64);
    let mut last_signaled = false;
    let mut wd = pace.wait("bandwidth completions");
    let start = Instant::now();
    loop {
        // Fill the window.
        while scnt < limit && scnt - ccnt < depth {
            let slot = scnt as usize % nslots;
            let signaled = (scnt + 1) % cq_mod == 0 || scnt + 1 == limit;
            let mut flags = if signaled {
                SendFlags::SIGNALED
            } else {
                SendFlags::empty()
            };
            if use_inline {
                flags |= SendFlags::INLINE;
            }
            let r = match test {
                Test::ReadBw => {
                    let (addr, rkey) = c.peer_src(slot, size);
                    Request::new(scnt, opcode, flags, c.dst_off(slot, size), size)
                        .to(Target::Rdma(addr, rkey))
                }
                Test::SendBw => Request::new(scnt, opcode, flags, slot * size, size),
                _ => {
                    let (addr, rkey) = c.peer_dst(slot, size);
                    Request::new(scnt, opcode, flags, slot * size, size)
                        .to(Target::Rdma(addr, rkey))
                }
            };
            c.post(&r)?;
            posted.push(start.elapsed().as_nanos() as u64);
            last_signaled = signaled;
            scnt += 1;
        }

        // The client's completions.
        let n = c.poll(&mut wc)?;
        if n > 0 {
            let t = start.elapsed().as_nanos() as u64;
            for w in &wc[..n] {
                check_ok(w, "bandwidth request")?;
                let seq = w.wr_id;
                let len_ok = test != Test::ReadBw || w.byte_len as usize == size;
                if w.opcode != wc_opcode || seq < ccnt || seq >= scnt || !len_ok {
                    return Err(Error::Completion {
                        what: "the next signalled request",
                        wc: *w,
                    });
                }
                completed.resize(seq as usize + 1, t);
                ccnt = seq + 1;
            }
            wd.progress();
        }

        // The far end's receives (send_bw, when it is driven from here).
        if peer.serve(limit)? {
            wd.progress();
        }

        let now = Instant::now();
        match plan {
            Plan::Iters(total) => progress.update(now, ccnt as f64 / total as f64),
            Plan::Duration(d) => {
                let f = now.duration_since(start).as_secs_f64() / d.as_secs_f64();
                progress.update(now, f);
                if limit == u64::MAX && f >= 1.0 && scnt > 0 {
                    // Stop: the last request posted must be signalled, or one more is.
                    limit = if last_signaled { scnt } else { scnt + 1 };
                }
            }
        }
        if ccnt == limit && peer.received(limit) {
            break;
        }
        wd.relax()?;
    }

    let mine = if test == Test::ReadBw {
        verify_reads(c, size, nslots.min(limit as usize))
    } else {
        Ok(())
    };
    let theirs = peer.finish(c, completed.len() as u64)?;
    Ok(BwRun {
        posted,
        completed,
        verified: mine.and(theirs),
    })
}

/// Compares the first `used` DST slots of `c` with the peer's SRC slots its READs fetched.
fn verify_reads<E: Port>(c: &E, size: usize, used: usize) -> std::result::Result<(), String> {
    for slot in 0..used {
        // SAFETY: called once every READ posted completed (the loop above waited for all of
        // them): the device wrote the DST slots and is done with them, the peer does not write
        // them in a READ test, and nothing is posted while this runs.
        let got =
            unsafe { c.read_completed(c.dst_off(slot, size), size) }.map_err(|e| e.to_string())?;
        compare(
            &got,
            &c.peer_pattern(size, slot),
            &format!("server -> client (READ), slot {slot}"),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_counts() {
        assert_eq!(slots(2), 16);
        assert_eq!(slots(65536), 16);
        assert_eq!(slots(1 << 18), 4);
        assert_eq!(slots(8 << 20), 1);
    }

    #[cfg(feature = "emulator")]
    #[test]
    fn a_run_verifies_and_a_corrupted_target_does_not() {
        use crate::port::Port;
        use crate::setup::QpConfig;
        let size = 4096;
        for test in [Test::WriteBw, Test::SendBw, Test::ReadBw] {
            let qp = QpConfig {
                sq: 16,
                rq: 32,
                inline: 0,
                mtu: None,
            };
            let mut pair = Pair::new(slots(size) * size, &qp, 1).unwrap();
            let mut p = Progress::with_terminal(vec![1.0], false);
            let cfg = BwConfig {
                tx_depth: 16,
                cq_mod: 5,
                inline: 0,
                rx_depth: 32,
            };
            let r = run(&mut pair, test, size, Plan::Iters(100), cfg, &mut p).unwrap();
            assert_eq!(r.verified, Ok(()), "{test:?}");
            assert_eq!((r.posted.len(), r.completed.len()), (100, 100));
            assert!(r.posted.iter().zip(&r.completed).all(|(p, c)| p < c));
            // One flipped byte in a target slot is found.
            let target = if test == Test::ReadBw {
                &pair.lanes[0].0
            } else {
                &pair.lanes[0].1
            };
            let off = target.dst_off(3, size) + 17;
            let b = target.buf.mem.read_u8(off).unwrap();
            target.buf.mem.write_u8(off, !b).unwrap();
            let e = if test == Test::ReadBw {
                verify_reads(&pair.lanes[0].0, size, slots(size))
            } else {
                crate::serve::check(&pair.lanes[0].1, test, size, 100)
            }
            .unwrap_err();
            assert!(e.contains("slot 3") && e.contains("byte 17"), "{e}");
            pair.teardown().unwrap();
        }
    }
}
