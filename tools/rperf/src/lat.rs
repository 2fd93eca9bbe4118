//! Latency tests, as perftest runs them. [`measure`] is the client's loop in both modes: the
//! server is its [`Peer`], driven from this thread in the embedded mode ([`run`]) or a
//! process of its own ([`crate::remote`]); [`crate::serve::Responder`] is the server's side.
//!
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

use verbs::{SendFlags, WcOpcode, WorkCompletion, WrOpcode};

use crate::cli::{Plan, Test};
use crate::port::{Pace, Port, Request, Target, Wait};
use crate::progress::Progress;
use crate::serve::{Peer, Queue};
#[cfg(feature = "emulator")]
use crate::setup::Pair;
use crate::setup::{Error, Result, check_ok, compare};

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

#[cfg(feature = "emulator")]
/// Runs `test` (a latency test) at `size` on `pair`: the client's loop with the server driven
/// from this thread.
pub fn run<D: device_open::Device>(
    pair: &mut Pair<D>,
    test: Test,
    size: usize,
    plan: Plan,
    inline: u32,
    progress: &mut Progress,
) -> Result<LatRun> {
    let use_inline = test.inline_at(inline, size);
    let (c, mut near, world) = pair.split(test, size, use_inline, LAT_RQ, plan.count())?;
    measure(c, &mut near, world, test, size, plan, use_inline, progress)
}

/// The client's loop of `test` (a latency test) at `size` on `c`, whose far end is `peer`:
/// one sample per iteration; after the run, what arrived here is compared with what the peer
/// sent, and the peer's verdict is added.
#[allow(clippy::too_many_arguments)]
pub fn measure<E: Port, P: Pace, A: Peer<E>>(
    c: &mut E,
    peer: &mut A,
    pace: &P,
    test: Test,
    size: usize,
    plan: Plan,
    use_inline: bool,
    progress: &mut Progress,
) -> Result<LatRun> {
    c.prepare(size, 1)?;
    let mut q = Queue::new(size, 1);
    if test == Test::SendLat {
        q.post_recvs(c, u64::from(LAT_RQ))?;
    }
    let mut wc = [WorkCompletion::default(); 16];
    let mut bad: Option<String> = None;
    let flags = if use_inline {
        SendFlags::SIGNALED | SendFlags::INLINE
    } else {
        SendFlags::SIGNALED
    };
    let mut samples = Vec::with_capacity(match plan {
        Plan::Iters(n) => n.min(1 << 24) as usize,
        Plan::Duration(_) => 1 << 16,
    });
    // What the last READ brought into the last byte.
    let mut read_last = 0u8;
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
                // There (c -> peer) and back (peer -> c).
                q.room(c, &mut wc, pace, &mut bad)?;
                c.stamp(size, st)?;
                let r = if test == Test::SendLat {
                    Request::new(i, WrOpcode::Send, flags, 0, size)
                } else {
                    let (addr, rkey) = c.peer_dst(0, size);
                    Request::new(i, WrOpcode::RdmaWrite, flags, 0, size)
                        .to(Target::Rdma(addr, rkey))
                };
                q.post(c, &r)?;
                peer.answer()?;
                let mut w = pace.wait("the peer's message");
                if test == Test::SendLat {
                    let want = q.recvs + 1;
                    while {
                        q.reap(c, &mut wc, Some(st), &mut bad)?;
                        q.recvs < want
                    } {
                        w.relax()?;
                    }
                } else {
                    let at = c.dst_off(0, size) + size - 1;
                    while c.read_u8(at)? != st {
                        w.relax()?;
                    }
                }
            }
            Test::ReadLat | Test::AtomicLat => {
                let at = c.dst_off(0, size);
                let r = if test == Test::ReadLat {
                    read_last = peer.before_read(c, size, st)?;
                    let (addr, rkey) = c.peer_src(0, size);
                    Request::new(i, WrOpcode::RdmaRead, SendFlags::SIGNALED, at, size)
                        .to(Target::Rdma(addr, rkey))
                } else {
                    let (addr, rkey) = c.peer_dst(0, size);
                    Request::new(
                        i,
                        WrOpcode::AtomicFetchAndAdd,
                        SendFlags::SIGNALED,
                        at,
                        size,
                    )
                    .to(Target::FetchAdd(addr, rkey))
                };
                c.post(&r)?;
                let mut w = pace.wait("READ / atomic completion");
                let got = loop {
                    if c.poll(&mut wc[..1])? == 1 {
                        break wc[0];
                    }
                    w.relax()?;
                };
                let (what, opcode) = if test == Test::ReadLat {
                    ("RDMA READ", WcOpcode::RdmaRead)
                } else {
                    ("fetch-and-add", WcOpcode::FetchAdd)
                };
                check_ok(&got, what)?;
                if got.wr_id != i || got.opcode != opcode || got.byte_len as usize != size {
                    return Err(Error::Completion { what, wc: got });
                }
                if test == Test::ReadLat {
                    let last = c.read_u8(at + size - 1)?;
                    if last != read_last {
                        bad.get_or_insert(format!("READ {i}: last byte {last}, want {read_last}"));
                    }
                } else {
                    // The fetched value lands in host byte order (the driver negotiates
                    // host-endian atomic responses, as Linux does); the counter itself is
                    // big-endian at the responder.
                    let v = c.buf().mem.read_u64(at).map_err(|err| Error::Dma {
                        what: "read the result",
                        err,
                    })?;
                    if v != i {
                        bad.get_or_insert(format!("fetch-and-add {i} returned {v}, want {i}"));
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
    q.drain(c, &mut wc, pace, &mut bad)?;
    let mine = match bad {
        Some(b) => Err(b),
        None => verify(c, test, size, i, read_last),
    };
    let theirs = peer.finish(c, i)?;
    Ok(LatRun {
        size,
        samples_us: samples,
        verified: mine.and(theirs),
    })
}

/// Compares what arrived at the client with what the peer sent, after `iters` iterations
/// (`read_last`: what the last READ fetched into the last byte).
fn verify<E: Port>(
    c: &E,
    test: Test,
    size: usize,
    iters: u64,
    read_last: u8,
) -> std::result::Result<(), String> {
    let mut want = c.peer_pattern(size, 0);
    let what = match test {
        Test::SendLat | Test::WriteLat => {
            want[size - 1] = stamp(iters.saturating_sub(1));
            "server -> client"
        }
        Test::ReadLat => {
            want[size - 1] = read_last;
            "server -> client (READ)"
        }
        _ => return Ok(()),
    };
    let got = c
        .read(c.dst_off(0, size), size)
        .map_err(|e| e.to_string())?;
    compare(&got, &want, what)
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

    #[cfg(feature = "emulator")]
    #[test]
    fn runs_verify_and_corruption_is_found() {
        use crate::port::Port;
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
            let mut pair = Pair::new(size, &qp, 1).unwrap();
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
                &pair.lanes[0].0
            } else {
                &pair.lanes[0].1
            };
            let off = target.dst_off(0, size);
            let b = target.buf.mem.read_u8(off).unwrap();
            target.buf.mem.write_u8(off, b ^ 0x40).unwrap();
            let e = if test == Test::ReadLat {
                verify(&pair.lanes[0].0, test, size, 300, stamp(299))
            } else {
                crate::serve::check(&pair.lanes[0].1, test, size, 300)
            }
            .unwrap_err();
            assert!(!e.is_empty());
            pair.teardown().unwrap();
        }
    }
}
