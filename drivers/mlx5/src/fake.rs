//! A small fake mlx5 device for tests (the `fake` feature; always on in this crate's own
//! tests): a register file whose command doorbell parses the entry and mailbox chains from
//! [`HeapDma`] memory and answers with a tiny firmware model (enough for bring-up and the
//! object commands) or with whatever a test hook says, lies included. It does not execute
//! work requests: data-path tests play the device themselves (they read the WQEs and doorbell
//! records the driver wrote, and write CQEs into the CQ rings).
//!
//! ```
//! let b = mlx5::fake::bench();
//! let dev = b.probe().unwrap();
//! assert_eq!(dev.fw_version(), (14, 32, 1010));
//! dev.shutdown().unwrap();
//! ```
//!
//! Every accessor panics on a driver bug (an access to unmapped memory, a malformed command
//! entry): it is test code.

use std::boxed::Box;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::vec;
use std::vec::Vec;

use firmware_interface::cmd::{self, CmdLayout};
use firmware_interface::cmds::*;
use firmware_interface::ctx::{cmd_hca_cap as cap, qpc, roce_cap};
use firmware_interface::init_seg::{self, health};
use firmware_interface::{Field, eqe, mbox_in, op_mod, opcode};
use nic_hal::{DmaAllocator, HeapDma, Platform, RegisterIo};
use verbs::{AccessFlags, AhAttr, Gid, MemoryRegion, Provider, QpCap, QpInitAttr, QpType, Sge};

use crate::{Config, Device, Error};

// ------------------------------------------------------------------------------------------
// The fake device

/// What the fake answers to one command.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// The output message (header included); padded to the requested length.
    pub out: Vec<u8>,
    /// Delivery status written to the entry (0 = delivered).
    pub delivery: u8,
    /// Never hand the entry back (a command timeout).
    pub hang: bool,
    /// Corrupt the token of this output mailbox block.
    pub bad_token_block: Option<usize>,
    /// Corrupt the block number of this output mailbox block.
    pub bad_block_num: Option<usize>,
}

impl Reply {
    /// A delivered, successful reply with output `out`.
    pub fn ok(out: Vec<u8>) -> Reply {
        Reply {
            out,
            ..Default::default()
        }
    }
}

/// A test hook: sees every command input and the output length, answers or defers to the firmware model (`None`).
pub type Hook = Box<dyn FnMut(&[u8], usize) -> Option<Reply> + Send>;

/// An EQ as the fake firmware knows it.
pub struct FakeEq {
    /// Device address of the ring.
    pub base: u64,
    /// log2 of the number of entries.
    pub log_size: u8,
    /// Producer index (EQEs written).
    pub pi: u32,
    /// Consumer index from the last doorbell.
    pub ci: u32,
    /// Event types subscribed.
    pub mask: u64,
}

/// The fake device: register file, command processor and a tiny firmware model.
pub struct Fw {
    /// Host memory (also the IOMMU: the fake only touches mapped buffers).
    pub dma: Arc<HeapDma>,
    /// Init segment `fw_rev`.
    pub fw_rev: u32,
    /// Init segment `cmdif_rev_fw_sub`.
    pub cmdif: u32,
    /// `log_cmdq_size`.
    pub log_size: u32,
    /// `log_cmdq_stride`.
    pub log_stride: u32,
    /// `nic_interface` bits.
    pub nic_if: u32,
    /// Reads of `initializing` that still return the bit set.
    pub init_reads_left: u32,
    /// `initializing` never clears.
    pub init_stuck: bool,
    /// Latched `cmdq_addr_h`.
    pub cmdq_h: u32,
    /// Latched `cmdq_addr_l_sz`.
    pub cmdq_l: u32,
    /// Health buffer `fw_ver`.
    pub health_fw_ver: u32,
    /// Health syndrome.
    pub health_synd: u8,
    /// Command doorbells rung.
    pub doorbells: u32,
    /// The test hook, if any.
    pub hook: Option<Hook>,
    /// Every command executed, as (opcode, op_mod).
    pub log: Vec<(u16, u16)>,
    /// The last input of each opcode.
    pub inputs: BTreeMap<u16, Vec<u8>>,
    /// Pages QUERY_PAGES asks for at boot.
    pub boot_pages: i32,
    /// Pages QUERY_PAGES asks for at init.
    pub init_pages: i32,
    /// Pages the firmware holds.
    pub pages: BTreeSet<u64>,
    /// Last object number handed out.
    pub next_obj: u32,
    /// EQs by number.
    pub eqs: BTreeMap<u32, FakeEq>,
    /// QPs by number: (state, service type).
    pub qp_state: BTreeMap<u32, (u32, u32)>,
    /// 32-bit writes to UAR pages (offset, host value), 64-bit writes by their low word.
    pub uar_writes: Vec<(usize, u32)>,
    /// Every write at or above the first UAR page: (BAR offset, bytes as stored), for
    /// 32-bit, 64-bit and block (BlueFlame) writes alike.
    pub mmio: Vec<(usize, Vec<u8>)>,
    /// The RoCE address table: index -> `roce_addr_layout` as SET_ROCE_ADDRESS wrote it.
    pub roce_addrs: BTreeMap<u32, Vec<u8>>,
    /// The general capability block QUERY_HCA_CAP returns.
    pub caps: Vec<u8>,
    /// The atomic capability block QUERY_HCA_CAP returns (SET_HCA_CAP(atomic) updates its
    /// response mode).
    pub atomic_caps: Vec<u8>,
}

/// The big-endian u32 at `off`.
pub fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().unwrap())
}

/// The big-endian u64 at `off`.
pub fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(b[off..off + 8].try_into().unwrap())
}

/// An atomic capability block: 8-byte CAS and FAA, host-endian responses offered.
pub fn default_atomic_caps() -> Vec<u8> {
    use firmware_interface::ctx::atomic_caps as at;
    let mut c = vec![0u8; 4096];
    at::ATOMIC_OPERATIONS.set(&mut c, at::OPS_CMP_SWAP | at::OPS_FETCH_ADD);
    at::ATOMIC_SIZE_QP.set(&mut c, at::SIZE_QP_8BYTES);
    at::SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1.set(&mut c, 1);
    c
}

/// A capability block describing a small RoCE device.
pub fn default_caps() -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    let s = |c: &mut Vec<u8>, f: Field, v: u32| assert!(f.set(c, v));
    s(&mut c, cap::LOG_MAX_QP, 10);
    s(&mut c, cap::LOG_MAX_QP_SZ, 12);
    s(&mut c, cap::LOG_MAX_SRQ, 10);
    s(&mut c, cap::LOG_MAX_SRQ_SZ, 12);
    s(&mut c, cap::LOG_MAX_CQ, 12);
    s(&mut c, cap::LOG_MAX_CQ_SZ, 16);
    s(&mut c, cap::LOG_MAX_EQ, 4);
    s(&mut c, cap::LOG_MAX_EQ_SZ, 12);
    s(&mut c, cap::LOG_MAX_MKEY, 16);
    s(&mut c, cap::LOG_MAX_PD, 16);
    s(&mut c, cap::LOG_MAX_TRANSPORT_DOMAIN, 16);
    s(&mut c, cap::LOG_MAX_MSG, 30);
    s(&mut c, cap::LOG_MAX_RA_REQ_QP, 4);
    s(&mut c, cap::LOG_MAX_RA_RES_QP, 4);
    s(&mut c, cap::PORT_TYPE, cap::PORT_TYPE_ETH);
    s(&mut c, cap::NUM_PORTS, 1);
    s(&mut c, cap::MAX_WQE_SZ_SQ, 1024);
    s(&mut c, cap::MAX_WQE_SZ_RQ, 512);
    s(&mut c, cap::LOG_BF_REG_SIZE, 9);
    s(&mut c, cap::CMDIF_CHECKSUM, 3);
    s(&mut c, cap::ROCE, 1);
    s(&mut c, cap::ATOMIC, 1);
    s(&mut c, cap::BF, 1);
    s(&mut c, cap::RC, 1);
    s(&mut c, cap::UD, 1);
    c
}

impl Fw {
    /// A fresh device over `dma`.
    pub fn new(dma: Arc<HeapDma>) -> Fw {
        Fw {
            dma,
            fw_rev: (32 << 16) | 14,
            cmdif: (5 << 16) | 1010,
            log_size: 5,
            log_stride: 6,
            nic_if: 0,
            init_reads_left: 3,
            init_stuck: false,
            cmdq_h: 0,
            cmdq_l: 0,
            health_fw_ver: 0x0e20_03f2,
            health_synd: 0,
            doorbells: 0,
            hook: None,
            log: Vec::new(),
            inputs: BTreeMap::new(),
            boot_pages: 5,
            init_pages: 70,
            pages: BTreeSet::new(),
            next_obj: 0x10,
            eqs: BTreeMap::new(),
            qp_state: BTreeMap::new(),
            uar_writes: Vec::new(),
            mmio: Vec::new(),
            roce_addrs: BTreeMap::new(),
            caps: default_caps(),
            atomic_caps: default_atomic_caps(),
        }
    }

    /// DMA read; panics on an unmapped address (a driver bug in a test).
    pub fn read(&self, iova: u64, len: usize) -> Vec<u8> {
        let p = self
            .dma
            .translate(iova, len)
            .unwrap_or_else(|| panic!("device read of unmapped {iova:#x}+{len}"));
        let mut v = vec![0u8; len];
        // SAFETY: `translate` checked that `len` bytes at `p` lie inside one live buffer.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), v.as_mut_ptr(), len) };
        v
    }

    /// DMA write; panics on an unmapped address.
    pub fn write(&self, iova: u64, data: &[u8]) {
        let p = self
            .dma
            .translate(iova, data.len())
            .unwrap_or_else(|| panic!("device write of unmapped {iova:#x}"));
        // SAFETY: `translate` checked that the range lies inside one live buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr(), data.len()) };
    }

    /// Device address of the command queue.
    pub fn cmdq_base(&self) -> u64 {
        ((self.cmdq_h as u64) << 32) | (self.cmdq_l & 0xffff_f000) as u64
    }

    /// The command doorbell: executes every slot named in `mask`.
    pub fn doorbell(&mut self, mask: u32) {
        self.doorbells += 1;
        for slot in 0..32 {
            if mask & (1 << slot) != 0 {
                self.execute(slot);
            }
        }
    }

    /// Executes command slot `slot`.
    pub fn execute(&mut self, slot: u32) {
        let entry = self.cmdq_base() + ((slot as u64) << self.log_stride);
        let raw: [u8; 64] = self.read(entry, 64).try_into().unwrap();
        assert_eq!(cmd::signature(&raw), 0, "entry signature");
        let lay = CmdLayout::from_bytes(&raw);
        assert_eq!(lay.type_, cmd::XPORT_TYPE_PCI);
        assert!(lay.hw_owned());
        assert_ne!(lay.token, 0);
        let inlen = lay.inlen.get() as usize;
        let outlen = lay.outlen.get() as usize;

        // Gather the input through the chain, checking tokens and block numbers.
        let mut input = lay.in_.to_vec();
        let mut next = lay.in_ptr.get();
        let mut k = 0;
        while input.len() < inlen {
            assert_eq!(next % cmd::MAILBOX_ALIGN as u64, 0);
            let b = self.read(next, cmd::MAILBOX_SIZE);
            assert_eq!(b[cmd::MAILBOX_TOKEN_OFFSET], lay.token);
            assert_eq!(be32(&b, cmd::MAILBOX_BLOCK_NUM_OFFSET), k);
            let n = (inlen - input.len()).min(cmd::MAILBOX_DATA);
            input.extend_from_slice(&b[..n]);
            next = be64(&b, cmd::MAILBOX_NEXT_OFFSET);
            k += 1;
        }
        assert_eq!(next, 0, "input chain longer than inlen");
        input.truncate(inlen);

        let opc = mbox_in::OPCODE.get(&input) as u16;
        self.log.push((opc, mbox_in::OP_MOD.get(&input) as u16));
        self.inputs.insert(opc, input.clone());

        let mut hook = self.hook.take();
        let reply = hook
            .as_mut()
            .and_then(|h| h(&input, outlen))
            .unwrap_or_else(|| self.firmware(&input, outlen));
        self.hook = hook;
        if reply.hang {
            return;
        }
        let mut out = reply.out;
        out.resize(outlen.max(16), 0);

        // Scatter the output.
        self.write(entry + 0x20, &out[..16]);
        let mut next = lay.out_ptr.get();
        let mut off = 16;
        let mut k = 0;
        while off < outlen {
            let b = self.read(next, cmd::MAILBOX_SIZE);
            assert_eq!(b[cmd::MAILBOX_TOKEN_OFFSET], lay.token);
            assert_eq!(be32(&b, cmd::MAILBOX_BLOCK_NUM_OFFSET), k as u32);
            let n = (outlen - off).min(cmd::MAILBOX_DATA);
            self.write(next, &out[off..off + n]);
            if reply.bad_token_block == Some(k) {
                self.write(next + cmd::MAILBOX_TOKEN_OFFSET as u64, &[lay.token ^ 0x5a]);
            }
            if reply.bad_block_num == Some(k) {
                self.write(
                    next + cmd::MAILBOX_BLOCK_NUM_OFFSET as u64,
                    &7u32.to_be_bytes(),
                );
            }
            next = be64(&b, cmd::MAILBOX_NEXT_OFFSET);
            off += n;
            k += 1;
        }
        self.write(
            entry + cmd::STATUS_OWN_OFFSET as u64,
            &[reply.delivery << 1],
        );

        // Like the model: a CMD EQE on every EQ subscribed to it.
        let eqns: Vec<u32> = self
            .eqs
            .iter()
            .filter(|(_, e)| e.mask & eqe::event::mask(eqe::event::CMD) != 0)
            .map(|(n, _)| *n)
            .collect();
        for n in eqns {
            let mut e = [0u8; 64];
            e[eqe::TYPE] = eqe::event::CMD;
            e[eqe::CMD_VECTOR..eqe::CMD_VECTOR + 4].copy_from_slice(&(1u32 << slot).to_be_bytes());
            self.post_eqe(n, e);
        }
    }

    /// Writes an EQE to EQ `eqn` with the owner bit of the current pass.
    pub fn post_eqe(&mut self, eqn: u32, mut e: [u8; 64]) {
        let (base, pi, log) = {
            let q = self.eqs.get_mut(&eqn).unwrap();
            assert!(
                q.pi.wrapping_sub(q.ci) < 1 << q.log_size,
                "EQ {eqn} overrun"
            );
            let r = (q.base, q.pi, q.log_size);
            q.pi += 1;
            r
        };
        let idx = pi & ((1 << log) - 1);
        e[eqe::OWNER] = ((pi >> log) & 1) as u8;
        self.write(base + idx as u64 * 64, &e);
    }

    /// A fresh object number.
    pub fn obj(&mut self) -> u32 {
        self.next_obj += 1;
        self.next_obj
    }

    /// The fake firmware.
    pub fn firmware(&mut self, inp: &[u8], outlen: usize) -> Reply {
        let mut out = vec![0u8; outlen.max(16)];
        let opc = mbox_in::OPCODE.get(inp) as u16;
        let om = mbox_in::OP_MOD.get(inp) as u16;
        match opc {
            opcode::QUERY_ISSI => {
                query_issi_out::SUPPORTED_ISSI_DW0.set(&mut out, 0b11);
            }
            opcode::QUERY_PAGES => {
                let n = if om == op_mod::PAGES_BOOT {
                    self.boot_pages
                } else {
                    self.init_pages
                };
                query_pages_out::NUM_PAGES.set(&mut out, n as u32);
            }
            opcode::MANAGE_PAGES if om == op_mod::MANAGE_PAGES_GIVE => {
                let n = manage_pages_in::INPUT_NUM_ENTRIES.get(inp) as usize;
                assert_eq!(inp.len(), 16 + 8 * n);
                for i in 0..n {
                    let a = be64(inp, 16 + 8 * i);
                    assert_eq!(a % 4096, 0);
                    self.read(a, 4096);
                    assert!(self.pages.insert(a), "page given twice");
                }
            }
            opcode::MANAGE_PAGES if om == op_mod::MANAGE_PAGES_TAKE => {
                let n = manage_pages_in::INPUT_NUM_ENTRIES.get(inp) as usize;
                let give: Vec<u64> = self.pages.iter().take(n).copied().collect();
                manage_pages_out::OUTPUT_NUM_ENTRIES.set(&mut out, give.len() as u32);
                for (i, a) in give.iter().enumerate() {
                    self.pages.remove(a);
                    out[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_be_bytes());
                }
            }
            opcode::QUERY_HCA_CAP => {
                let cap_type = om >> 1;
                if cap_type == op_mod::CAP_ROCE {
                    roce_cap::ROCE_ADDRESS_TABLE_SIZE.at(16).set(&mut out, 16);
                    roce_cap::SW_R_ROCE_SRC_UDP_PORT.at(16).set(&mut out, 1);
                } else if cap_type == op_mod::CAP_ATOMIC {
                    out[16..16 + 4096].copy_from_slice(&self.atomic_caps);
                } else {
                    out[16..16 + 4096].copy_from_slice(&self.caps);
                }
            }
            opcode::SET_HCA_CAP if om == op_mod::set_cap(op_mod::CAP_ATOMIC) => {
                use firmware_interface::ctx::atomic_caps as at;
                let mode = at::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(&inp[16..]);
                at::ATOMIC_REQ_8B_ENDIANNESS_MODE.set(&mut self.atomic_caps, mode);
            }
            opcode::SET_HCA_CAP if om == 0 => {
                assert_eq!(inp.len(), 4112);
                let c = &inp[16..];
                assert_eq!(cap::CMDIF_CHECKSUM.get(c), 0);
                self.caps.copy_from_slice(c);
            }
            opcode::ALLOC_UAR => {
                let u = self.obj();
                alloc_uar_out::UAR.set(&mut out, u);
            }
            opcode::ALLOC_PD | opcode::ALLOC_TRANSPORT_DOMAIN | opcode::CREATE_CQ => {
                let n = self.obj();
                alloc_pd_out::PD.set(&mut out, n);
            }
            opcode::CREATE_MKEY => {
                let n = self.obj();
                create_mkey_out::MKEY_INDEX.set(&mut out, n);
            }
            opcode::CREATE_EQ => {
                let n = self.obj() & 0xff;
                let ctx = create_eq_in::EQ_CONTEXT_ENTRY.byte_off();
                let log = firmware_interface::ctx::eqc::LOG_EQ_SIZE.at(ctx).get(inp) as u8;
                self.eqs.insert(
                    n,
                    FakeEq {
                        base: be64(inp, create_eq_in::PAS.byte_off()),
                        log_size: log,
                        pi: 0,
                        ci: 0,
                        mask: create_eq_in::EVENT_BITMASK_0.get64(inp),
                    },
                );
                create_eq_out::EQ_NUMBER.set(&mut out, n);
            }
            opcode::DESTROY_EQ => {
                self.eqs.remove(&destroy_eq_in::EQ_NUMBER.get(inp));
            }
            opcode::CREATE_QP => {
                let st = qpc::ST.at(create_qp_in::QPC.byte_off()).get(inp);
                // QP1 (GSI) is number 1, once.
                let n = if st != qpc::ST_QP1 {
                    self.obj()
                } else if self.qp_state.contains_key(&1) {
                    out[0] = firmware_interface::cmd_status::NO_RES;
                    return Reply::ok(out);
                } else {
                    1
                };
                self.qp_state.insert(n, (qpc::STATE_RST, st));
                create_qp_out::QPN.set(&mut out, n);
            }
            opcode::RST2INIT_QP
            | opcode::INIT2RTR_QP
            | opcode::RTR2RTS_QP
            | opcode::RTS2RTS_QP
            | opcode::QP_2ERR
            | opcode::QP_2RST => {
                let qpn = rst2init_qp_in::QPN.get(inp);
                let s = match opc {
                    opcode::RST2INIT_QP => qpc::STATE_INIT,
                    opcode::INIT2RTR_QP => qpc::STATE_RTR,
                    opcode::QP_2ERR => qpc::STATE_ERR,
                    opcode::QP_2RST => qpc::STATE_RST,
                    _ => qpc::STATE_RTS,
                };
                self.qp_state.get_mut(&qpn).unwrap().0 = s;
            }
            opcode::QUERY_QP => {
                let qpn = query_qp_in::QPN.get(inp);
                let (s, st) = self.qp_state[&qpn];
                qpc::STATE.at(0x18).set(&mut out, s);
                qpc::ST.at(0x18).set(&mut out, st);
            }
            opcode::DESTROY_QP => {
                self.qp_state.remove(&destroy_qp_in::QPN.get(inp));
            }
            opcode::CREATE_SRQ => {
                let n = self.obj();
                firmware_interface::cmds::create_srq_out::SRQN.set(&mut out, n);
            }
            opcode::QUERY_NIC_VPORT_CONTEXT => {
                out[0x106..0x10c].copy_from_slice(&[2, 0, 0, 0, 0, 7]);
                // Ethernet MTU 1500 (nic_vport_context.mtu)
                out[0x36..0x38].copy_from_slice(&1500u16.to_be_bytes());
            }
            opcode::SET_ROCE_ADDRESS => {
                let idx = set_roce_address_in::ROCE_ADDRESS_INDEX.get(inp);
                let a = set_roce_address_in::ROCE_ADDRESS.byte_off();
                self.roce_addrs.insert(idx, inp[a..a + 32].to_vec());
            }
            opcode::QUERY_ROCE_ADDRESS => {
                let idx = query_roce_address_in::ROCE_ADDRESS_INDEX.get(inp);
                if let Some(a) = self.roce_addrs.get(&idx) {
                    out[0x10..0x30].copy_from_slice(a);
                }
            }
            opcode::QUERY_VPORT_STATE => {
                query_vport_state_out::STATE.set(&mut out, 1);
            }
            _ => {}
        }
        Reply::ok(out)
    }
}

/// BAR0 of the fake device.
#[derive(Clone)]
pub struct FakeRegs(pub Arc<Mutex<Fw>>);

impl RegisterIo for FakeRegs {
    fn read32(&self, offset: usize) -> u32 {
        let mut f = self.0.lock().unwrap();
        let v = match offset {
            init_seg::FW_REV => f.fw_rev,
            init_seg::CMDIF_REV_FW_SUB => f.cmdif,
            init_seg::CMDQ_ADDR_H => f.cmdq_h,
            init_seg::CMDQ_ADDR_L_SZ => {
                (f.cmdq_l & 0xffff_f000) | (f.nic_if << 8) | (f.log_size << 4) | f.log_stride
            }
            init_seg::INITIALIZING => {
                if f.init_stuck {
                    init_seg::INITIALIZING_BIT
                } else if f.init_reads_left > 0 {
                    f.init_reads_left -= 1;
                    init_seg::INITIALIZING_BIT
                } else {
                    0
                }
            }
            o if o == init_seg::HEALTH + health::FW_VER => f.health_fw_ver,
            o if o == init_seg::HEALTH + health::IRISC_INDEX => (f.health_synd as u32) << 16,
            _ => 0,
        };
        v.to_be()
    }

    fn write32(&self, offset: usize, value: u32) {
        let v = u32::from_be(value);
        let mut f = self.0.lock().unwrap();
        match offset {
            init_seg::CMDQ_ADDR_H => f.cmdq_h = v,
            init_seg::CMDQ_ADDR_L_SZ => f.cmdq_l = v,
            init_seg::CMD_DBELL => f.doorbell(v),
            o if o >= 0x2000 => {
                f.mmio.push((o, value.to_ne_bytes().to_vec()));
                f.uar_writes.push((o, v));
                if (o & 0xfff == 0x40 || o & 0xfff == 0x48)
                    && let Some(q) = f.eqs.get_mut(&(v >> 24))
                {
                    q.ci = v & 0xff_ffff;
                }
            }
            _ => {}
        }
    }

    fn write64(&self, offset: usize, value: u64) {
        if offset >= 0x2000 {
            self.0
                .lock()
                .unwrap()
                .mmio
                .push((offset, value.to_ne_bytes().to_vec()));
            // Keep `uar_writes` to 32-bit accesses only.
            return;
        }
        self.write32(offset, (value & 0xffff_ffff) as u32);
    }

    fn write_block(&self, offset: usize, data: &[u8]) {
        self.0.lock().unwrap().mmio.push((offset, data.to_vec()));
    }
}

/// Fake clock: every `relax` advances it by 1 ms.
#[derive(Clone, Default)]
pub struct Clock(pub Arc<AtomicU64>);

impl Platform for Clock {
    fn relax(&self) {
        self.0.fetch_add(1_000_000, Ordering::Relaxed);
    }
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A fake device with its memory, registers and clock.
pub struct Bench {
    /// Host DMA memory.
    pub heap: Arc<HeapDma>,
    /// The device.
    pub fw: Arc<Mutex<Fw>>,
    /// Its registers.
    pub regs: FakeRegs,
    /// Its clock.
    pub clock: Clock,
}

/// The driver attached to the fake device.
pub type Dev = Device<FakeRegs, Clock>;

/// A new fake device.
pub fn bench() -> Bench {
    let heap = HeapDma::new(0x1_0000_0000);
    let fw = Arc::new(Mutex::new(Fw::new(heap.clone())));
    Bench {
        heap,
        regs: FakeRegs(fw.clone()),
        fw,
        clock: Clock::default(),
    }
}

/// A configuration with short timeouts.
pub fn test_config() -> Config {
    Config {
        init_timeout_ns: 1_000_000_000,
        cmd_timeout_ns: 1_000_000_000,
        ..Default::default()
    }
}

impl Bench {
    /// Brings the driver up on the fake device.
    pub fn probe(&self) -> Result<Dev, Error> {
        self.probe_with(test_config())
    }

    /// Brings the driver up with `config`.
    pub fn probe_with(&self, config: Config) -> Result<Dev, Error> {
        let dma: Arc<dyn DmaAllocator> = self.heap.clone();
        Device::probe(self.regs.clone(), dma, self.clock.clone(), config)
    }

    /// Installs a test hook.
    pub fn hook(&self, h: impl FnMut(&[u8], usize) -> Option<Reply> + Send + 'static) {
        self.fw.lock().unwrap().hook = Some(Box::new(h));
    }

    /// Locks the device.
    pub fn fw(&self) -> std::sync::MutexGuard<'_, Fw> {
        self.fw.lock().unwrap()
    }

    /// The opcodes executed so far.
    pub fn opcodes(&self) -> Vec<u16> {
        self.fw().log.iter().map(|&(o, _)| o).collect()
    }
}

/// A hook answering `opc` with `reply` (and leaving everything else to the fake firmware).
pub fn on(opc: u16, reply: Reply) -> impl FnMut(&[u8], usize) -> Option<Reply> + Send + 'static {
    move |inp, _| (mbox_in::OPCODE.get(inp) as u16 == opc).then(|| reply.clone())
}

/// A zeroed output of `len` bytes edited by `f`.
pub fn out_with(len: usize, f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut v = vec![0u8; len];
    f(&mut v);
    v
}

// ---------------------------------------------------------------------------------------------
// The fast-path rig shared by `examples/fastpath_cost.rs` and `benches/post_poll.rs`.

/// The fake's registers, with doorbell writes (UAR pages) going to a store-only stub, as a
/// mapped BAR costs in instructions.
#[derive(Clone)]
pub struct SinkRegs {
    inner: FakeRegs,
    /// Where doorbells go: atomics, since clones of the registers (one per thread, say) share
    /// it and a plain store through a shared pointer would be a data race.
    sink: Arc<[AtomicU64; 512]>,
}

impl RegisterIo for SinkRegs {
    #[inline]
    fn read32(&self, offset: usize) -> u32 {
        self.inner.read32(offset)
    }
    #[inline]
    fn write32(&self, offset: usize, value: u32) {
        self.inner.write32(offset, value)
    }
    #[inline]
    fn write64(&self, offset: usize, value: u64) {
        if offset >= 0x2000 {
            // A relaxed atomic store is one plain store instruction, as an MMIO store costs.
            self.sink[(offset / 8) & 511].store(value, Ordering::Relaxed);
        } else {
            self.inner.write64(offset, value)
        }
    }
    #[inline]
    fn write_block(&self, offset: usize, data: &[u8]) {
        for (i, c) in data.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write64(offset + i * 8, u64::from_ne_bytes(w));
        }
    }
}

/// The driver as the fast-path rig runs it.
pub type SinkDevice = Device<SinkRegs, Clock>;

/// A device brought up on the fake, with doorbells to a stub, an RC QP in RTS (64 send WRs,
/// one SGE, no inline, every send signalled, BlueFlame off) on one CQ, and a registered 16 KiB
/// region: what the fast-path benchmark and the instruction count measure against.
pub struct FastPathRig {
    /// The device.
    pub dev: SinkDevice,
    /// Its PD.
    pub pd: crate::Pd,
    /// The registered memory.
    pub mem: verbs::Buffer,
    /// The registration of `mem` (local and remote write).
    pub mr: crate::Mr,
    /// The QP's send and receive CQ (256 entries).
    pub cq: crate::Cq,
    /// The RC QP, in RTS.
    pub qp: crate::Qp,
}

impl FastPathRig {
    /// Builds the rig; panics on any failure (test code).
    pub fn new() -> FastPathRig {
        let b = bench();
        let regs = SinkRegs {
            inner: b.regs.clone(),
            sink: Arc::new(core::array::from_fn(|_| AtomicU64::new(0))),
        };
        let heap: Arc<dyn DmaAllocator> = b.heap.clone();
        let config = Config {
            blueflame: false,
            ..test_config()
        };
        let dev = SinkDevice::probe(regs, heap, b.clock.clone(), config).expect("probe");
        let pd = Provider::alloc_pd(&dev).unwrap();
        let mem = Provider::alloc_buf(&dev, 16 * 1024).unwrap();
        let mr = dev
            .reg_mr(
                &pd,
                mem.clone(),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let cq = Provider::create_cq(&dev, 255, 0, None).unwrap();
        let (mut qp, _) = Provider::create_qp(
            &dev,
            &pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            },
        )
        .unwrap();
        let rc = verbs::rc::RcParams {
            ah_attr: AhAttr {
                dgid: Gid::from_ipv4([127, 0, 0, 1]),
                is_global: true,
                port_num: 1,
                dmac: [2, 0, 0, 0, 0, 7],
                ..AhAttr::default()
            },
            ..verbs::rc::RcParams::default()
        };
        verbs::rc::connect(&dev, &mut qp, &rc).unwrap();

        FastPathRig {
            dev,
            pd,
            mem,
            mr,
            cq,
            qp,
        }
    }

    /// 16 SGEs of 1 KiB over the registered region.
    pub fn sges(&self) -> [Sge; 16] {
        let (base, lkey) = (self.mem.addr(), self.mr.lkey());
        core::array::from_fn(|i| Sge {
            addr: base + i as u64 * 1024,
            length: 1024,
            lkey,
        })
    }
}

impl Default for FastPathRig {
    fn default() -> Self {
        FastPathRig::new()
    }
}
