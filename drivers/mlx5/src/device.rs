//! The device: bring-up (`docs/mlx5.md#bring-up`), teardown (`docs/mlx5.md#teardown`), health, the
//! raw command entry point and the small objects (UAR, PD, transport domain, RoCE addresses).

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::AtomicU8;

use firmware_interface::cmds::{
    access_register_in, alloc_pd_out, alloc_transport_domain_out, alloc_uar_out, dealloc_pd_in,
    dealloc_transport_domain_in, dealloc_uar_in, modify_nic_vport_context_in, query_hca_cap_out,
    query_issi_out, query_nic_vport_context_out, query_vport_state_out, set_hca_cap_in,
    set_issi_in, set_roce_address_in, teardown_hca_in, teardown_hca_out,
};
use firmware_interface::ctx::{
    atomic_caps, cmd_hca_cap, host_endianness_reg, nic_vport_context, roce_addr_layout, roce_cap,
};
use firmware_interface::init_seg::{self, health};
use firmware_interface::{Field, cmd_status, eqe, mbox_in, op_mod, opcode};
use nic_hal::barrier::mmio_wmb;
use nic_hal::{DmaAllocator, Platform, RegisterIo};
use spin::Mutex;

use crate::caps::{Caps, PortType};
use crate::cmdq::{CmdQueue, SlotKind};
use crate::eq::{Eq, Event};
use crate::error::{Error, OutputFault};
use crate::pages::PagePool;
use crate::{Config, uar_page_ok};

/// Events the driver's own EQ subscribes to: the asynchronous QP/CQ/port events Linux's async
/// EQ takes, command completions and firmware page requests.
pub(crate) const DRIVER_EQ_EVENTS: u64 = {
    use eqe::event::*;
    mask(PATH_MIG)
        | mask(COMM_EST)
        | mask(SQ_DRAINED)
        | mask(CQ_ERROR)
        | mask(WQ_CATAS_ERROR)
        | mask(PATH_MIG_FAILED)
        | mask(PORT_CHANGE)
        | mask(WQ_INVAL_REQ_ERROR)
        | mask(WQ_ACCESS_ERROR)
        | mask(SRQ_CATAS_ERROR)
        | mask(SRQ_LAST_WQE)
        | mask(SRQ_RQ_LIMIT)
        | mask(CMD)
        | mask(PAGE_REQUEST)
};

/// Spare EQEs on top of what the driver's EQ must hold (Linux `MLX5_NUM_SPARE_EQE`).
const SPARE_EQES: u32 = 0x80;

/// Events read from the driver's EQ (while draining command-completion EQEs after each
/// command, or while waiting for one) and not yet handed to [`Device::poll_events`], and the
/// firmware page requests not served yet. Bounded; overflow is counted.
pub(crate) struct Pending {
    pub(crate) events: VecDeque<Event>,
    pub(crate) page_requests: VecDeque<PageRequest>,
    pub(crate) lost: u64,
    pub(crate) error: Option<Error>,
}

/// A firmware page request (EQE type PAGE_REQUEST) waiting to be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageRequest {
    pub(crate) function_id: u16,
    pub(crate) ec_function: bool,
    pub(crate) release_all: bool,
    pub(crate) num_pages: i32,
}

/// Page requests served per look at the EQ while a command waits (the wait goes on until the
/// command completes; this only interleaves the looks at the ownership bit).
const PAGE_REQUESTS_PER_WAIT: usize = 4;

/// Objects made through a [`Device`] and not destroyed, by kind (see
/// [`Device::live_objects`]). An object counts from the create command that made it (or whose
/// outcome is unknown: a timeout, an output the driver refused) to the destroy command that
/// succeeded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Queue pairs.
    pub qps: u32,
    /// Completion queues.
    pub cqs: u32,
    /// Shared receive queues (RMPs or SRQs).
    pub srqs: u32,
    /// Memory keys.
    pub mkeys: u32,
    /// Event queues (completion channels among them).
    pub eqs: u32,
    /// Protection domains.
    pub pds: u32,
    /// UAR pages.
    pub uars: u32,
    /// Transport domains.
    pub tds: u32,
}

impl LiveObjects {
    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        *self == LiveObjects::default()
    }

    /// The counter an object command changes: `(counter, +1 for a create)`.
    fn counter(&mut self, op: u16) -> Option<(&mut u32, bool)> {
        use opcode as o;
        Some(match op {
            o::CREATE_QP => (&mut self.qps, true),
            o::DESTROY_QP => (&mut self.qps, false),
            o::CREATE_CQ => (&mut self.cqs, true),
            o::DESTROY_CQ => (&mut self.cqs, false),
            o::CREATE_SRQ | o::CREATE_RMP => (&mut self.srqs, true),
            o::DESTROY_SRQ | o::DESTROY_RMP => (&mut self.srqs, false),
            o::CREATE_MKEY => (&mut self.mkeys, true),
            o::DESTROY_MKEY => (&mut self.mkeys, false),
            o::CREATE_EQ => (&mut self.eqs, true),
            o::DESTROY_EQ => (&mut self.eqs, false),
            o::ALLOC_PD => (&mut self.pds, true),
            o::DEALLOC_PD => (&mut self.pds, false),
            o::ALLOC_UAR => (&mut self.uars, true),
            o::DEALLOC_UAR => (&mut self.uars, false),
            o::ALLOC_TRANSPORT_DOMAIN => (&mut self.tds, true),
            o::DEALLOC_TRANSPORT_DOMAIN => (&mut self.tds, false),
            _ => return None,
        })
    }
}

impl core::fmt::Display for LiveObjects {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let all = [
            ("QP", self.qps),
            ("CQ", self.cqs),
            ("SRQ", self.srqs),
            ("MKEY", self.mkeys),
            ("EQ", self.eqs),
            ("PD", self.pds),
            ("UAR", self.uars),
            ("TD", self.tds),
        ];
        let mut first = true;
        for (name, n) in all.into_iter().filter(|(_, n)| *n > 0) {
            if !first {
                f.write_str(", ")?;
            }
            write!(f, "{n} {name}")?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Most events kept in [`Pending`].
pub(crate) const PENDING_MAX: usize = 4096;

/// An mlx5 device (one PCI function) after bring-up.
///
/// Every method takes `&self`: command slots and object state sit behind `spin` mutexes. Objects
/// ([`Eq`](struct@crate::Eq), [`Cq`](crate::Cq), [`Qp`](crate::Qp), memory keys) are
/// plain values owned by the caller and handed back to the matching `destroy_*`.
///
/// Dropping the device without [`shutdown`](Self::shutdown) runs the same teardown, ignoring
/// its errors.
pub struct Device<R: RegisterIo, P: Platform> {
    pub(crate) regs: R,
    pub(crate) dma: Arc<dyn DmaAllocator>,
    pub(crate) platform: P,
    pub(crate) config: Config,
    pub(crate) cmdq: CmdQueue,
    pub(crate) caps: Caps,
    fw_version: (u16, u16, u16),
    issi: u16,
    pub(crate) pages: Mutex<PagePool>,
    pub(crate) event_eq: Mutex<Option<Eq>>,
    pub(crate) pending: Mutex<Pending>,
    uar: Option<u32>,
    pd: Option<u32>,
    td: Option<u32>,
    hca_enabled: bool,
    hca_initialized: bool,
    pub(crate) mkey_variant: AtomicU8,
    /// Completion channels made so far (their EQs take the completion vectors in turn).
    pub(crate) channels_made: core::sync::atomic::AtomicU32,
    heartbeat: Mutex<Option<(u32, u64)>>,
    /// Objects made and not destroyed (the driver's own included).
    live: Mutex<LiveObjects>,
    closed: bool,
    /// This device among the program's (objects that name their device, as an SRQ does).
    pub(crate) uid: u32,
}

/// A zeroed command input of `len` bytes with `opcode` and `op_mod` set.
pub(crate) fn cmd_in(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len.max(16)];
    mbox_in::OPCODE.set(&mut v, opcode as u32);
    mbox_in::OP_MOD.set(&mut v, op_mod as u32);
    v
}

fn read_be<R: RegisterIo>(regs: &R, off: usize) -> u32 {
    u32::from_be(regs.read32(off))
}

fn wait_initializing<R: RegisterIo, P: Platform>(
    regs: &R,
    platform: &P,
    config: &Config,
) -> Result<(), Error> {
    let deadline = platform.now_ns().saturating_add(config.init_timeout_ns);
    loop {
        let v = read_be(regs, init_seg::INITIALIZING);
        if v == u32::MAX {
            return Err(Error::DeviceGone);
        }
        if v & init_seg::INITIALIZING_BIT == 0 {
            return Ok(());
        }
        if platform.now_ns() >= deadline {
            return Err(Error::NotReady);
        }
        for _ in 0..config.poll_interval_hint.max(1) {
            platform.relax();
        }
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Brings the device up, in the order of rdma-core's `mlx5_vfio.c` (`docs/mlx5.md#bring-up`):
    ///
    /// 1. read `fw_rev` / `cmdif_rev_fw_sub`; wait for `initializing` to clear; require command
    ///    interface revision 5;
    /// 2. read `log_cmdq_size` / `log_cmdq_stride` (at most 32 entries of at least 64 bytes,
    ///    in one 4 KB page), allocate the command page, write `cmdq_addr_h` then
    ///    `cmdq_addr_l_sz`, barrier, wait for `initializing` again;
    /// 3. ENABLE_HCA; QUERY_ISSI → SET_ISSI(1) when supported (BAD_OP: stay at ISSI 0);
    /// 4. boot pages (QUERY_PAGES boot → MANAGE_PAGES GIVE); ACCESS_REG HOST_ENDIANNESS (not on
    ///    a virtual function, [`Config::is_vf`], as Linux);
    /// 5. QUERY_HCA_CAP general (current and max) → SET_HCA_CAP general (`cmdif_checksum = 0`,
    ///    `log_uar_page_sz = 0`, `log_max_qp` as [`Config::log_max_qp_wanted`]); when `atomic`
    ///    is set, the atomic page (current and max) and, when the device offers it,
    ///    SET_HCA_CAP(atomic) with host-endian atomic responses (Linux
    ///    `handle_hca_cap_atomic`); the RoCE page likewise when `roce` is set;
    /// 6. init pages; INIT_HCA; on Ethernet ports MODIFY_NIC_VPORT_CONTEXT `roce_en = 1`;
    /// 7. QUERY_HCA_CAP (current) again → [`Caps`], validated (general, RoCE, atomic);
    /// 8. ALLOC_UAR (the driver's UAR), CREATE_EQ (async events, command completions and page
    ///    requests; armed), ALLOC_PD (the driver's PD), ALLOC_TRANSPORT_DOMAIN.
    ///
    /// On failure everything done so far is undone (best effort) and the first error returned.
    pub fn probe(
        regs: R,
        dma: Arc<dyn DmaAllocator>,
        platform: P,
        config: Config,
    ) -> Result<Self, Error> {
        if config.bar_size < init_seg::SIZE as u64 {
            return Err(Error::InvalidArgument);
        }
        let fw_rev = read_be(&regs, init_seg::FW_REV);
        let sub = read_be(&regs, init_seg::CMDIF_REV_FW_SUB);
        if fw_rev == u32::MAX && sub == u32::MAX {
            return Err(Error::DeviceGone);
        }
        wait_initializing(&regs, &platform, &config)?;
        // Read again: what firmware shows before it finished initializing need not be final.
        let fw_rev = read_be(&regs, init_seg::FW_REV);
        let sub = read_be(&regs, init_seg::CMDIF_REV_FW_SUB);

        let rev = sub >> init_seg::CMDIF_REV_SHIFT;
        if rev != init_seg::CMDIF_REV {
            return Err(Error::UnsupportedCmdIf { rev });
        }
        let l = read_be(&regs, init_seg::CMDQ_ADDR_L_SZ);
        let log_size = ((l >> init_seg::LOG_CMDQ_SIZE_SHIFT) & init_seg::LOG_CMDQ_SIZE_MASK) as u8;
        let log_stride = (l & init_seg::LOG_CMDQ_STRIDE_MASK) as u8;
        if (1usize << log_size) > firmware_interface::cmd::MAX_ENTRIES
            || (1usize << log_stride) < firmware_interface::cmd::ENTRY_SIZE
            || log_size + log_stride > 12
        {
            return Err(Error::BadCmdqGeometry {
                log_size,
                log_stride,
            });
        }
        let cmdq = CmdQueue::new(
            &dma,
            log_size,
            log_stride,
            config.cmd_timeout_ns,
            config.poll_interval_hint,
        )?;
        let iova = cmdq.iova();
        regs.write32(init_seg::CMDQ_ADDR_H, ((iova >> 32) as u32).to_be());
        regs.write32(
            init_seg::CMDQ_ADDR_L_SZ,
            ((iova as u32) & init_seg::CMDQ_ADDR_L_MASK).to_be(),
        );
        mmio_wmb();

        let mut dev = Device {
            regs,
            dma,
            platform,
            config,
            cmdq,
            caps: Caps::default(),
            fw_version: (
                (fw_rev & 0xffff) as u16,
                (fw_rev >> 16) as u16,
                (sub & 0xffff) as u16,
            ),
            issi: 0,
            pages: Mutex::new(PagePool::default()),
            event_eq: Mutex::new(None),
            pending: Mutex::new(Pending {
                events: VecDeque::new(),
                page_requests: VecDeque::new(),
                lost: 0,
                error: None,
            }),
            uar: None,
            pd: None,
            td: None,
            hca_enabled: false,
            hca_initialized: false,
            mkey_variant: AtomicU8::new(0),
            channels_made: core::sync::atomic::AtomicU32::new(0),
            heartbeat: Mutex::new(None),
            live: Mutex::new(LiveObjects::default()),
            closed: false,
            uid: crate::srq::NEXT_DEV_UID.fetch_add(1, core::sync::atomic::Ordering::Relaxed),
        };
        match dev.bring_up() {
            Ok(()) => Ok(dev),
            Err(e) => {
                let _ = dev.teardown();
                dev.closed = true;
                Err(e)
            }
        }
    }

    fn bring_up(&mut self) -> Result<(), Error> {
        wait_initializing(&self.regs, &self.platform, &self.config)?;

        self.cmd(&cmd_in(opcode::ENABLE_HCA, 0, 16), 16)?;
        self.hca_enabled = true;

        self.set_issi()?;
        self.satisfy_pages(op_mod::PAGES_BOOT)?;
        // The PF's register: Linux's `set_hca_ctrl` returns at once on a VF.
        if !self.config.is_vf() {
            self.set_host_endianness()?;
        }
        let (port_type, roce, atomic_host) = self.handle_hca_caps()?;
        self.satisfy_pages(op_mod::PAGES_INIT)?;

        self.cmd(&cmd_in(opcode::INIT_HCA, 0, 32), 16)?;
        self.hca_initialized = true;

        if port_type == cmd_hca_cap::PORT_TYPE_ETH {
            self.enable_roce()?;
        }

        let cur = self.query_caps(op_mod::CAP_GENERAL, op_mod::QUERY_CAP_CUR)?;
        let mut caps = Caps::parse(cap_block(&cur)).map_err(|what| Error::BadOutput {
            opcode: opcode::QUERY_HCA_CAP,
            what,
        })?;
        if roce && caps.roce {
            let r = self.query_caps(op_mod::CAP_ROCE, op_mod::QUERY_CAP_CUR)?;
            caps.add_roce(cap_block(&r));
        }
        if caps.atomic {
            let a = self.query_caps(op_mod::CAP_ATOMIC, op_mod::QUERY_CAP_CUR)?;
            let bad = |what| Error::BadOutput {
                opcode: opcode::QUERY_HCA_CAP,
                what,
            };
            caps.add_atomic(cap_block(&a)).map_err(bad)?;
            let mode = atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(cap_block(&a));
            if atomic_host && mode != atomic_caps::REQ_MODE_HOST_ENDIANNESS {
                // The firmware accepted host-endian responses and does not apply them.
                return Err(bad(OutputFault::Capability {
                    field: crate::error::CapField::AtomicReqEndiannessMode,
                    value: mode,
                }));
            }
        }
        self.caps = caps;

        self.uar = Some(self.alloc_uar()?);

        let want = self.config.async_eq_entries.saturating_add(SPARE_EQES);
        let log = want.max(2).next_power_of_two().trailing_zeros().min(24) as u8;
        let log = log.min(self.caps.log_max_eq_sz).max(1);
        let eq = self.create_eq(log, DRIVER_EQ_EVENTS)?;
        *self.event_eq.get_mut() = Some(eq);

        self.pd = Some(self.alloc_pd()?);
        self.td = Some(self.alloc_transport_domain()?);
        Ok(())
    }

    fn set_issi(&mut self) -> Result<(), Error> {
        let out = match self.cmd(&cmd_in(opcode::QUERY_ISSI, 0, 16), query_issi_out::SIZE) {
            Ok(out) => out,
            Err(Error::Cmd {
                status: cmd_status::BAD_OP,
                ..
            }) => {
                // Firmware that does not know QUERY_ISSI only speaks ISSI 0.
                self.issi = 0;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let supported = query_issi_out::SUPPORTED_ISSI_DW0.get(&out);
        if supported & (1 << 1) != 0 {
            let mut inp = cmd_in(opcode::SET_ISSI, 0, 16);
            set_issi_in::CURRENT_ISSI.set(&mut inp, 1);
            self.cmd(&inp, 16)?;
            self.issi = 1;
        } else if supported & 1 != 0 || supported == 0 {
            self.issi = 0;
        } else {
            return Err(Error::NotSupported);
        }
        Ok(())
    }

    fn set_host_endianness(&self) -> Result<(), Error> {
        let len = 16 + host_endianness_reg::SIZE;
        let mut inp = cmd_in(opcode::ACCESS_REG, op_mod::ACCESS_REG_WRITE, len);
        access_register_in::REGISTER_ID.set(&mut inp, op_mod::REG_HOST_ENDIANNESS as u32);
        let he = if cfg!(target_endian = "big") {
            host_endianness_reg::HE_BIG
        } else {
            host_endianness_reg::HE_LITTLE
        };
        host_endianness_reg::HE
            .at(access_register_in::REGISTER_DATA.byte_off())
            .set(&mut inp, he as u32);
        self.cmd(&inp, len)?;
        Ok(())
    }

    /// QUERY_HCA_CAP of one page in one mode; the whole output (capability block at 0x10).
    pub(crate) fn query_caps(&self, cap_type: u16, mode: u16) -> Result<Vec<u8>, Error> {
        self.cmd(
            &cmd_in(opcode::QUERY_HCA_CAP, op_mod::query_cap(cap_type, mode), 16),
            query_hca_cap_out::SIZE,
        )
    }

    /// Queries and sets the general, atomic and RoCE capabilities (Linux's order); returns the
    /// current port type, the `roce` bit and whether atomic responses were set to host
    /// endianness.
    fn handle_hca_caps(&mut self) -> Result<(u32, bool, bool), Error> {
        let cur = self.query_caps(op_mod::CAP_GENERAL, op_mod::QUERY_CAP_CUR)?;
        let max = self.query_caps(op_mod::CAP_GENERAL, op_mod::QUERY_CAP_MAX)?;
        let (cur_b, max_b) = (cap_block(&cur), cap_block(&max));

        let mut set = cmd_in(
            opcode::SET_HCA_CAP,
            op_mod::set_cap(op_mod::CAP_GENERAL),
            set_hca_cap_in::SIZE,
        );
        let base = set_hca_cap_in::CAPABILITY.byte_off();
        copy_prefix(&mut set[base..], cur_b);
        cmd_hca_cap::CMDIF_CHECKSUM.at(base).set(&mut set, 0);
        cmd_hca_cap::LOG_UAR_PAGE_SZ.at(base).set(&mut set, 0);
        if let Some(want) = self.config.log_max_qp_wanted {
            let max_qp = cmd_hca_cap::LOG_MAX_QP.get(max_b).min(24);
            cmd_hca_cap::LOG_MAX_QP
                .at(base)
                .set(&mut set, (want as u32).min(max_qp));
        }
        self.cmd(&set, 16)?;
        let atomic_host = self.handle_atomic_caps(cur_b)?;

        let port_type = cmd_hca_cap::PORT_TYPE.get(cur_b);
        let roce = cmd_hca_cap::ROCE.get(cur_b) != 0;
        if roce {
            let rcur = self.query_caps(op_mod::CAP_ROCE, op_mod::QUERY_CAP_CUR)?;
            let rmax = self.query_caps(op_mod::CAP_ROCE, op_mod::QUERY_CAP_MAX)?;
            if roce_cap::SW_R_ROCE_SRC_UDP_PORT.get(cap_block(&rmax)) != 0 {
                let mut set = cmd_in(
                    opcode::SET_HCA_CAP,
                    op_mod::set_cap(op_mod::CAP_ROCE),
                    set_hca_cap_in::SIZE,
                );
                copy_prefix(&mut set[base..], cap_block(&rcur));
                roce_cap::SW_R_ROCE_SRC_UDP_PORT.at(base).set(&mut set, 1);
                self.cmd(&set, 16)?;
            }
        }
        Ok((port_type, roce, atomic_host))
    }

    /// The atomic capability page, as Linux's `handle_hca_cap_atomic`: when the device has
    /// atomics (`cmd_hca_cap.atomic`), query the page (current and max); when it supports
    /// host-endian responses (`supported_atomic_req_8B_endianness_mode_1`), SET_HCA_CAP(atomic)
    /// with a zeroed block whose `atomic_req_8B_endianness_mode` is host endianness. Returns
    /// whether it did.
    fn handle_atomic_caps(&self, general_cur: &[u8]) -> Result<bool, Error> {
        if cmd_hca_cap::ATOMIC.get(general_cur) == 0 {
            return Ok(false);
        }
        let acur = self.query_caps(op_mod::CAP_ATOMIC, op_mod::QUERY_CAP_CUR)?;
        self.query_caps(op_mod::CAP_ATOMIC, op_mod::QUERY_CAP_MAX)?;
        if atomic_caps::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.get(cap_block(&acur)) == 0 {
            return Ok(false);
        }
        let mut set = cmd_in(
            opcode::SET_HCA_CAP,
            op_mod::set_cap(op_mod::CAP_ATOMIC),
            set_hca_cap_in::SIZE,
        );
        atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE
            .at(set_hca_cap_in::CAPABILITY.byte_off())
            .set(&mut set, atomic_caps::REQ_MODE_HOST_ENDIANNESS);
        self.cmd(&set, 16)?;
        Ok(true)
    }

    fn enable_roce(&self) -> Result<(), Error> {
        let mut inp = cmd_in(
            opcode::MODIFY_NIC_VPORT_CONTEXT,
            0,
            modify_nic_vport_context_in::SIZE,
        );
        modify_nic_vport_context_in::FIELD_SELECT_ROCE_EN.set(&mut inp, 1);
        nic_vport_context::ROCE_EN
            .at(modify_nic_vport_context_in::NIC_VPORT_CONTEXT.byte_off())
            .set(&mut inp, 1);
        self.cmd(&inp, 16)?;
        Ok(())
    }

    /// Tears the device down (`docs/mlx5.md#teardown`): destroys the driver's EQ, deallocates its
    /// transport domain, PD and UAR, TEARDOWN_HCA, takes back every page given to the firmware
    /// (MANAGE_PAGES TAKE until none are left, bounded by [`Config::reclaim_timeout_ns`]),
    /// DISABLE_HCA, then frees the command queue.
    ///
    /// With objects still alive (see [`live_objects`](Self::live_objects)) the firmware
    /// refuses the graceful TEARDOWN_HCA; the driver then falls back as Linux does: TEARDOWN_HCA
    /// with the force profile (its `state` output checked), then the pages and DISABLE_HCA.
    /// After that the function reaches host memory no more, whatever a peer sends; the
    /// objects' memory stays leaked and the result is [`Error::ObjectsAlive`] with what was
    /// left, the driver's own objects whose destroy failed included (and whether the
    /// function was disabled in the end).
    ///
    /// Every step is attempted even if an earlier one failed; otherwise the first error is
    /// returned.
    pub fn shutdown(mut self) -> Result<(), Error> {
        let r = self.teardown();
        self.closed = true;
        r
    }

    fn teardown(&mut self) -> Result<(), Error> {
        // The caller's objects decide the report: with none, a failure of the driver's own
        // destroys is an ordinary error (a timeout, say).
        let callers = self.live_objects();
        let mut first: Option<Error> = None;
        let mut note = |r: Result<(), Error>| {
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        if let Some(eq) = self.event_eq.get_mut().take() {
            note(self.destroy_eq(eq));
        }
        if let Some(td) = self.td.take() {
            note(self.dealloc_transport_domain(td));
        }
        if let Some(pd) = self.pd.take() {
            note(self.dealloc_pd(pd));
        }
        if let Some(uar) = self.uar.take() {
            note(self.dealloc_uar(uar));
        }
        // What is left now (the driver's own objects whose destroy failed included).
        let left = *self.live.get_mut();
        if self.hca_initialized {
            self.hca_initialized = false;
            let graceful = self.teardown_hca(op_mod::TEARDOWN_GRACEFUL);
            if let Err(e) = graceful {
                // Objects left: the refusal is expected, and the force profile follows.
                if left.is_empty() {
                    note(Err(e));
                }
                if !self.cmdq.is_broken() {
                    note(self.teardown_hca(op_mod::TEARDOWN_FORCE));
                }
            }
        }
        note(self.reclaim_all_pages());
        let mut stopped = !self.hca_enabled;
        if self.hca_enabled {
            self.hca_enabled = false;
            let r = self.cmd(&cmd_in(opcode::DISABLE_HCA, 0, 16), 16).map(drop);
            stopped = r.is_ok();
            note(r);
        }
        // After a timeout the firmware may still own a slot: the queue memory then stays.
        self.cmdq.release();
        if !callers.is_empty() {
            return Err(Error::ObjectsAlive {
                live: left,
                stopped,
            });
        }
        first.map_or(Ok(()), Err)
    }

    /// TEARDOWN_HCA with `profile`; a force teardown's `state` must say it succeeded.
    fn teardown_hca(&self, profile: u16) -> Result<(), Error> {
        let mut inp = cmd_in(opcode::TEARDOWN_HCA, 0, 16);
        teardown_hca_in::PROFILE.set(&mut inp, profile as u32);
        let out = self.cmd(&inp, teardown_hca_out::SIZE)?;
        if profile == op_mod::TEARDOWN_FORCE
            && teardown_hca_out::STATE.get(&out) != teardown_hca_out::STATE_SUCCESS
        {
            return Err(Error::BadOutput {
                opcode: opcode::TEARDOWN_HCA,
                what: OutputFault::TeardownState {
                    state: teardown_hca_out::STATE.get(&out),
                },
            });
        }
        Ok(())
    }

    /// Validated general capabilities (current values after INIT_HCA).
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// Firmware version (major, minor, sub-minor) from the initialization segment.
    pub fn fw_version(&self) -> (u16, u16, u16) {
        self.fw_version
    }

    /// The ISSI in use (0 or 1).
    pub fn issi(&self) -> u16 {
        self.issi
    }

    /// The configuration the device was probed with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The DMA allocator.
    pub fn dma(&self) -> &Arc<dyn DmaAllocator> {
        &self.dma
    }

    /// BAR0 access.
    pub fn regs(&self) -> &R {
        &self.regs
    }

    /// The platform hooks.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The driver's own UAR (EQ and CQ doorbells).
    pub fn driver_uar(&self) -> Result<u32, Error> {
        self.uar.ok_or(Error::NotSupported)
    }

    /// The driver's PD.
    pub fn driver_pd(&self) -> Result<u32, Error> {
        self.pd.ok_or(Error::NotSupported)
    }

    /// The driver's transport domain.
    pub fn transport_domain(&self) -> Result<u32, Error> {
        self.td.ok_or(Error::NotSupported)
    }

    /// Number of 4 KB pages the firmware currently holds.
    pub fn fw_pages(&self) -> usize {
        self.pages.lock().len()
    }

    /// Checks the device's health (Linux `mlx5_health_check_fatal_sensors` plus the health
    /// syndrome): `fw_ver` all ones → [`Error::DeviceGone`]; `nic_interface` disabled or in
    /// software reset → [`Error::InterfaceDown`]; health `synd` != 0 → [`Error::Health`]; and,
    /// when [`Config::heartbeat_timeout_ns`] is set, a health counter that stopped →
    /// [`Error::HeartbeatLost`].
    pub fn check_health(&self) -> Result<(), Error> {
        let fw_ver = read_be(&self.regs, init_seg::HEALTH + health::FW_VER);
        if fw_ver == health::FW_VER_DEAD {
            return Err(Error::DeviceGone);
        }
        let nic_if = (read_be(&self.regs, init_seg::CMDQ_ADDR_L_SZ) >> init_seg::NIC_IF_SHIFT)
            & init_seg::NIC_IF_MASK;
        if nic_if == init_seg::NIC_IF_DISABLED || nic_if == init_seg::NIC_IF_SW_RESET {
            return Err(Error::InterfaceDown {
                nic_interface: nic_if as u8,
            });
        }
        // Word at health 0x3c: irisc_index, synd, ext_synd (BE16).
        let w = read_be(&self.regs, init_seg::HEALTH + health::IRISC_INDEX);
        let syndrome = (w >> 16) as u8;
        if syndrome != 0 {
            return Err(Error::Health { syndrome });
        }
        if let Some(limit) = self.config.heartbeat_timeout_ns {
            let count =
                read_be(&self.regs, init_seg::HEALTH_COUNTER) & init_seg::HEALTH_COUNTER_MASK;
            let now = self.platform.now_ns();
            let mut hb = self.heartbeat.lock();
            match *hb {
                Some((last, since)) if last == count => {
                    if now.saturating_sub(since) > limit {
                        return Err(Error::HeartbeatLost);
                    }
                }
                _ => *hb = Some((count, now)),
            }
        }
        Ok(())
    }

    /// Executes a raw command on the ordinary slot: `input` is the whole message (16-byte
    /// header first, at least 16 bytes), `out_len` the output length wanted (at least 16, at
    /// most [`MAX_MSG_LEN`](crate::MAX_MSG_LEN)). The output header is checked: a non-zero
    /// status is [`Error::Cmd`]. Nothing of the command-specific output is validated.
    #[cfg(any(test, feature = "raw"))]
    pub(crate) fn exec(&self, input: &[u8], out_len: usize) -> Result<Vec<u8>, Error> {
        self.cmd(input, out_len)
    }

    /// A command on the ordinary slot; drains command-completion EQEs afterwards.
    pub(crate) fn cmd(&self, input: &[u8], out_len: usize) -> Result<Vec<u8>, Error> {
        self.cmd_on(SlotKind::Ordinary, input, out_len)
    }

    /// A command on the slot of `kind`. While an ordinary command waits, the driver's EQ is
    /// looked at between two polls of the ownership bit and the firmware's page requests are
    /// served on the page slot (firmware may need pages to complete the command); a page
    /// command's wait does nothing else.
    pub(crate) fn cmd_on(
        &self,
        kind: SlotKind,
        input: &[u8],
        out_len: usize,
    ) -> Result<Vec<u8>, Error> {
        let serve = kind == SlotKind::Ordinary && self.cmdq.has_page_slot();
        let waiting = || {
            if serve {
                self.serve_pages_while_waiting();
            }
        };
        let r = self.cmdq.exec(
            &self.regs,
            &self.platform,
            &self.dma,
            kind,
            input,
            out_len,
            &waiting,
        );
        self.count_objects(input, &r);
        self.drain_driver_eq();
        r
    }

    /// Books an object command: a create counts its object while the device may hold it (it
    /// succeeded, or its outcome is unknown), a destroy that succeeded uncounts it.
    fn count_objects(&self, input: &[u8], r: &Result<Vec<u8>, Error>) {
        let op = mbox_in::OPCODE.get(input) as u16;
        let mut live = self.live.lock();
        let Some((n, create)) = live.counter(op) else {
            return;
        };
        let made = match r {
            Ok(_) => true,
            Err(e) => crate::device_may_hold(e),
        };
        if create && made {
            *n = n.saturating_add(1);
        } else if !create && r.is_ok() {
            *n = n.saturating_sub(1);
        }
    }

    /// The objects made through this device (by the caller, through any API, raw commands
    /// included) that were not destroyed yet: what [`shutdown`](Self::shutdown) would report
    /// as [`Error::ObjectsAlive`]. The driver's own EQ, PD, UAR and transport domain are not
    /// counted.
    pub fn live_objects(&self) -> LiveObjects {
        let mut l = *self.live.lock();
        let own = |n: &mut u32, held: bool| *n = n.saturating_sub(held as u32);
        own(&mut l.eqs, self.event_eq.lock().is_some());
        own(&mut l.pds, self.pd.is_some());
        own(&mut l.uars, self.uar.is_some());
        own(&mut l.tds, self.td.is_some());
        l
    }

    /// The wait hook of an ordinary command: moves the driver EQ's events into the pending
    /// queues and serves a few page requests; an error is kept for [`Device::poll_events`].
    fn serve_pages_while_waiting(&self) {
        self.drain_driver_eq();
        if let Err(e) = self.serve_page_requests(PAGE_REQUESTS_PER_WAIT) {
            self.pending.lock().error.get_or_insert(e);
        }
    }

    /// Allocates a UAR page. Its index is checked against the BAR: the page must lie inside
    /// [`Config::bar_size`] and not over the initialization segment.
    pub(crate) fn alloc_uar(&self) -> Result<u32, Error> {
        let out = self.cmd(&cmd_in(opcode::ALLOC_UAR, 0, 16), 16)?;
        let uar = alloc_uar_out::UAR.get(&out);
        let raw = Field::bytes(0x8, 4).get(&out);
        if raw != uar || !uar_page_ok(uar, self.config.bar_size) {
            return Err(Error::BadOutput {
                opcode: opcode::ALLOC_UAR,
                what: OutputFault::UarIndex { value: raw },
            });
        }
        Ok(uar)
    }

    /// Frees a UAR page (not the driver's own).
    pub(crate) fn dealloc_uar(&self, uar: u32) -> Result<(), Error> {
        if uar > 0xff_ffff {
            return Err(Error::InvalidArgument);
        }
        if self.uar == Some(uar) {
            return Err(Error::Busy);
        }
        let mut inp = cmd_in(opcode::DEALLOC_UAR, 0, 16);
        dealloc_uar_in::UAR.set(&mut inp, uar);
        self.cmd(&inp, 16).map(drop)
    }

    /// Allocates a protection domain.
    pub(crate) fn alloc_pd(&self) -> Result<u32, Error> {
        let out = self.cmd(&cmd_in(opcode::ALLOC_PD, 0, 16), 16)?;
        self.object_number(
            opcode::ALLOC_PD,
            &out,
            alloc_pd_out::PD,
            self.caps.log_max_pd,
        )
    }

    /// Frees a protection domain (not the driver's own).
    pub(crate) fn dealloc_pd(&self, pd: u32) -> Result<(), Error> {
        if pd > 0xff_ffff {
            return Err(Error::InvalidArgument);
        }
        if self.pd == Some(pd) {
            return Err(Error::Busy);
        }
        let mut inp = cmd_in(opcode::DEALLOC_PD, 0, 16);
        dealloc_pd_in::PD.set(&mut inp, pd);
        self.cmd(&inp, 16).map(drop)
    }

    /// Allocates a transport domain.
    pub(crate) fn alloc_transport_domain(&self) -> Result<u32, Error> {
        let out = self.cmd(&cmd_in(opcode::ALLOC_TRANSPORT_DOMAIN, 0, 16), 16)?;
        self.object_number(
            opcode::ALLOC_TRANSPORT_DOMAIN,
            &out,
            alloc_transport_domain_out::TRANSPORT_DOMAIN,
            self.caps.log_max_transport_domain,
        )
    }

    /// Frees a transport domain (not the driver's own).
    pub(crate) fn dealloc_transport_domain(&self, td: u32) -> Result<(), Error> {
        if td > 0xff_ffff {
            return Err(Error::InvalidArgument);
        }
        if self.td == Some(td) {
            return Err(Error::Busy);
        }
        let mut inp = cmd_in(opcode::DEALLOC_TRANSPORT_DOMAIN, 0, 16);
        dealloc_transport_domain_in::TRANSPORT_DOMAIN.set(&mut inp, td);
        self.cmd(&inp, 16).map(drop)
    }

    /// Reads an object number from a command output: the whole dword holding `field` must
    /// hold nothing else (the bits around a 24-bit number are reserved), and the number must be
    /// below `2^log_max`.
    pub(crate) fn object_number(
        &self,
        opcode: u16,
        out: &[u8],
        field: Field,
        log_max: u8,
    ) -> Result<u32, Error> {
        let n = field.get(out);
        let raw = field
            .dword_bits()
            .map_or(n, |(dw, _, _)| Field::bytes(dw, 4).get(out));
        if raw != n || !Caps::fits(n, log_max) {
            return Err(Error::BadOutput {
                opcode,
                what: OutputFault::ObjectNumber { value: raw },
            });
        }
        Ok(n)
    }

    /// Writes RoCE GID table entry `index` (SET_ROCE_ADDRESS): a RoCE v2 address, IPv4 when
    /// `gid` is an IPv4-mapped IPv6 address, IPv6 otherwise; an all-zero `gid` clears the entry.
    pub fn set_roce_gid(&self, index: u16, gid: [u8; 16], mac: [u8; 6]) -> Result<(), Error> {
        if self.caps.port_type != PortType::Ethernet {
            return Err(Error::NotSupported);
        }
        if self.caps.roce_address_table_size != 0 && index >= self.caps.roce_address_table_size {
            return Err(Error::InvalidArgument);
        }
        let mut inp = cmd_in(opcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::SIZE);
        set_roce_address_in::ROCE_ADDRESS_INDEX.set(&mut inp, index as u32);
        if self.caps.num_vhca_ports > 0 {
            set_roce_address_in::VHCA_PORT_NUM.set(&mut inp, 1);
        }
        if gid != [0u8; 16] {
            let base = set_roce_address_in::ROCE_ADDRESS.byte_off();
            if let Some(d) = roce_addr_layout::SOURCE_L3_ADDRESS
                .at(base)
                .slice_mut(&mut inp)
            {
                d.copy_from_slice(&gid);
            }
            roce_addr_layout::SOURCE_MAC_47_32
                .at(base)
                .set(&mut inp, u16::from_be_bytes([mac[0], mac[1]]) as u32);
            roce_addr_layout::SOURCE_MAC_31_0.at(base).set(
                &mut inp,
                u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]),
            );
            let v4_mapped = gid[..10] == [0u8; 10] && gid[10] == 0xff && gid[11] == 0xff;
            roce_addr_layout::ROCE_L3_TYPE.at(base).set(
                &mut inp,
                if v4_mapped {
                    roce_addr_layout::L3_TYPE_IPV4
                } else {
                    roce_addr_layout::L3_TYPE_IPV6
                },
            );
            roce_addr_layout::ROCE_VERSION
                .at(base)
                .set(&mut inp, roce_addr_layout::ROCE_VERSION_V2);
        }
        self.cmd(&inp, 16).map(drop)
    }

    /// The port's permanent MAC address (QUERY_NIC_VPORT_CONTEXT; Ethernet ports only).
    pub fn mac(&self) -> Result<[u8; 6], Error> {
        if self.caps.port_type != PortType::Ethernet {
            return Err(Error::NotSupported);
        }
        let out = self.cmd(
            &cmd_in(opcode::QUERY_NIC_VPORT_CONTEXT, 0, 16),
            query_nic_vport_context_out::SIZE,
        )?;
        let mut mac = [0u8; 6];
        let src = nic_vport_context::PERMANENT_MAC
            .at(query_nic_vport_context_out::NIC_VPORT_CONTEXT.byte_off())
            .slice(&out)
            .ok_or(Error::InvalidArgument)?;
        mac.copy_from_slice(src);
        Ok(mac)
    }

    /// Whether the port's vport is up (QUERY_VPORT_STATE, VNIC vport).
    pub fn port_up(&self) -> Result<bool, Error> {
        let out = self.cmd(
            &cmd_in(opcode::QUERY_VPORT_STATE, op_mod::VPORT_STATE_VNIC, 16),
            16,
        )?;
        Ok(query_vport_state_out::STATE.get(&out) == query_vport_state_out::STATE_UP)
    }
}

/// Copies as much of `src` as fits at the start of `dst`.
pub(crate) fn copy_prefix(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    dst[..n].copy_from_slice(&src[..n]);
}

/// The 4096-byte capability block of a QUERY_HCA_CAP output (the output is always exactly
/// `query_hca_cap_out::SIZE` long: the command interface returns what was asked for).
pub(crate) fn cap_block(out: &[u8]) -> &[u8] {
    query_hca_cap_out::CAPABILITY.slice(out).unwrap_or(&[])
}

impl<R: RegisterIo, P: Platform> core::fmt::Debug for Device<R, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Device")
            .field("fw_version", &self.fw_version)
            .field("issi", &self.issi)
            .field("uar", &self.uar)
            .field("pd", &self.pd)
            .field("td", &self.td)
            .field("cmdq_broken", &self.cmdq.is_broken())
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl<R: RegisterIo, P: Platform> Drop for Device<R, P> {
    fn drop(&mut self) {
        if !self.closed {
            // Best effort: there is no one to report to.
            let _ = self.teardown();
            self.closed = true;
        }
    }
}
