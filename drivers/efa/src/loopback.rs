//! The EFA loopback exchange: one device talks to itself on an SRD and a UD queue pair, with
//! every completion and every byte checked and every object destroyed again.
//!
//! It is what the tests that reach an EFA through a new path run once the driver is up (the
//! unikernel behind ivshmem, the Linux guest through VFIO, the testbed's shared BAR): it
//! needs nothing but the device, so it proves the path carries the control plane, both
//! directions of the data path and the device's DMA. [`run`] is generic over the
//! [`Provider`] and the [`Platform`] whose clock bounds the waits, and needs only `alloc`.
//!
//! The exchange, on one 64 KiB registered buffer (SENDs from offset 0, receives into
//! [`RECV_AT`], the READ lands at [`READ_AT`]):
//!
//! 1. the port's GID is queried (and compared with [`LoopbackConfig::gid`] when given); a
//!    PD, a CQ, the MR (local write, remote read) and an address handle to that GID;
//! 2. for SRD, then UD: a QP taken to RTS ([`datagram_qp`]); per message, the receive area
//!    is zeroed, a receive posted, the message (a pattern of its index and
//!    [`LoopbackConfig::seed`]) SENT to the QP itself; exactly two completions must come,
//!    both successful, on this QP: the SEND (its `wr_id`, opcode `Send`) and the receive
//!    (its `wr_id`, opcode `Recv`, `byte_len` the message's length, source QP this QP); the
//!    received bytes must equal the sent ones;
//! 3. on SRD, after the SENDs: an RDMA READ of the buffer's first
//!    [`LoopbackConfig::read_len`] bytes (through the MR's rkey, addressed to the QP itself)
//!    into the zeroed READ area; one successful `RdmaRead` completion, the bytes equal;
//! 4. each QP, then the AH, the MR, the CQ and the PD are destroyed, also after a failure
//!    (the first error is the one reported).
//!
//! Progress is reported through a callback ([`Progress`]) so that each caller prints the
//! lines its test looks for.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use nic_hal::Platform;
use verbs::{
    AccessFlags, AhAttr, Buffer, Gid, MemoryRegion, Provider, QpAttr, QpAttrMask, QpCap,
    QpInitAttr, QpState, QpType, QueuePair, RecvWr, RemoteOp, SendWr, Sge, UdDest, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};

/// Bytes of the registered buffer.
pub const BUF_LEN: usize = 1 << 16;
/// Offset of the receive area in the buffer (SENDs go out from offset 0).
pub const RECV_AT: u64 = 16 << 10;
/// Offset of the RDMA READ's destination in the buffer.
pub const READ_AT: u64 = 32 << 10;
/// Bytes of each area (the send area, the receive area, the READ area): the longest
/// message or READ.
pub const AREA_LEN: u32 = 16 << 10;

/// Completions a CQ of the exchange holds; send and receive depth of its QPs.
const CQ_DEPTH: u32 = 64;
const QP_DEPTH: u32 = 16;
/// `wr_id`s: message `m`'s SEND is `m`, its receive `RECV_ID + m`; the READ is `READ_ID`.
const RECV_ID: u64 = 1 << 32;
const READ_ID: u64 = 1 << 33;

/// What to exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopbackConfig {
    /// The Q_Key of both QPs (and of every SEND's destination).
    pub qkey: u32,
    /// SENDs per QP (at least 1).
    pub messages: u32,
    /// Bytes of the first SRD message (1 to [`AREA_LEN`]).
    pub srd_len: u32,
    /// How much longer each next SRD message is (the last must fit [`AREA_LEN`]).
    pub srd_len_step: u32,
    /// Bytes of each UD message (1 to [`AREA_LEN`]; the device refuses more than its MTU).
    pub ud_len: u32,
    /// Bytes of the SRD RDMA READ (1 to [`AREA_LEN`]).
    pub read_len: u32,
    /// Varies the data (so that a second run on the same memory sends other bytes).
    pub seed: u8,
    /// How long to wait for a step's completions, in the platform's nanoseconds.
    pub timeout_ns: u64,
    /// The GID the port must report (the IPv4-mapped address the device was given), if any.
    pub gid: Option<Gid>,
}

impl Default for LoopbackConfig {
    /// Three messages of 6000 bytes on SRD and 1000 on UD, a 6000-byte READ, 30 s waits, no
    /// GID check.
    fn default() -> Self {
        LoopbackConfig {
            qkey: 0x1234,
            messages: 3,
            srd_len: 6000,
            srd_len_step: 0,
            ud_len: 1000,
            read_len: 6000,
            seed: 0,
            timeout_ns: 30_000_000_000,
            gid: None,
        }
    }
}

impl LoopbackConfig {
    /// Bytes of message `m` on a QP of `qp_type`.
    fn len(&self, qp_type: QpType, m: u32) -> u32 {
        match qp_type {
            QpType::Srd => self.srd_len + m * self.srd_len_step,
            _ => self.ud_len,
        }
    }

    /// Refuses a configuration that does not fit the buffer's areas.
    fn check(&self) -> Result<(), LoopbackError> {
        let last_srd = (self.messages.checked_sub(1))
            .and_then(|n| n.checked_mul(self.srd_len_step))
            .and_then(|x| x.checked_add(self.srd_len));
        let fits = |l: u32| (1..=AREA_LEN).contains(&l);
        if self.messages == 0 {
            return Err(LoopbackError::Config("no messages"));
        }
        if !fits(self.srd_len) || !last_srd.is_some_and(fits) {
            return Err(LoopbackError::Config(
                "an SRD message does not fit its area",
            ));
        }
        if !fits(self.ud_len) {
            return Err(LoopbackError::Config("a UD message does not fit its area"));
        }
        if !fits(self.read_len) {
            return Err(LoopbackError::Config("the READ does not fit its area"));
        }
        Ok(())
    }
}

/// The bytes of message `m` (also what is left at offset 0 for the READ): no period shorter
/// than 64 KiB, different for each message and seed.
pub fn pattern(seed: u8, m: u32, len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ (i >> 8) as u8 ^ (m as u8) ^ seed.rotate_left(3))
        .collect()
}

/// A step of the exchange, as progress and errors name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Message `m` (0-based) on a QP of this type.
    Send(QpType, u32),
    /// The RDMA READ on the SRD QP.
    Read,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Send(t, m) => write!(f, "{t:?} message {m}"),
            Step::Read => f.write_str("RDMA READ"),
        }
    }
}

/// What was checked so far, reported after each part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// All messages on a QP of `qp_type` went out and arrived, data checked.
    Sent {
        /// SRD or UD.
        qp_type: QpType,
        /// How many.
        messages: u32,
        /// Bytes of the first (each next SRD one is [`LoopbackConfig::srd_len_step`] longer).
        len: u32,
    },
    /// The SRD RDMA READ of `len` bytes completed, data checked.
    Read {
        /// Bytes read.
        len: u32,
    },
}

/// What a successful exchange checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoopbackReport {
    /// SENDs whose data was checked (both QPs).
    pub sends: u32,
    /// RDMA READs whose data was checked.
    pub reads: u32,
    /// Bytes moved by RDMA READ.
    pub read_bytes: u64,
}

/// Why an exchange failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoopbackError {
    /// The configuration does not fit the exchange's buffer (nothing was created).
    Config(&'static str),
    /// The port's GID is not the expected one.
    Gid {
        /// What the port reports.
        got: Gid,
        /// [`LoopbackConfig::gid`].
        want: Gid,
    },
    /// A verbs call failed (`call` names it).
    Verbs {
        /// The call (`"alloc_pd"`, `"datagram_qp"`, `"post_send"`, ...).
        call: &'static str,
        /// Its error.
        error: verbs::Error,
    },
    /// Fewer completions than the step needs came within the timeout.
    Timeout {
        /// The step.
        step: Step,
        /// Completions that came.
        got: usize,
        /// Completions expected.
        want: usize,
    },
    /// The step's completions are not what was posted (count, status, opcode, `wr_id`,
    /// length, QP).
    Completions {
        /// The step.
        step: Step,
        /// What came, sorted by `wr_id`.
        got: Vec<WorkCompletion>,
    },
    /// The data that arrived differs from what was sent.
    Data {
        /// The step.
        step: Step,
        /// The first differing byte.
        offset: usize,
    },
}

impl fmt::Display for LoopbackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoopbackError::Config(why) => write!(f, "bad loopback configuration: {why}"),
            LoopbackError::Gid { got, want } => {
                write!(f, "the port's GID {got:?} is not {want:?}")
            }
            LoopbackError::Verbs { call, error } => write!(f, "{call}: {error:?}"),
            LoopbackError::Timeout { step, got, want } => {
                write!(f, "{step}: {got} of {want} completions within the timeout")
            }
            LoopbackError::Completions { step, got } => write!(f, "{step}: completions {got:?}"),
            LoopbackError::Data { step, offset } => {
                write!(f, "{step}: the data differs from byte {offset}")
            }
        }
    }
}

impl core::error::Error for LoopbackError {}

/// A [`LoopbackError::Verbs`] for `call`.
fn verbs_err(call: &'static str) -> impl Fn(verbs::Error) -> LoopbackError {
    move |error| LoopbackError::Verbs { call, error }
}

/// Runs `body` on the object `make` created, then destroys it with `destroy` whatever the
/// body's outcome; the body's error comes first.
fn scoped<O, T>(
    make: Result<O, LoopbackError>,
    body: impl FnOnce(&mut O) -> Result<T, LoopbackError>,
    destroy: impl FnOnce(O) -> Result<(), LoopbackError>,
) -> Result<T, LoopbackError> {
    let mut o = make?;
    let r = body(&mut o);
    let d = destroy(o);
    let v = r?;
    d?;
    Ok(v)
}

/// A datagram QP (`QpType::Srd` or `QpType::Ud`) of `pd` on `cq` (send and receive) taken
/// to RTS with `qkey` on port 1: INIT (port, P_Key index 0, Q_Key), RTR, RTS; `depth` send
/// and receive work requests of one SGE, every SEND signalled. A failed transition destroys
/// the QP.
pub fn datagram_qp<D: Provider>(
    dev: &D,
    pd: &D::Pd,
    cq: &D::Cq,
    qp_type: QpType,
    qkey: u32,
    depth: u32,
) -> Result<D::Qp, verbs::Error> {
    use QpAttrMask as M;
    let (mut qp, _) = dev.create_qp(
        pd,
        &QpInitAttr {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        },
    )?;
    let steps = [
        (
            QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qkey,
                ..Default::default()
            },
            M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY,
        ),
        (
            QpAttr {
                qp_state: QpState::Rtr,
                ..Default::default()
            },
            M::STATE,
        ),
        (
            QpAttr {
                qp_state: QpState::Rts,
                ..Default::default()
            },
            M::STATE | M::SQ_PSN,
        ),
    ];
    for (a, m) in &steps {
        if let Err(e) = dev.modify_qp(&mut qp, a, *m) {
            let _ = dev.destroy_qp(qp);
            return Err(e);
        }
    }
    Ok(qp)
}

/// Runs the exchange on port 1 of `dev`; `platform`'s clock bounds each wait (and its
/// `relax` runs between polls); `progress` hears of each part that passed.
///
/// # Errors
///
/// The first thing that went wrong ([`LoopbackError`]); the objects created are destroyed
/// in any case (a failed destroy is reported when nothing failed before it).
pub fn run<D: Provider, P: Platform>(
    dev: &D,
    platform: &P,
    cfg: &LoopbackConfig,
    progress: &mut dyn FnMut(Progress),
) -> Result<LoopbackReport, LoopbackError> {
    cfg.check()?;
    let gid = dev.query_gid(1, 0).map_err(verbs_err("query_gid"))?;
    if let Some(want) = cfg.gid.filter(|w| *w != gid) {
        return Err(LoopbackError::Gid { got: gid, want });
    }
    let x = Exchange { dev, platform, cfg };
    scoped(
        dev.alloc_pd().map_err(verbs_err("alloc_pd")),
        |pd| {
            scoped(
                dev.create_cq(CQ_DEPTH, 0, None)
                    .map_err(verbs_err("create_cq")),
                |cq| x.with_cq(pd, cq, gid, progress),
                |cq| {
                    dev.destroy_cq(cq)
                        .map_err(|e| verbs_err("destroy_cq")(e.error))
                },
            )
        },
        |pd| {
            dev.dealloc_pd(pd)
                .map_err(|e| verbs_err("dealloc_pd")(e.error))
        },
    )
}

/// The exchange's fixed parts.
struct Exchange<'a, D, P> {
    dev: &'a D,
    platform: &'a P,
    cfg: &'a LoopbackConfig,
}

impl<D: Provider, P: Platform> Exchange<'_, D, P> {
    /// The MR and the AH, then both QPs.
    fn with_cq(
        &self,
        pd: &D::Pd,
        cq: &D::Cq,
        gid: Gid,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<LoopbackReport, LoopbackError> {
        let dev = self.dev;
        let mr = dev
            .alloc_buf(BUF_LEN)
            .map_err(verbs_err("alloc_buf"))
            .and_then(|b| {
                dev.reg_mr(pd, b, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
                    .map_err(verbs_err("reg_mr"))
            });
        scoped(
            mr,
            |mr| {
                let ah = AhAttr {
                    dgid: gid,
                    port_num: 1,
                    ..Default::default()
                };
                scoped(
                    dev.create_ah(pd, &ah).map_err(verbs_err("create_ah")),
                    |ah| {
                        let mut rep = LoopbackReport::default();
                        for qp_type in [QpType::Srd, QpType::Ud] {
                            let qp = datagram_qp(dev, pd, cq, qp_type, self.cfg.qkey, QP_DEPTH)
                                .map_err(verbs_err("datagram_qp"));
                            scoped(
                                qp,
                                |qp| self.on_qp(qp, cq, mr, ah, &mut rep, progress),
                                |qp| {
                                    dev.destroy_qp(qp)
                                        .map_err(|e| verbs_err("destroy_qp")(e.error))
                                },
                            )?;
                        }
                        Ok(rep)
                    },
                    |ah| {
                        dev.destroy_ah(ah)
                            .map_err(|e| verbs_err("destroy_ah")(e.error))
                    },
                )
            },
            |mr| dev.dereg_mr(mr).map_err(|e| verbs_err("dereg_mr")(e.error)),
        )
    }

    /// The SENDs on `qp`, and on SRD the READ.
    fn on_qp(
        &self,
        qp: &mut D::Qp,
        cq: &D::Cq,
        mr: &D::Mr,
        ah: &D::Ah,
        rep: &mut LoopbackReport,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), LoopbackError> {
        let (dev, cfg) = (self.dev, self.cfg);
        let b = mr.buffer().ok_or(LoopbackError::Verbs {
            call: "MemoryRegion::buffer",
            error: verbs::Error::InvalidArgument,
        })?;
        let qp_type = qp.qp_type();
        let qpn = qp.qp_num();
        let sge = |off: u64, len: u32| Sge {
            addr: mr.addr() + off,
            length: len,
            lkey: mr.lkey(),
        };
        let dest = || {
            Some(UdDest {
                ah,
                remote_qpn: qpn,
                remote_qkey: cfg.qkey,
            })
        };
        for m in 0..cfg.messages {
            let step = Step::Send(qp_type, m);
            let len = cfg.len(qp_type, m);
            let msg = pattern(cfg.seed, m, len);
            write(b, 0, &msg)?;
            write(b, RECV_AT, &vec![0u8; AREA_LEN as usize])?;
            let r = [sge(RECV_AT, AREA_LEN)];
            let recv = RecvWr {
                wr_id: RECV_ID + u64::from(m),
                sg_list: &r,
            };
            dev.post_recv(qp, &[recv])
                .map_err(|e| verbs_err("post_recv")(e.error))?;
            let s = [sge(0, len)];
            let wr = SendWr {
                wr_id: u64::from(m),
                sg_list: &s,
                dest: dest(),
                ..Default::default()
            };
            dev.post_send(qp, &[wr])
                .map_err(|e| verbs_err("post_send")(e.error))?;
            let c = self.wait(cq, step, 2)?;
            let ok = (c[0].wr_id, c[0].opcode, c[0].qp_num) == (u64::from(m), WcOpcode::Send, qpn)
                && (
                    c[1].wr_id,
                    c[1].opcode,
                    c[1].byte_len,
                    c[1].qp_num,
                    c[1].src_qp,
                ) == (RECV_ID + u64::from(m), WcOpcode::Recv, len, qpn, qpn);
            if !ok {
                return Err(LoopbackError::Completions { step, got: c });
            }
            compare(b, step, RECV_AT, &msg)?;
            rep.sends += 1;
        }
        progress(Progress::Sent {
            qp_type,
            messages: cfg.messages,
            len: cfg.len(qp_type, 0),
        });
        if qp_type != QpType::Srd {
            return Ok(());
        }
        let step = Step::Read;
        let mut want = vec![0u8; cfg.read_len as usize];
        b.read(0, &mut want).map_err(verbs_err("Buffer::read"))?;
        write(b, READ_AT, &vec![0u8; AREA_LEN as usize])?;
        let l = [sge(READ_AT, cfg.read_len)];
        let wr = SendWr {
            wr_id: READ_ID,
            opcode: WrOpcode::RdmaRead,
            sg_list: &l,
            remote: RemoteOp::Rdma {
                remote_addr: mr.addr(),
                rkey: mr.rkey(),
            },
            dest: dest(),
            ..Default::default()
        };
        dev.post_send(qp, &[wr])
            .map_err(|e| verbs_err("post_send")(e.error))?;
        let c = self.wait(cq, step, 1)?;
        if (c[0].wr_id, c[0].opcode, c[0].qp_num) != (READ_ID, WcOpcode::RdmaRead, qpn) {
            return Err(LoopbackError::Completions { step, got: c });
        }
        compare(b, step, READ_AT, &want)?;
        rep.reads += 1;
        rep.read_bytes += u64::from(cfg.read_len);
        progress(Progress::Read { len: cfg.read_len });
        Ok(())
    }

    /// Polls `cq` until `n` completions came (within the timeout), then once more for
    /// extras; sorted by `wr_id`; all must be successful and exactly `n`.
    fn wait(&self, cq: &D::Cq, step: Step, n: usize) -> Result<Vec<WorkCompletion>, LoopbackError> {
        let mut got = Vec::new();
        let mut wc = [WorkCompletion::default(); 4];
        let start = self.platform.now_ns();
        while got.len() < n {
            let k = self
                .dev
                .poll_cq(cq, &mut wc)
                .map_err(verbs_err("poll_cq"))?;
            got.extend_from_slice(&wc[..k.min(wc.len())]);
            if got.len() >= n {
                break;
            }
            if self.platform.now_ns().saturating_sub(start) > self.cfg.timeout_ns {
                return Err(LoopbackError::Timeout {
                    step,
                    got: got.len(),
                    want: n,
                });
            }
            self.platform.relax();
        }
        let k = self
            .dev
            .poll_cq(cq, &mut wc)
            .map_err(verbs_err("poll_cq"))?;
        got.extend_from_slice(&wc[..k.min(wc.len())]);
        got.sort_by_key(|w| w.wr_id);
        if got.len() != n || got.iter().any(|w| w.status != WcStatus::Success) {
            return Err(LoopbackError::Completions { step, got });
        }
        Ok(got)
    }
}

/// Writes `data` at `off` of the buffer.
fn write(b: &Buffer, off: u64, data: &[u8]) -> Result<(), LoopbackError> {
    b.write(off as usize, data)
        .map_err(verbs_err("Buffer::write"))
}

/// Compares the bytes at `off` of the buffer with `want`.
fn compare(b: &Buffer, step: Step, off: u64, want: &[u8]) -> Result<(), LoopbackError> {
    let mut got = vec![0u8; want.len()];
    b.read(off as usize, &mut got)
        .map_err(verbs_err("Buffer::read"))?;
    match got.iter().zip(want).position(|(g, w)| g != w) {
        Some(offset) => Err(LoopbackError::Data { step, offset }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn configurations_that_do_not_fit_are_refused() {
        let d = LoopbackConfig::default();
        assert_eq!(d.check(), Ok(()));
        let edge = LoopbackConfig {
            srd_len: AREA_LEN - 2,
            srd_len_step: 1,
            ud_len: AREA_LEN,
            read_len: AREA_LEN,
            ..d
        };
        assert_eq!(edge.check(), Ok(()));
        assert_eq!(edge.len(QpType::Srd, 2), AREA_LEN);
        assert_eq!(edge.len(QpType::Ud, 2), AREA_LEN);
        for bad in [
            LoopbackConfig { messages: 0, ..d },
            LoopbackConfig { srd_len: 0, ..d },
            LoopbackConfig {
                srd_len: AREA_LEN - 1,
                srd_len_step: 1,
                ..d
            },
            LoopbackConfig {
                srd_len_step: u32::MAX,
                ..d
            },
            LoopbackConfig {
                messages: u32::MAX,
                srd_len_step: 2,
                ..d
            },
            LoopbackConfig { ud_len: 0, ..d },
            LoopbackConfig {
                ud_len: AREA_LEN + 1,
                ..d
            },
            LoopbackConfig { read_len: 0, ..d },
            LoopbackConfig {
                read_len: AREA_LEN + 1,
                ..d
            },
        ] {
            assert!(
                matches!(bad.check(), Err(LoopbackError::Config(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn patterns_differ_by_message_seed_and_position() {
        let p = pattern(0, 0, 4096);
        assert_eq!(p.len(), 4096);
        assert_ne!(p[..256], p[256..512]);
        assert_ne!(p, pattern(0, 1, 4096));
        assert_ne!(p, pattern(1, 0, 4096));
        assert_eq!(p, pattern(0, 0, 4096));
        // Every byte differs between messages and between seeds.
        let q = pattern(0, 1, 4096);
        assert!(p.iter().zip(&q).all(|(a, b)| a != b));
        let r = pattern(0x5a, 0, 4096);
        assert!(p.iter().zip(&r).all(|(a, b)| a != b));
    }

    #[test]
    fn errors_name_their_step() {
        let e = LoopbackError::Data {
            step: Step::Send(QpType::Ud, 2),
            offset: 17,
        };
        assert_eq!(e.to_string(), "Ud message 2: the data differs from byte 17");
        let e = LoopbackError::Timeout {
            step: Step::Read,
            got: 0,
            want: 1,
        };
        assert_eq!(
            e.to_string(),
            "RDMA READ: 0 of 1 completions within the timeout"
        );
        let e = LoopbackError::Verbs {
            call: "post_send",
            error: verbs::Error::InvalidArgument,
        };
        assert!(e.to_string().starts_with("post_send: "));
    }
}
