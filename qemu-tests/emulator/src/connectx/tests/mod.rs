//! Unit tests: a hand-built host memory and command submission, no driver involved.

mod bringup;
mod delivery;
mod dp;
mod faults;
mod objects;
mod pages;
mod qp;
mod regs;
mod srq;
mod status;

use std::collections::HashMap;
use std::sync::Arc;

use firmware_interface::cmd::{self, CmdLayout};
use firmware_interface::ctx::{self, cmd_hca_cap as g, cqc, eqc, mkc, qpc};
use firmware_interface::{Field, cmds, eqe, init_seg, mbox_in, mbox_out, op_mod, opcode as op};

use crate::{Device, Profile};

pub(crate) use crate::testmem::TestMem;

/// The default profile without runtime page requests: these tests drive the command interface
/// by hand and count pages and objects exactly (the page requests have tests of their own).
pub(crate) fn quiet() -> Profile {
    Profile {
        page_requests: crate::PageRequests::default(),
        ..Profile::default()
    }
}

/// A change made to a good input message to make it bad.
pub(crate) type Mutation<'a> = Box<dyn Fn(&mut Vec<u8>) + 'a>;

/// A command's result as the driver sees it.
#[derive(Clone, Debug)]
pub(crate) struct Resp {
    pub delivery: u8,
    pub status: u8,
    pub syndrome: u32,
    pub out: Vec<u8>,
    pub hw_owned: bool,
}

impl Resp {
    /// Asserts delivery OK with `status`/`syndrome`.
    #[track_caller]
    pub(crate) fn expect(&self, status: u8, syndrome: u32) {
        assert_eq!(self.delivery, 0, "delivery status");
        assert_eq!(
            (self.status, self.syndrome),
            (status, syndrome),
            "status/syndrome: got {:#x}/{:#x}",
            self.status,
            self.syndrome
        );
    }
}

/// A command built in memory but not posted yet (tests may tamper with it).
#[derive(Clone, Debug)]
pub(crate) struct Built {
    pub slot: u8,
    pub entry: [u8; 64],
    pub in_blocks: Vec<u64>,
    pub out_blocks: Vec<u64>,
    pub outlen: usize,
}

/// The test harness: a device, its memory, a command queue.
pub(crate) struct H {
    pub dev: Device,
    pub mem: Arc<TestMem>,
    pub cmdq: u64,
    pub token: u8,
    /// The ISSI [`init`](Self::init) sets (1 unless a test wants the ISSI 0 commands).
    pub issi: u32,
    pools: HashMap<(u8, bool), Vec<u64>>,
}

/// An input message of `size` bytes with `opcode` / `op_mod` set.
pub(crate) fn msg(opcode: u16, op_mod: u16, size: usize) -> Vec<u8> {
    let mut m = vec![0u8; size];
    mbox_in::OPCODE.set(&mut m, u32::from(opcode));
    mbox_in::OP_MOD.set(&mut m, u32::from(op_mod));
    m
}

pub(crate) fn set(m: &mut [u8], f: Field, v: u32) {
    assert!(f.set(m, v), "field does not fit");
}

pub(crate) fn set64(m: &mut [u8], f: Field, v: u64) {
    assert!(f.set64(m, v), "field does not fit");
}

pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl H {
    /// A device out of reset (command queue not set, still initializing).
    pub(crate) fn raw(profile: Profile) -> H {
        let mem = TestMem::new();
        let dev = Device::new(profile, mem.clone());
        H {
            dev,
            mem,
            cmdq: 0,
            token: 0,
            issi: 1,
            pools: HashMap::new(),
        }
    }

    /// A device with its command queue set and `initializing` cleared.
    pub(crate) fn with(profile: Profile) -> H {
        let mut h = H::raw(profile);
        h.set_cmdq();
        h.wait_ready();
        h
    }

    pub(crate) fn new() -> H {
        H::with(crate::connectx::tests::quiet())
    }

    pub(crate) fn rd32(&mut self, off: usize) -> u32 {
        let mut b = [0u8; 4];
        self.dev.mmio_read(off, &mut b);
        u32::from_be_bytes(b)
    }

    pub(crate) fn wr32(&mut self, off: usize, v: u32) {
        self.dev.mmio_write(off, &v.to_be_bytes());
    }

    pub(crate) fn set_cmdq(&mut self) {
        self.cmdq = self.mem.alloc(4096, 4096);
        self.wr32(init_seg::CMDQ_ADDR_H, (self.cmdq >> 32) as u32);
        self.wr32(init_seg::CMDQ_ADDR_L_SZ, self.cmdq as u32);
    }

    pub(crate) fn wait_ready(&mut self) {
        for _ in 0..100 {
            if self.rd32(init_seg::INITIALIZING) & init_seg::INITIALIZING_BIT == 0 {
                return;
            }
        }
        panic!("device never became ready");
    }

    pub(crate) fn entry_addr(&self, slot: u8) -> u64 {
        self.cmdq + (u64::from(slot) << 6)
    }

    fn pool(&mut self, slot: u8, out: bool, n: usize) -> Vec<u64> {
        let mem = self.mem.clone();
        let p = self.pools.entry((slot, out)).or_default();
        while p.len() < n {
            p.push(mem.alloc(1024, 1024));
        }
        p[..n].to_vec()
    }

    /// Builds entry + mailboxes for `input` with room for `outlen` bytes of output.
    pub(crate) fn build(&mut self, slot: u8, input: &[u8], outlen: usize) -> Built {
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        let in_blocks = self.pool(slot, false, cmd::mailbox_count(input.len()));
        let out_blocks = self.pool(slot, true, cmd::mailbox_count(outlen));
        for (blocks, data) in [(&in_blocks, Some(input)), (&out_blocks, None)] {
            for (i, a) in blocks.iter().enumerate() {
                let mut b = cmd::MailboxBlock::zeroed();
                if let Some(d) = data {
                    let start = 16 + i * 512;
                    let chunk = &d[start..d.len().min(start + 512)];
                    b.data[..chunk.len()].copy_from_slice(chunk);
                }
                b.next.set(blocks.get(i + 1).copied().unwrap_or(0));
                b.block_num.set(i as u32);
                b.token = token;
                self.mem.wr(*a, &b.to_bytes());
            }
        }
        let mut e = CmdLayout::zeroed();
        e.type_ = cmd::XPORT_TYPE_PCI;
        e.inlen.set(input.len() as u32);
        e.in_ptr.set(in_blocks.first().copied().unwrap_or(0));
        let n = input.len().min(16);
        e.in_[..n].copy_from_slice(&input[..n]);
        e.out_ptr.set(out_blocks.first().copied().unwrap_or(0));
        e.outlen.set(outlen as u32);
        e.token = token;
        e.status_own = cmd::OWNER_HW;
        Built {
            slot,
            entry: e.to_bytes(),
            in_blocks,
            out_blocks,
            outlen,
        }
    }

    /// Writes the entry and rings its doorbell.
    pub(crate) fn post(&mut self, b: &Built) {
        self.mem.wr(self.entry_addr(b.slot), &b.entry);
        self.wr32(init_seg::CMD_DBELL, 1 << b.slot);
    }

    /// Reads back a posted command's result.
    pub(crate) fn result(&self, b: &Built) -> Resp {
        let raw = self.mem.rd(self.entry_addr(b.slot), 64);
        let e = CmdLayout::read_from(&raw).unwrap();
        let mut out = e.out.to_vec();
        for (i, a) in b.out_blocks.iter().enumerate() {
            let n = 512.min(b.outlen - 16 - i * 512);
            out.extend_from_slice(&self.mem.rd(*a, n));
        }
        out.truncate(b.outlen);
        Resp {
            delivery: e.delivery_status(),
            status: mbox_out::STATUS.get(&out) as u8,
            syndrome: mbox_out::SYNDROME.get(&out),
            out,
            hw_owned: e.hw_owned(),
        }
    }

    /// Builds, posts and reads back a command on slot 0.
    pub(crate) fn cmd(&mut self, input: &[u8], outlen: usize) -> Resp {
        self.cmd_on(0, input, outlen)
    }

    pub(crate) fn cmd_on(&mut self, slot: u8, input: &[u8], outlen: usize) -> Resp {
        let b = self.build(slot, input, outlen);
        self.post(&b);
        let r = self.result(&b);
        assert!(!r.hw_owned, "command not completed");
        r
    }

    /// A command that must succeed; returns its output.
    #[track_caller]
    pub(crate) fn ok(&mut self, input: &[u8], outlen: usize) -> Vec<u8> {
        let r = self.cmd(input, outlen);
        assert_eq!(
            (r.delivery, r.status, r.syndrome),
            (0, 0, 0),
            "opcode {:#x} failed",
            mbox_in::OPCODE.get(input)
        );
        r.out
    }

    // ------------------------------------------------------------------ bring-up steps

    pub(crate) fn enable(&mut self) {
        self.ok(&msg(op::ENABLE_HCA, 0, 16), 16);
    }

    pub(crate) fn query_pages(&mut self, m: u16) -> u32 {
        let o = self.ok(&msg(op::QUERY_PAGES, m, 16), 16);
        cmds::query_pages_out::NUM_PAGES.get(&o)
    }

    /// MANAGE_PAGES(GIVE) input for `pages`.
    pub(crate) fn give_msg(pages: &[u64]) -> Vec<u8> {
        let mut m = msg(
            op::MANAGE_PAGES,
            op_mod::MANAGE_PAGES_GIVE,
            16 + 8 * pages.len(),
        );
        set(
            &mut m,
            cmds::manage_pages_in::INPUT_NUM_ENTRIES,
            pages.len() as u32,
        );
        for (i, p) in pages.iter().enumerate() {
            m[16 + 8 * i..24 + 8 * i].copy_from_slice(&p.to_be_bytes());
        }
        m
    }

    pub(crate) fn give_pages(&mut self, n: u32) -> Vec<u64> {
        let pages: Vec<u64> = (0..n).map(|_| self.mem.alloc(4096, 4096)).collect();
        self.ok(&Self::give_msg(&pages), 16);
        pages
    }

    pub(crate) fn query_cap(&mut self, cap_type: u16, max: bool) -> Vec<u8> {
        let mode = if max {
            op_mod::QUERY_CAP_MAX
        } else {
            op_mod::QUERY_CAP_CUR
        };
        let o = self.ok(
            &msg(op::QUERY_HCA_CAP, op_mod::query_cap(cap_type, mode), 16),
            4112,
        );
        o[16..].to_vec()
    }

    pub(crate) fn set_cap_msg(cap_type: u16, block: &[u8]) -> Vec<u8> {
        let mut m = msg(op::SET_HCA_CAP, op_mod::set_cap(cap_type), 4112);
        m[16..].copy_from_slice(block);
        m
    }

    pub(crate) fn host_endianness_msg() -> Vec<u8> {
        let mut m = msg(op::ACCESS_REG, op_mod::ACCESS_REG_WRITE, 32);
        set(
            &mut m,
            cmds::access_register_in::REGISTER_ID,
            u32::from(op_mod::REG_HOST_ENDIANNESS),
        );
        m
    }

    /// The bring-up of `docs/mlx5.md#bring-up` up to INIT_HCA and RoCE enable.
    pub(crate) fn init(&mut self) {
        self.init_with(None);
    }

    /// [`init`](Self::init), setting the atomic page's `atomic_req_8B_endianness_mode` to
    /// `atomic_mode` (as Linux does, from a zeroed block) when given.
    pub(crate) fn init_with(&mut self, atomic_mode: Option<u32>) {
        self.enable();
        let o = self.ok(&msg(op::QUERY_ISSI, 0, 16), 112);
        assert_eq!(cmds::query_issi_out::SUPPORTED_ISSI_DW0.get(&o) & 2, 2);
        let mut m = msg(op::SET_ISSI, 0, 16);
        set(&mut m, cmds::set_issi_in::CURRENT_ISSI, self.issi);
        self.ok(&m, 16);
        let boot = self.query_pages(op_mod::PAGES_BOOT);
        self.give_pages(boot);
        self.ok(&Self::host_endianness_msg(), 32);
        let mut cur = self.query_cap(op_mod::CAP_GENERAL, false);
        let _max = self.query_cap(op_mod::CAP_GENERAL, true);
        set(&mut cur, g::CMDIF_CHECKSUM, 0);
        set(&mut cur, g::LOG_UAR_PAGE_SZ, 0);
        set(&mut cur, g::DRAIN_SIGERR, 1);
        self.ok(&Self::set_cap_msg(op_mod::CAP_GENERAL, &cur), 16);
        let mut roce = self.query_cap(op_mod::CAP_ROCE, false);
        set(&mut roce, ctx::roce_cap::SW_R_ROCE_SRC_UDP_PORT, 1);
        self.ok(&Self::set_cap_msg(op_mod::CAP_ROCE, &roce), 16);
        if let Some(mode) = atomic_mode {
            let mut z = vec![0u8; ctx::CAP_BLOCK_SIZE];
            set(
                &mut z,
                ctx::atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE,
                mode,
            );
            self.ok(&Self::set_cap_msg(op_mod::CAP_ATOMIC, &z), 16);
        }
        let init = self.query_pages(op_mod::PAGES_INIT);
        self.give_pages(init);
        self.ok(&msg(op::INIT_HCA, 0, 32), 16);
        let mut m = msg(op::MODIFY_NIC_VPORT_CONTEXT, 0, 512);
        set(
            &mut m,
            cmds::modify_nic_vport_context_in::FIELD_SELECT_ROCE_EN,
            1,
        );
        set(&mut m, ctx::nic_vport_context::ROCE_EN.at(0x100), 1);
        self.ok(&m, 16);
    }

    pub(crate) fn alloc(&mut self, opcode: u16, f: Field) -> u32 {
        let o = self.ok(&msg(opcode, 0, 16), 16);
        f.get(&o)
    }

    pub(crate) fn alloc_uar(&mut self) -> u32 {
        self.alloc(op::ALLOC_UAR, cmds::alloc_uar_out::UAR)
    }

    pub(crate) fn alloc_pd(&mut self) -> u32 {
        self.alloc(op::ALLOC_PD, cmds::alloc_pd_out::PD)
    }

    /// A queue buffer of `bytes` (whole 4 KiB pages, mapped), with every 64-byte entry's
    /// last byte set to `fill` (EQE owner init / CQE op_own).
    pub(crate) fn queue_buf(&mut self, bytes: u64, fill: u8) -> Vec<u64> {
        let pages = bytes.div_ceil(4096);
        let base = self.mem.alloc(pages * 4096, 4096);
        let mut off = 63;
        while off < pages * 4096 {
            self.mem.wr(base + off, &[fill]);
            off += 64;
        }
        (0..pages).map(|i| base + i * 4096).collect()
    }

    /// CREATE_EQ input for an EQ of 2^log entries on `uar` with event `mask` (word 0).
    pub(crate) fn create_eq_msg(uar: u32, log: u32, mask: u64, pas: &[u64]) -> Vec<u8> {
        let mut m = msg(op::CREATE_EQ, 0, 0x110 + 8 * pas.len());
        let c = cmds::create_eq_in::EQ_CONTEXT_ENTRY.byte_off();
        set(&mut m, eqc::LOG_EQ_SIZE.at(c), log);
        set(&mut m, eqc::UAR_PAGE.at(c), uar);
        set64(&mut m, cmds::create_eq_in::EVENT_BITMASK_0, mask);
        for (i, p) in pas.iter().enumerate() {
            m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&p.to_be_bytes());
        }
        m
    }

    /// Creates an EQ; returns (eqn, pas).
    pub(crate) fn create_eq(&mut self, uar: u32, log: u32, mask: u64) -> (u32, Vec<u64>) {
        let pas = self.queue_buf(64 << log, eqe::OWNER_INIT);
        let o = self.ok(&Self::create_eq_msg(uar, log, mask, &pas), 16);
        (cmds::create_eq_out::EQ_NUMBER.get(&o), pas)
    }

    /// Writes an EQ doorbell `(eqn << 24) | ci` to UAR `uar` (arm or not).
    pub(crate) fn eq_db(&mut self, uar: u32, eqn: u32, ci: u32, arm: bool) {
        let off = uar as usize * 4096 + if arm { 0x40 } else { 0x48 };
        self.wr32(off, eqn << 24 | (ci & 0xff_ffff));
    }

    pub(crate) fn dbr(&mut self) -> u64 {
        self.mem.alloc(64, 64)
    }

    pub(crate) fn create_cq_msg(uar: u32, eqn: u32, log: u32, dbr: u64, pas: &[u64]) -> Vec<u8> {
        let mut m = msg(op::CREATE_CQ, 0, 0x110 + 8 * pas.len());
        let c = cmds::create_cq_in::CQ_CONTEXT.byte_off();
        set(&mut m, cqc::LOG_CQ_SIZE.at(c), log);
        set(&mut m, cqc::UAR_PAGE.at(c), uar);
        set(&mut m, cqc::C_EQN_OR_APU_ELEMENT.at(c), eqn);
        set64(&mut m, cqc::DBR_ADDR.at(c), dbr);
        for (i, p) in pas.iter().enumerate() {
            m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&p.to_be_bytes());
        }
        m
    }

    pub(crate) fn create_cq(&mut self, uar: u32, eqn: u32, log: u32) -> u32 {
        let pas = self.queue_buf(64 << log, 0xf0);
        let dbr = self.dbr();
        let o = self.ok(&Self::create_cq_msg(uar, eqn, log, dbr, &pas), 16);
        cmds::create_cq_out::CQN.get(&o)
    }

    /// CREATE_MKEY input: PA mode, local read/write, whole address space.
    pub(crate) fn mkey_pa_msg(pd: u32) -> Vec<u8> {
        let mut m = msg(op::CREATE_MKEY, 0, 0x110);
        let c = cmds::create_mkey_in::MEMORY_KEY_MKEY_ENTRY.byte_off();
        set(&mut m, mkc::ACCESS_MODE_1_0.at(c), mkc::ACCESS_MODE_PA);
        set(&mut m, mkc::LR.at(c), 1);
        set(&mut m, mkc::LW.at(c), 1);
        set(&mut m, mkc::QPN.at(c), mkc::QPN_NONE);
        set(&mut m, mkc::MKEY_7_0.at(c), 0x42);
        set(&mut m, mkc::LENGTH64.at(c), 1);
        set(&mut m, mkc::PD.at(c), pd);
        m
    }

    pub(crate) fn create_mkey(&mut self, pd: u32) -> u32 {
        let o = self.ok(&Self::mkey_pa_msg(pd), 16);
        cmds::create_mkey_out::MKEY_INDEX.get(&o)
    }

    /// CREATE_QP input (RQ 2^4 × 64 B, SQ 2^4 × 64 B) of service type `st`.
    pub(crate) fn create_qp_msg(
        st: u32,
        pd: u32,
        cqn: u32,
        uar: u32,
        dbr: u64,
        pas: &[u64],
    ) -> Vec<u8> {
        let mut m = msg(op::CREATE_QP, 0, 0x110 + 8 * pas.len());
        let c = cmds::create_qp_in::QPC.byte_off();
        set(&mut m, qpc::ST.at(c), st);
        set(&mut m, qpc::PM_STATE.at(c), qpc::PM_STATE_MIGRATED);
        set(&mut m, qpc::PD.at(c), pd);
        set(&mut m, qpc::UAR_PAGE.at(c), uar);
        set(&mut m, qpc::LOG_RQ_SIZE.at(c), 4);
        set(&mut m, qpc::LOG_RQ_STRIDE.at(c), 2);
        set(&mut m, qpc::LOG_SQ_SIZE.at(c), 4);
        set(&mut m, qpc::CQN_SND.at(c), cqn);
        set(&mut m, qpc::CQN_RCV.at(c), cqn);
        set(&mut m, qpc::USER_INDEX.at(c), qpc::USER_INDEX_NONE);
        set64(&mut m, qpc::DBR_ADDR.at(c), dbr);
        for (i, p) in pas.iter().enumerate() {
            m[0x110 + 8 * i..0x118 + 8 * i].copy_from_slice(&p.to_be_bytes());
        }
        m
    }

    pub(crate) fn create_qp(&mut self, st: u32, pd: u32, cqn: u32, uar: u32) -> u32 {
        let pas = self.queue_buf(2048, 0);
        let dbr = self.dbr();
        let o = self.ok(&Self::create_qp_msg(st, pd, cqn, uar, dbr, &pas), 16);
        cmds::create_qp_out::QPN.get(&o)
    }
}

/// The fixture most object tests start from: initialized HCA, a UAR, a command EQ, a PD and
/// a CQ.
pub(crate) struct World {
    pub h: H,
    pub uar: u32,
    pub eqn: u32,
    pub pd: u32,
    pub cqn: u32,
}

impl World {
    pub(crate) fn new() -> World {
        World::with_issi(1)
    }

    /// The fixture at ISSI `issi` (0 or 1).
    pub(crate) fn with_issi(issi: u32) -> World {
        let mut h = H::new();
        h.issi = issi;
        h.init();
        let uar = h.alloc_uar();
        let (eqn, _) = h.create_eq(uar, 4, 0);
        let pd = h.alloc_pd();
        let cqn = h.create_cq(uar, eqn, 4);
        World {
            h,
            uar,
            eqn,
            pd,
            cqn,
        }
    }
}

#[test]
fn device_is_send() {
    fn send<T: Send>() {}
    send::<Device>();
}
