//! The `rdma_verbs.h` helpers on an id: memory registration on the id's PD, one-SGE posts on
//! its QP, and completions from the CQs it created (`docs/cm.md#verbs-helpers`).

use core::cell::Cell;

use verbs::{
    AccessFlags, Buffer, MemoryRegion, Provider, RecvWr, RemoteOp, SendFlags, SendWr, Sge, UdDest,
    WorkCompletion, WrOpcode,
};

use crate::datapath::DataPath;
use crate::error::Error;
use crate::id::CmId;

/// The one-entry scatter/gather list of `[addr, addr + len)`, which must lie inside `mr`
/// (librdmacm asserts it in debug builds; here it is EINVAL).
fn sge_in<M: MemoryRegion>(mr: &M, addr: u64, length: u32) -> Result<[Sge; 1], Error> {
    let end = addr.checked_add(length as u64);
    let mr_end = mr.addr().checked_add(mr.length());
    if addr >= mr.addr() && matches!((end, mr_end), (Some(e), Some(m)) if e <= m) {
        Ok([Sge {
            addr,
            length,
            lkey: mr.lkey(),
        }])
    } else {
        Err(Error::InvalidArgument)
    }
}

impl<P: Provider> CmId<P> {
    fn reg(&self, mem: Buffer, access: AccessFlags) -> Result<P::Mr, Error> {
        self.with_verbs(|v| {
            let pd = v.pd.ok_or(Error::InvalidArgument)?;
            v.provider.reg_mr(pd, mem, access).map_err(Error::from)
        })?
    }

    /// DMA memory of `len` bytes from the id's device ([`Provider::alloc_buf`]), to register
    /// with [`reg_msgs`](Self::reg_msgs) and friends. EINVAL for an id bound to no device.
    pub fn alloc_buf(&self, len: usize) -> Result<Buffer, Error> {
        self.with_verbs(|v| v.provider.alloc_buf(len).map_err(Error::from))?
    }

    /// The program's own memory, given up for good (a [`verbs::StaticBytes`] taken once, a
    /// leaked allocation), made reachable by the id's device ([`Provider::map_buf`]): the
    /// [`Buffer`] to register with [`reg_msgs`](Self::reg_msgs), as C registers a static
    /// array. EINVAL for an id bound to no device; NotSupported where the device's DMA cannot
    /// map memory it did not allocate.
    ///
    /// [`Provider::map_buf`]: verbs::Provider::map_buf
    pub fn map_buf(&self, mem: &'static mut [u8]) -> Result<Buffer, Error> {
        self.with_verbs(|v| v.provider.map_buf(mem).map_err(Error::from))?
    }

    /// `rdma_reg_msgs`: registers memory on the id's PD for sends and receives (local
    /// write); the MR holds `mem` until it is deregistered. EINVAL for an id bound to no
    /// device (librdmacm dereferences NULL).
    pub fn reg_msgs(&self, mem: Buffer) -> Result<P::Mr, Error> {
        self.reg(mem, AccessFlags::LOCAL_WRITE)
    }

    /// `rdma_reg_read`: memory the peer may RDMA-read.
    pub fn reg_read(&self, mem: Buffer) -> Result<P::Mr, Error> {
        self.reg(mem, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
    }

    /// `rdma_reg_write`: memory the peer may RDMA-write.
    pub fn reg_write(&self, mem: Buffer) -> Result<P::Mr, Error> {
        self.reg(mem, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
    }

    /// `rdma_dereg_mr`.
    pub fn dereg_mr(&self, mr: P::Mr) -> Result<(), Error> {
        self.with_verbs(|v| v.provider.dereg_mr(mr).map_err(|e| e.error.into()))?
    }

    /// The id's data path, for the helpers (no lock taken).
    fn dp(&self) -> DataPath<P> {
        DataPath {
            cell: self.path.clone(),
        }
    }

    /// Posts one work request (on an SRD id with a resolved peer, one that names no
    /// destination goes there: [`DataPath::post_send`]).
    fn post(&self, wr: &SendWr<'_, P::Ah>) -> Result<(), Error> {
        self.dp()
            .post_send(core::slice::from_ref(wr))
            .map_err(Error::from)
    }

    /// `rdma_post_recv`: one receive of `length` bytes at `addr` (inside `mr`, else EINVAL),
    /// to the id's SRQ if it has one ([`create_srq`](Self::create_srq)), else to its QP.
    pub fn post_recv(&self, wr_id: u64, addr: u64, length: u32, mr: &P::Mr) -> Result<(), Error> {
        let sge = sge_in(mr, addr, length)?;
        let wr = [RecvWr {
            wr_id,
            sg_list: &sge,
        }];
        let dp = self.dp();
        if self.path.lock().srq.is_some() {
            return dp.post_srq_recv(&wr).map_err(Error::from);
        }
        dp.post_recv(&wr).map_err(Error::from)
    }

    /// `rdma_post_send`: a SEND of `length` bytes at `addr` (inside `mr`). Pass
    /// [`SendFlags::SIGNALED`] for a completion (unless the QP signals every send).
    pub fn post_send(
        &self,
        wr_id: u64,
        addr: u64,
        length: u32,
        mr: &P::Mr,
        flags: SendFlags,
    ) -> Result<(), Error> {
        let sge = sge_in(mr, addr, length)?;
        self.post(&SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            flags,
            sg_list: &sge,
            ..SendWr::default()
        })
    }

    /// `rdma_post_send` with `IBV_SEND_INLINE` and no MR: `data` is copied into the work
    /// request (at most the QP's `max_inline_data`).
    pub fn post_send_inline(&self, wr_id: u64, data: &[u8], flags: SendFlags) -> Result<(), Error> {
        self.post(&SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            flags: flags | SendFlags::INLINE,
            inline_data: data,
            ..SendWr::default()
        })
    }

    /// `rdma_post_ud_send`: a datagram SEND of `length` bytes at `addr` (inside `mr`) to QP
    /// `remote_qpn` behind `ah`, with the rdma_cm Q_Key 0x01234567.
    #[allow(clippy::too_many_arguments)]
    pub fn post_ud_send(
        &self,
        wr_id: u64,
        addr: u64,
        length: u32,
        mr: &P::Mr,
        flags: SendFlags,
        ah: &P::Ah,
        remote_qpn: u32,
    ) -> Result<(), Error> {
        let sge = sge_in(mr, addr, length)?;
        self.post(&SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            flags,
            sg_list: &sge,
            dest: Some(UdDest {
                ah,
                remote_qpn,
                remote_qkey: crate::RDMA_UDP_QKEY,
            }),
            ..SendWr::default()
        })
    }

    /// `rdma_post_write`: RDMA WRITE of `length` bytes at `addr` (inside `mr`) to
    /// `remote_addr` / `rkey`.
    #[allow(clippy::too_many_arguments)]
    pub fn post_write(
        &self,
        wr_id: u64,
        addr: u64,
        length: u32,
        mr: &P::Mr,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), Error> {
        self.rdma(
            wr_id,
            WrOpcode::RdmaWrite,
            addr,
            length,
            mr,
            flags,
            remote_addr,
            rkey,
        )
    }

    /// `rdma_post_read`: RDMA READ of `length` bytes from `remote_addr` / `rkey` into
    /// `addr` (inside `mr`).
    #[allow(clippy::too_many_arguments)]
    pub fn post_read(
        &self,
        wr_id: u64,
        addr: u64,
        length: u32,
        mr: &P::Mr,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), Error> {
        self.rdma(
            wr_id,
            WrOpcode::RdmaRead,
            addr,
            length,
            mr,
            flags,
            remote_addr,
            rkey,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn rdma(
        &self,
        wr_id: u64,
        opcode: WrOpcode,
        addr: u64,
        length: u32,
        mr: &P::Mr,
        flags: SendFlags,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), Error> {
        let sge = sge_in(mr, addr, length)?;
        self.post(&SendWr {
            wr_id,
            opcode,
            flags,
            sg_list: &sge,
            remote: RemoteOp::Rdma { remote_addr, rkey },
            ..SendWr::default()
        })
    }

    /// `rdma_get_send_comp`: the next completion of the send CQ the id created, waiting for
    /// it as librdmacm does (poll; arm; poll; wait for the channel's event; again): the
    /// thread sleeps on the CQ's completion channel ([`Provider::wait_cq_event`], the NIC's
    /// interrupt where the platform delivers them) for up to 10 ms at a time and runs the
    /// progress engine in between; with a provider that cannot wait
    /// (NotSupported), or a CQ without a channel, it spins as
    /// [`poll_send_comp`](Self::poll_send_comp) does. The status is not checked. EINVAL if
    /// the id created no send CQ.
    ///
    /// [`Provider::wait_cq_event`]: verbs::Provider::wait_cq_event
    pub fn get_send_comp(&self) -> Result<WorkCompletion, Error> {
        self.get_comp(true, true)
    }

    /// `rdma_get_recv_comp`: the same for the receive CQ.
    pub fn get_recv_comp(&self) -> Result<WorkCompletion, Error> {
        self.get_comp(false, true)
    }

    /// [`get_send_comp`](Self::get_send_comp) for poll-mode programs: it never sleeps, but
    /// polls the CQ and runs the progress engine with the platform's relax hook in between.
    pub fn poll_send_comp(&self) -> Result<WorkCompletion, Error> {
        self.get_comp(true, false)
    }

    /// [`get_recv_comp`](Self::get_recv_comp) for poll-mode programs (see
    /// [`poll_send_comp`](Self::poll_send_comp)).
    pub fn poll_recv_comp(&self) -> Result<WorkCompletion, Error> {
        self.get_comp(false, false)
    }

    fn get_comp(&self, send: bool, sleep: bool) -> Result<WorkCompletion, Error> {
        let dp = self.dp();
        let mut armed = false;
        // The data path first (the id's lock only); the progress engine runs only while
        // nothing is there.
        if let Some(r) = dp.try_comp(send, &mut armed) {
            return r;
        }
        if !sleep {
            return self.cm.wait(|_| dp.try_comp(send, &mut armed));
        }
        let armed = Cell::new(armed);
        let can_sleep = Cell::new(true);
        self.cm.wait_sleeping(
            |_| {
                let mut a = armed.get();
                let r = dp.try_comp(send, &mut a);
                armed.set(a);
                r
            },
            || {
                // only once armed (with nothing found after arming): then any completion
                // from now on raises the channel's event
                if !armed.get() || !can_sleep.get() {
                    return Ok(false);
                }
                let mut a = true;
                let slept = dp.sleep_on_channel(send, &mut a, COMP_WAIT_SLICE_NS)?;
                armed.set(a);
                can_sleep.set(slept);
                if slept {
                    self.cm.with_state(|st| st.stats.comp_channel_sleeps += 1);
                }
                Ok(slept)
            },
        )
    }
}

/// How long [`CmId::get_send_comp`] sleeps on a completion channel before it runs the
/// progress engine again (received CM messages, timers).
const COMP_WAIT_SLICE_NS: u64 = 10_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    struct Mr;
    impl MemoryRegion for Mr {
        fn lkey(&self) -> u32 {
            0x1234
        }
        fn rkey(&self) -> u32 {
            0x1234
        }
        fn addr(&self) -> u64 {
            0x1000
        }
        fn length(&self) -> u64 {
            0x100
        }
        fn buffer(&self) -> Option<&Buffer> {
            None
        }
    }

    #[test]
    fn an_sge_must_lie_inside_its_mr() {
        let [s] = sge_in(&Mr, 0x1000, 0x100).unwrap();
        assert_eq!((s.addr, s.length, s.lkey), (0x1000, 0x100, 0x1234));
        assert!(sge_in(&Mr, 0x10ff, 1).is_ok());
        assert!(sge_in(&Mr, 0x1100, 0).is_ok());
        for (addr, len) in [(0xfff, 1), (0x1000, 0x101), (0x10ff, 2), (u64::MAX, 1)] {
            assert_eq!(
                sge_in(&Mr, addr, len),
                Err(Error::InvalidArgument),
                "{addr:#x}+{len}"
            );
        }
    }
}
