//! Latency tests, as perftest runs them, with both ends driven from this thread:
//! - `send_lat`: SEND/RECV ping-pong; each side waits for the receive completion, then answers;
//! - `write_lat`: RDMA WRITE ping-pong; each side polls the last byte of its buffer until the
//!   peer's write changes it (perftest's method: no receive, no completion on the target);
//! - `read_lat`: RDMA READ round trips;
//! - `atomic_lat`: fetch-and-add round trips.
//!
//! One sample per iteration, wall-clock; the ping-pong tests report half the round trip. Each
//! iteration stamps the last byte of the message (1..=255, never the same twice running); the
//! receiver checks the stamp, and after the run the whole buffer that arrived is compared with
//! what was sent.

use std::time::Instant;

use verbs::{RemoteOp, SendFlags, SendWr, WcOpcode, WorkCompletion, WrOpcode};

use crate::cli::{Plan, Test};
use crate::progress::Progress;
use crate::setup::{End, Error, Pair, Result, Watchdog, check_ok, compare, post_send};

/// Send queue depth of the latency QPs (one request in flight; room to reap lazily).
pub const LAT_SQ: u32 = 16;
/// Receive queue depth of the latency QPs (`send_lat`).
pub const LAT_RQ: u32 = 16;

/// The outcome of one latency run.
#[derive(Debug)]
pub struct LatRun {
    /// Message size.
    pub size: usize,
    /// One latency per iteration in µs (half round trips for the ping-pong tests).
    pub samples_us: Vec<f64>,
    /// `Ok` when every check passed, else the first failure.
    pub verified: std::result::Result<(), String>,
}

/// The stamp of iteration `i`: 1..=255, consecutive ones differ, never the zero a cleared
/// buffer holds.
pub(crate) fn stamp(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Per-side bookkeeping of signalled sends and posted receives.
#[derive(Default)]
struct Side {
    /// Signalled send requests not completed yet.
    outstanding: u32,
    /// Receives completed.
    recvs: u64,
    /// Receives posted (their `wr_id`s are 0, 1, ...).
    posted: u64,
}

/// Reaps `end`'s completions: sends free queue slots; receives are checked (size, stamp,
/// order) and reposted. Returns the number of receives. A stamp or order mismatch is recorded
/// in `bad` (a verification failure), an error status fails the run.
fn reap(
    end: &mut End,
    side: &mut Side,
    wc: &mut [WorkCompletion],
    size: usize,
    want_stamp: u8,
    bad: &mut Option<String>,
) -> Result<u32> {
    let n = end.poll(wc)?;
    let mut recvs = 0;
    for w in &wc[..n] {
        if w.opcode == WcOpcode::Recv {
            check_ok(w, "receive")?;
            if w.wr_id != side.recvs || w.byte_len as usize != size {
                bad.get_or_insert(format!(
                    "receive {} completed as wr_id {} with {} bytes, want {size}",
                    side.recvs, w.wr_id, w.byte_len
                ));
            }
            let got = end
                .mem
                .read_u8(end.dst_off(0, size) + size - 1)
                .map_err(|err| Error::Dma {
                    what: "read stamp",
                    err,
                })?;
            if got != want_stamp {
                bad.get_or_insert(format!(
                    "receive {}: last byte {got}, want stamp {want_stamp}",
                    side.recvs
                ));
            }
            side.recvs += 1;
            recvs += 1;
            let sge = end.sge(end.dst_off(0, size), size);
            end.post_recv(side.posted, sge)?;
            side.posted += 1;
        } else {
            check_ok(w, "send")?;
            side.outstanding = side.outstanding.saturating_sub(1);
        }
    }
    Ok(recvs)
}

/// Makes room for one more signalled send on `end` (reaping, and waiting if the queue is full).
fn room(
    world: &nic_testbed::World,
    end: &mut End,
    side: &mut Side,
    wc: &mut [WorkCompletion],
    size: usize,
    bad: &mut Option<String>,
) -> Result<()> {
    if side.outstanding == 0 {
        return Ok(());
    }
    // The stamp is irrelevant here: no receive is due on this side while it is about to send.
    reap(end, side, wc, size, 0, bad)?;
    let wd = Watchdog::new(world, "send completion");
    while side.outstanding >= LAT_SQ {
        wd.relax(world)?;
        reap(end, side, wc, size, 0, bad)?;
    }
    Ok(())
}

/// Whether the loop goes on after `i` iterations started at `start`; the fraction done.
pub(crate) fn more(plan: Plan, i: u64, start: Instant, now: Instant) -> (bool, f64) {
    match plan {
        Plan::Iters(n) => (i < n, i as f64 / n as f64),
        Plan::Duration(d) => {
            let f = now.duration_since(start).as_secs_f64() / d.as_secs_f64();
            (i == 0 || f < 1.0, f)
        }
    }
}

/// Runs `test` (a latency test) at `size` on `pair`.
pub fn run(
    pair: &mut Pair,
    test: Test,
    size: usize,
    plan: Plan,
    inline: u32,
    progress: &mut Progress,
) -> Result<LatRun> {
    let Pair { world, c, s, .. } = pair;
    c.prepare(size, 1)?;
    s.prepare(size, 1)?;
    let use_inline = inline as usize >= size && test.can_inline();
    let mut wc = [WorkCompletion::default(); 16];
    let (mut cs, mut ss) = (Side::default(), Side::default());
    let mut bad: Option<String> = None;
    if test == Test::SendLat {
        for (end, side) in [(&mut *c, &mut cs), (&mut *s, &mut ss)] {
            for _ in 0..LAT_RQ {
                let sge = end.sge(end.dst_off(0, size), size);
                end.post_recv(side.posted, sge)?;
                side.posted += 1;
            }
        }
    }
    let flags = if use_inline {
        SendFlags::SIGNALED | SendFlags::INLINE
    } else {
        SendFlags::SIGNALED
    };
    let mut samples = Vec::with_capacity(match plan {
        Plan::Iters(n) => n.min(1 << 24) as usize,
        Plan::Duration(_) => 1 << 16,
    });
    let start = Instant::now();
    let mut now = start;
    let mut i = 0u64;
    loop {
        let (go, frac) = more(plan, i, start, now);
        if !go {
            break;
        }
        progress.update(now, frac);
        let st = stamp(i);
        let t0 = Instant::now();
        match test {
            Test::SendLat | Test::WriteLat => {
                // There and back: c -> s, then s -> c.
                for dir in 0..2 {
                    let (from, fs, to, ts) = if dir == 0 {
                        (&mut *c, &mut cs, &mut *s, &mut ss)
                    } else {
                        (&mut *s, &mut ss, &mut *c, &mut cs)
                    };
                    room(world, from, fs, &mut wc, size, &mut bad)?;
                    from.stamp(size, st)?;
                    let (opcode, remote) = if test == Test::SendLat {
                        (WrOpcode::Send, RemoteOp::None)
                    } else {
                        let (remote_addr, rkey) = to.remote(to.dst_off(0, size));
                        (WrOpcode::RdmaWrite, RemoteOp::Rdma { remote_addr, rkey })
                    };
                    let sg = [from.sge(End::src_off(0, size), size)];
                    let wr = SendWr {
                        wr_id: i,
                        opcode,
                        flags,
                        sg_list: if use_inline { &[] } else { &sg },
                        inline_data: if use_inline {
                            &from.mirror[..size]
                        } else {
                            &[]
                        },
                        remote,
                        ..SendWr::default()
                    };
                    post_send(&from.dev, &mut from.qp, wr)?;
                    fs.outstanding += 1;
                    let wd = Watchdog::new(world, "the peer's message");
                    if test == Test::SendLat {
                        while reap(to, ts, &mut wc, size, st, &mut bad)? == 0 {
                            wd.relax(world)?;
                        }
                    } else {
                        let at = to.dst_off(0, size) + size - 1;
                        while to.mem.read_u8(at).map_err(|err| Error::Dma {
                            what: "poll the last byte",
                            err,
                        })? != st
                        {
                            wd.relax(world)?;
                        }
                    }
                }
            }
            Test::ReadLat | Test::AtomicLat => {
                let wr = if test == Test::ReadLat {
                    // A new stamp in the server's memory each time: every READ must fetch it.
                    s.stamp(size, st)?;
                    let (remote_addr, rkey) = s.remote(End::src_off(0, size));
                    SendWr {
                        wr_id: i,
                        opcode: WrOpcode::RdmaRead,
                        flags: SendFlags::SIGNALED,
                        remote: RemoteOp::Rdma { remote_addr, rkey },
                        ..SendWr::default()
                    }
                } else {
                    let (remote_addr, rkey) = s.remote(s.dst_off(0, size));
                    SendWr {
                        wr_id: i,
                        opcode: WrOpcode::AtomicFetchAndAdd,
                        flags: SendFlags::SIGNALED,
                        remote: RemoteOp::Atomic {
                            remote_addr,
                            rkey,
                            compare_add: 1,
                            swap: 0,
                        },
                        ..SendWr::default()
                    }
                };
                let sg = [c.sge(c.dst_off(0, size), size)];
                post_send(&c.dev, &mut c.qp, SendWr { sg_list: &sg, ..wr })?;
                let wd = Watchdog::new(world, "READ / atomic completion");
                let w = loop {
                    if c.poll(&mut wc[..1])? == 1 {
                        break wc[0];
                    }
                    wd.relax(world)?;
                };
                let (what, opcode) = if test == Test::ReadLat {
                    ("RDMA READ", WcOpcode::RdmaRead)
                } else {
                    ("fetch-and-add", WcOpcode::FetchAdd)
                };
                check_ok(&w, what)?;
                if w.wr_id != i || w.opcode != opcode || w.byte_len as usize != size {
                    return Err(Error::Completion { what, wc: w });
                }
                let dma = |err| Error::Dma {
                    what: "read the result",
                    err,
                };
                let at = c.dst_off(0, size);
                if test == Test::ReadLat {
                    let got = c.mem.read_u8(at + size - 1).map_err(dma)?;
                    if got != st {
                        bad.get_or_insert(format!("READ {i}: last byte {got}, want stamp {st}"));
                    }
                } else {
                    let got = c.mem.read_be64(at).map_err(dma)?;
                    if got != i {
                        bad.get_or_insert(format!("fetch-and-add {i} returned {got}, want {i}"));
                    }
                }
            }
            _ => unreachable!("latency tests only"),
        }
        now = Instant::now();
        samples.push(now.duration_since(t0).as_secs_f64() * 1e6 / test.rtt_divisor());
        i += 1;
    }
    // Let the last completions in (the responder's ACKs), then check what arrived.
    drain(world, c, &mut cs, &mut wc, size, &mut bad)?;
    drain(world, s, &mut ss, &mut wc, size, &mut bad)?;
    let verified = match bad {
        Some(b) => Err(b),
        None => verify(test, c, s, size, i),
    };
    Ok(LatRun {
        size,
        samples_us: samples,
        verified,
    })
}

/// Waits until every signalled send of `end` completed.
fn drain(
    world: &nic_testbed::World,
    end: &mut End,
    side: &mut Side,
    wc: &mut [WorkCompletion],
    size: usize,
    bad: &mut Option<String>,
) -> Result<()> {
    let wd = Watchdog::new(world, "the last send completions");
    while side.outstanding > 0 {
        reap(end, side, wc, size, 0, bad)?;
        if side.outstanding > 0 {
            wd.relax(world)?;
        }
    }
    Ok(())
}

/// Compares what arrived with what was sent, after `iters` iterations.
fn verify(
    test: Test,
    c: &End,
    s: &End,
    size: usize,
    iters: u64,
) -> std::result::Result<(), String> {
    let read = |e: &End, off: usize, len: usize| e.read(off, len).map_err(|x| x.to_string());
    match test {
        Test::SendLat | Test::WriteLat => {
            compare(
                &read(s, s.dst_off(0, size), size)?,
                &c.mirror[..size],
                "client -> server",
            )?;
            compare(
                &read(c, c.dst_off(0, size), size)?,
                &s.mirror[..size],
                "server -> client",
            )
        }
        Test::ReadLat => compare(
            &read(c, c.dst_off(0, size), size)?,
            &s.mirror[..size],
            "server -> client (READ)",
        ),
        Test::AtomicLat => {
            let v = read(s, s.dst_off(0, 8), 8)?;
            let got = u64::from_be_bytes(v.try_into().map_err(|_| "short read".to_string())?);
            if got == iters {
                Ok(())
            } else {
                Err(format!(
                    "the counter holds {got} after {iters} fetch-and-adds of 1"
                ))
            }
        }
        _ => unreachable!("latency tests only"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_never_repeat_back_to_back_nor_are_zero() {
        for i in 0..1000 {
            assert_ne!(stamp(i), 0);
            assert_ne!(stamp(i), stamp(i + 1));
        }
    }

    #[test]
    fn runs_verify_and_corruption_is_found() {
        use crate::setup::QpConfig;
        for (test, size) in [
            (Test::SendLat, 100),
            (Test::WriteLat, 300),
            (Test::ReadLat, 64),
            (Test::AtomicLat, 8),
        ] {
            let qp = QpConfig {
                sq: LAT_SQ,
                rq: LAT_RQ,
                inline: test.default_inline(),
                mtu: None,
            };
            let mut pair = Pair::new(size, &qp).unwrap();
            let mut p = Progress::with_terminal(vec![1.0], false);
            let r = run(
                &mut pair,
                test,
                size,
                Plan::Iters(300),
                test.default_inline(),
                &mut p,
            )
            .unwrap();
            assert_eq!(r.verified, Ok(()), "{test:?}");
            assert_eq!(r.samples_us.len(), 300);
            assert!(r.samples_us.iter().all(|&x| x > 0.0));
            // Damage what arrived: the check after the run sees it.
            let target = if matches!(test, Test::ReadLat) {
                &pair.c
            } else {
                &pair.s
            };
            let off = target.dst_off(0, size);
            let b = target.mem.read_u8(off).unwrap();
            target.mem.write_u8(off, b ^ 0x40).unwrap();
            let e = verify(test, &pair.c, &pair.s, size, 300).unwrap_err();
            assert!(!e.is_empty());
            pair.teardown().unwrap();
        }
    }
}
