//! Bandwidth tests, as perftest runs them: the client keeps `tx_depth` requests in flight,
//! signals one in `cq_mod` (and the last), and records when each request was posted and when
//! the signalled completion covering it was seen. `send_bw`'s server keeps receives posted
//! and reposts each as it completes (in this same thread).
//!
//! Requests cycle over a few message-sized slots (up to 16, within 1 MiB); after the run each
//! slot that was a target is compared with the source slot that fed it.

use std::time::Instant;

use verbs::{RemoteOp, SendFlags, SendWr, WcOpcode, WorkCompletion, WrOpcode};

use crate::cli::{Plan, Test};
use crate::progress::Progress;
use crate::setup::{End, Error, Pair, Result, Watchdog, check_ok, compare, post_send};

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

/// Runs `test` (a bandwidth test) at `size` on `pair`.
pub fn run(
    pair: &mut Pair,
    test: Test,
    size: usize,
    plan: Plan,
    cfg: BwConfig,
    progress: &mut Progress,
) -> Result<BwRun> {
    let Pair { world, c, s, .. } = pair;
    let nslots = slots(size);
    c.prepare(size, nslots)?;
    s.prepare(size, nslots)?;
    let use_inline = cfg.inline as usize >= size && test.can_inline();
    let depth = u64::from(cfg.tx_depth);
    let cq_mod = u64::from(cfg.cq_mod.clamp(1, cfg.tx_depth));
    let (opcode, wc_opcode) = match test {
        Test::SendBw => (WrOpcode::Send, WcOpcode::Send),
        Test::WriteBw => (WrOpcode::RdmaWrite, WcOpcode::RdmaWrite),
        Test::ReadBw => (WrOpcode::RdmaRead, WcOpcode::RdmaRead),
        _ => unreachable!("bandwidth tests only"),
    };
    // Messages to send: known up front, or fixed once the duration has passed.
    let (mut limit, cap) = match plan {
        Plan::Iters(n) => (n, n.min(1 << 26) as usize),
        Plan::Duration(_) => (u64::MAX, 1 << 16),
    };
    let mut posted: Vec<u64> = Vec::with_capacity(cap);
    let mut completed: Vec<u64> = Vec::with_capacity(cap);
    let mut wc = [WorkCompletion::default(); 64];
    let mut bad: Option<String> = None;

    // send_bw: the server's receives, wr_id = sequence number, slot = sequence % slots.
    let rx_depth = u64::from(cfg.rx_depth);
    let (mut rposted, mut rdone) = (0u64, 0u64);
    if test == Test::SendBw {
        while rposted < rx_depth.min(limit) {
            let sge = s.sge(s.dst_off(rposted as usize % nslots, size), size);
            s.post_recv(rposted, sge)?;
            rposted += 1;
        }
    }

    let (mut scnt, mut ccnt) = (0u64, 0u64);
    let mut last_signaled = false;
    let mut wd = Watchdog::new(world, "bandwidth completions");
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
            let (local, remote) = match test {
                Test::ReadBw => (
                    c.sge(c.dst_off(slot, size), size),
                    s.remote(End::src_off(slot, size)),
                ),
                _ => (
                    c.sge(End::src_off(slot, size), size),
                    s.remote(s.dst_off(slot, size)),
                ),
            };
            let sg = [local];
            let mut wr = SendWr {
                wr_id: scnt,
                opcode,
                flags,
                sg_list: &sg,
                remote: if test == Test::SendBw {
                    RemoteOp::None
                } else {
                    RemoteOp::Rdma {
                        remote_addr: remote.0,
                        rkey: remote.1,
                    }
                },
                ..SendWr::default()
            };
            if use_inline {
                flags |= SendFlags::INLINE;
                wr.flags = flags;
                wr.sg_list = &[];
                wr.inline_data = &c.mirror[slot * size..(slot + 1) * size];
            }
            post_send(&c.dev, &mut c.qp, wr)?;
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
            wd.progress(world);
        }

        // The server's receives.
        if test == Test::SendBw {
            let m = s.poll(&mut wc)?;
            for w in &wc[..m] {
                check_ok(w, "receive")?;
                if w.opcode != WcOpcode::Recv || w.wr_id != rdone || w.byte_len as usize != size {
                    bad.get_or_insert(format!(
                        "receive {rdone}: wr_id {} opcode {:?} {} bytes, want {size}",
                        w.wr_id, w.opcode, w.byte_len
                    ));
                }
                rdone += 1;
                if rposted < limit {
                    let sge = s.sge(s.dst_off(rposted as usize % nslots, size), size);
                    s.post_recv(rposted, sge)?;
                    rposted += 1;
                }
            }
            if m > 0 {
                wd.progress(world);
            }
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
        let recv_done = test != Test::SendBw || rdone >= limit;
        if ccnt == limit && recv_done {
            break;
        }
        wd.relax(world)?;
    }

    let count = limit as usize;
    let verified = match bad {
        Some(b) => Err(b),
        None => verify(test, c, s, size, nslots.min(count)),
    };
    Ok(BwRun {
        posted,
        completed,
        verified,
    })
}

/// Compares every slot that was a target with the slot that fed it.
fn verify(
    test: Test,
    c: &End,
    s: &End,
    size: usize,
    used: usize,
) -> std::result::Result<(), String> {
    for slot in 0..used {
        let range = slot * size..(slot + 1) * size;
        let (dst, src, what) = if test == Test::ReadBw {
            (c, s, "server -> client (READ)")
        } else {
            (s, c, "client -> server")
        };
        let got = dst
            .read(dst.dst_off(slot, size), size)
            .map_err(|e| e.to_string())?;
        compare(&got, &src.mirror[range], &format!("{what}, slot {slot}"))?;
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

    #[test]
    fn a_run_verifies_and_a_corrupted_target_does_not() {
        use crate::setup::QpConfig;
        let size = 4096;
        for test in [Test::WriteBw, Test::SendBw, Test::ReadBw] {
            let qp = QpConfig {
                sq: 16,
                rq: 32,
                inline: 0,
                mtu: None,
            };
            let mut pair = Pair::new(slots(size) * size, &qp).unwrap();
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
                &pair.c
            } else {
                &pair.s
            };
            let off = target.dst_off(3, size) + 17;
            let b = target.mem.read_u8(off).unwrap();
            target.mem.write_u8(off, !b).unwrap();
            let e = verify(test, &pair.c, &pair.s, size, slots(size)).unwrap_err();
            assert!(e.contains("slot 3") && e.contains("byte 17"), "{e}");
            pair.teardown().unwrap();
        }
    }
}
