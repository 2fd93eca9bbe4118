//! What the measurement loops need of one end, whichever mode drives it: the [`Port`] (a QP,
//! its completions and a registered buffer `[SRC | DST | ...]` with the peer's buffer known)
//! and the [`Pace`] of waits (the embedded mode steps the in-process fabric, the two-process
//! mode spins on the wall clock). The loops in [`crate::lat`], [`crate::bw`] and
//! [`crate::serve`](mod@crate::serve) are generic over both, so each is written once and compiled per mode
//! (no dynamic dispatch in the hot loops).

use verbs::{RemoteOp, SendFlags, SendWr, Sge, WorkCompletion, WrOpcode};

use crate::setup::{Error, Result, slot_pattern};

/// The peer's buffer, as the connection made it known.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerBuf {
    /// Device address of its buffer.
    pub addr: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Bytes of its SRC (= of its DST).
    pub region: usize,
    /// Its pattern seed (see [`slot_pattern`]).
    pub who: u8,
}

/// Where a request goes on the peer.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// Nothing remote (SEND).
    None,
    /// RDMA WRITE / READ at an address and rkey.
    Rdma(u64, u32),
    /// Fetch-and-add of 1 at an address and rkey.
    FetchAdd(u64, u32),
}

/// One send request of a measurement loop.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Flags; with [`SendFlags::INLINE`] the payload is the mirror's bytes at `off`.
    pub flags: SendFlags,
    /// Buffer offset of the local bytes.
    pub off: usize,
    /// Their length.
    pub len: usize,
    /// The remote side.
    pub target: Target,
    /// Immediate data (host order; sent in network order).
    pub imm: u32,
}

impl Request {
    /// A request without immediate data.
    pub fn new(wr_id: u64, opcode: WrOpcode, flags: SendFlags, off: usize, len: usize) -> Self {
        Request {
            wr_id,
            opcode,
            flags,
            off,
            len,
            target: Target::None,
            imm: 0,
        }
    }

    /// With `target`.
    pub fn to(self, target: Target) -> Self {
        Request { target, ..self }
    }
}

/// One end's registered buffer `[SRC | DST | ...]`, what SRC holds, and the peer's buffer.
pub struct Buffer {
    /// The memory.
    pub mem: verbs::Buffer,
    /// Its lkey.
    pub lkey: u32,
    /// Its rkey.
    pub rkey: u32,
    /// Bytes of SRC (= of DST).
    pub region: usize,
    /// What SRC holds (inline sends take their payload from here).
    pub mirror: Vec<u8>,
    /// This end's pattern seed (see [`slot_pattern`]).
    pub who: u8,
    /// The peer's buffer (once known).
    pub peer: PeerBuf,
}

impl Buffer {
    /// `mem`, registered with `lkey` and `rkey`, with `region` bytes of SRC; the pattern seed
    /// `who`; the peer not known yet.
    pub fn new(mem: verbs::Buffer, lkey: u32, rkey: u32, region: usize, who: u8) -> Buffer {
        Buffer {
            mem,
            lkey,
            rkey,
            region,
            mirror: vec![0; region],
            who,
            peer: PeerBuf {
                region,
                ..PeerBuf::default()
            },
        }
    }

    /// What the peer needs to target this buffer.
    #[cfg(feature = "emulator")]
    pub fn as_peer(&self) -> PeerBuf {
        PeerBuf {
            addr: self.mem.addr(),
            rkey: self.rkey,
            region: self.region,
            who: self.who,
        }
    }

    /// An SGE over `len` bytes at buffer offset `off`.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mem.addr() + off as u64,
            length: len as u32,
            lkey: self.lkey,
        }
    }

    /// The verbs request of `r`; `sg` holds its gather entry.
    pub fn wr<'a, A>(&'a self, r: &Request, sg: &'a mut [Sge; 1]) -> Result<SendWr<'a, A>> {
        let remote = match r.target {
            Target::None => RemoteOp::None,
            Target::Rdma(remote_addr, rkey) => RemoteOp::Rdma { remote_addr, rkey },
            Target::FetchAdd(remote_addr, rkey) => RemoteOp::Atomic {
                remote_addr,
                rkey,
                compare_add: 1,
                swap: 0,
            },
        };
        let mut wr = SendWr {
            wr_id: r.wr_id,
            opcode: r.opcode,
            flags: r.flags,
            imm_data: r.imm.to_be(),
            remote,
            ..SendWr::default()
        };
        if r.flags.contains(SendFlags::INLINE) {
            wr.inline_data = self
                .mirror
                .get(r.off..r.off + r.len)
                .ok_or_else(|| Error::Check("an inline payload outside SRC".into()))?;
        } else {
            sg[0] = self.sge(r.off, r.len);
            let sg: &'a [Sge; 1] = sg;
            wr.sg_list = sg;
        }
        Ok(wr)
    }
}

/// One end of a connection as the measurement loops drive it.
pub trait Port {
    /// Posts one send request.
    fn post(&mut self, r: &Request) -> Result<()>;
    /// Posts one receive of `len` bytes at buffer offset `off`.
    fn post_recv(&mut self, wr_id: u64, off: usize, len: usize) -> Result<()>;
    /// Polls the completions (send and receive) once into `wc`.
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize>;
    /// The buffer.
    fn buf(&self) -> &Buffer;
    /// The same, to change.
    fn buf_mut(&mut self) -> &mut Buffer;

    /// Buffer offset of DST slot `slot` for `size`-byte messages.
    fn dst_off(&self, slot: usize, size: usize) -> usize {
        self.buf().region + slot * size
    }

    /// The peer's address and rkey of its DST slot `slot`.
    fn peer_dst(&self, slot: usize, size: usize) -> (u64, u32) {
        let p = &self.buf().peer;
        (p.addr + (p.region + slot * size) as u64, p.rkey)
    }

    /// The peer's address and rkey of its SRC slot `slot`.
    fn peer_src(&self, slot: usize, size: usize) -> (u64, u32) {
        let p = &self.buf().peer;
        (p.addr + (slot * size) as u64, p.rkey)
    }

    /// What the peer's SRC slot `slot` held after its [`Port::prepare`].
    fn peer_pattern(&self, size: usize, slot: usize) -> Vec<u8> {
        let mut v = vec![0; size];
        slot_pattern(self.buf().peer.who, size, slot, &mut v);
        v
    }

    /// Fills SRC's first `slots` slots (and the mirror) with this end's pattern, which differs
    /// per end, size and slot, and zeroes the rest of the buffer; touches every page outside
    /// the timed loop.
    fn prepare(&mut self, size: usize, slots: usize) -> Result<()> {
        let b = self.buf_mut();
        let used = size * slots;
        for (slot, out) in b.mirror[..used].chunks_mut(size).enumerate() {
            slot_pattern(b.who, size, slot, out);
        }
        let dma = |what| move |err| Error::Dma { what, err };
        b.mem.write(0, &b.mirror[..used]).map_err(dma("fill SRC"))?;
        b.mem
            .fill(b.region, b.mem.len() - b.region, 0)
            .map_err(dma("clear DST"))
    }

    /// Sets the last byte of SRC slot 0 (and of the mirror) to `stamp`: the per-iteration
    /// mark of the latency tests.
    fn stamp(&mut self, size: usize, stamp: u8) -> Result<()> {
        let b = self.buf_mut();
        b.mirror[size - 1] = stamp;
        b.mem.write_u8(size - 1, stamp).map_err(|err| Error::Dma {
            what: "stamp SRC",
            err,
        })
    }

    /// Reads the byte at buffer offset `off`.
    fn read_u8(&self, off: usize) -> Result<u8> {
        self.buf().mem.read_u8(off).map_err(|err| Error::Dma {
            what: "read the buffer",
            err,
        })
    }

    /// Reads `len` bytes at buffer offset `off` with a plain copy (fast; for checking data
    /// after the transfers that wrote it).
    ///
    /// # Safety
    ///
    /// Nothing writes the range meanwhile: the completions of every operation that can write
    /// it (receives, READs, the peer's WRITEs, as the exchange orders them) were seen, so the
    /// device is done with it, and none is posted again before this returns.
    unsafe fn read_completed(&self, off: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        // SAFETY: the caller's contract is `read_unsync`'s.
        unsafe { self.buf().mem.read_unsync(off, &mut v) }.map_err(|err| Error::Dma {
            what: "read the buffer",
            err,
        })?;
        Ok(v)
    }

    /// Reads `len` bytes at buffer offset `off`.
    fn read(&self, off: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.buf().mem.read(off, &mut v).map_err(|err| Error::Dma {
            what: "read the buffer",
            err,
        })?;
        Ok(v)
    }
}

/// How the loops wait: what a spin does and when a wait without progress fails.
pub trait Pace {
    /// One wait.
    type Wait<'a>: Wait
    where
        Self: 'a;
    /// Starts a wait for `what`.
    fn wait(&self, what: &'static str) -> Self::Wait<'_>;
}

/// A wait in progress.
pub trait Wait {
    /// Something moved: restart the limits.
    fn progress(&mut self);
    /// One spin; an error once a limit passed without progress.
    fn relax(&mut self) -> Result<()>;
}
