//! The command processor (`docs/mlx5.md#command-interface`, `docs/mlx5.md#device-model`): fetch an
//! entry, gather its input through the mailbox chain, execute, scatter the output, hand the entry
//! back, post a CMD event.
//!
//! Delivery errors (the entry or a mailbox is malformed) complete the entry with a delivery
//! status and do not execute the command. Choices where the PRM is silent:
//! * a mailbox that is not mapped (DMA fault) ⇒ delivery `FW_ERR` (0x6), and the fault is in
//!   [`Device::errors`]; if the fault happens while writing the output, the command has
//!   already taken effect;
//! * mailbox pointers must be 1 KiB aligned (what drivers use); a chain that ends (`next` = 0)
//!   before `inlen`/`outlen` are covered ⇒ `IN_LENGTH_ERR` / `OUT_LENGTH_ERR`;
//! * output mailboxes must carry the entry's token and consecutive block numbers too (drivers
//!   format both chains);
//! * nonzero reserved bytes of the entry ⇒ `RES_FLD_NOT_CLR`;
//! * `inlen`/`outlen` above 1 MiB are absurd ⇒ `IN_LENGTH_ERR` / `OUT_LENGTH_ERR`;
//! * the CMD EQE (`vector = 1 << slot`) is posted, after `status_own`, to every EQ that was
//!   subscribed to CMD events when the command was handed over and still exists — also for
//!   commands completed with a delivery error and for drivers that poll;
//! * untrapped BAR only: a ring also runs the other hardware-owned entries that do not wait
//!   for pages, since a second store to the doorbell word before the device polled replaces
//!   the first (`Device::lost_rings`).

use firmware_interface::cmd::{self, CmdLayout, MAILBOX_DATA, MAILBOX_SIZE};
use firmware_interface::ctx::cmd_hca_cap;
use firmware_interface::{
    cmd_status, delivery_status as ds, eqe, init_seg, mbox_in, mbox_out, op_mod, opcode as op,
};

use crate::connectx::commands::Input;
use crate::connectx::pages::Done;
use crate::{CmdRecord, Device, DeviceError, syndrome as syn};

/// How a command entry is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    /// Handed over by a doorbell (it may have to wait for pages).
    Fresh,
    /// It waited for pages, which are there now (its charge).
    Resumed(u32),
    /// It waited for pages the driver cannot give: it fails without running.
    Refused,
}

/// Largest `inlen` / `outlen` accepted.
pub(crate) const MAX_MSG: usize = 1 << 20;
const NEXT: usize = cmd::MAILBOX_NEXT_OFFSET;
const BLOCK_NUM: usize = cmd::MAILBOX_BLOCK_NUM_OFFSET;
const TOKEN: usize = cmd::MAILBOX_TOKEN_OFFSET;

fn xor(b: &[u8]) -> u8 {
    b.iter().fold(0, |a, x| a ^ x)
}

fn be32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Output mailbox blocks: address and the block as read (header needed for signatures).
type OutChain = Vec<(u64, Box<[u8; MAILBOX_SIZE]>)>;

impl Device {
    /// Whether entry and mailbox signatures are checked (and written) right now.
    pub(crate) fn sig_active(&self) -> bool {
        self.profile.cmd_signatures
            && cmd_hca_cap::CMDIF_CHECKSUM.get(&self.hca.cap_cur.general) != 0
    }

    /// A write to the command doorbell.
    pub(crate) fn ring(&mut self, value: u32) {
        let Some(base) = self.regs.cmdq else {
            self.error(DeviceError::CmdqNotSet);
            return;
        };
        if self.initializing() {
            self.error(DeviceError::CmdWhileInitializing { value });
            return;
        }
        let n = 1u32 << self.profile.log_cmdq_size.min(5);
        let valid = if n >= 32 { u32::MAX } else { (1 << n) - 1 };
        if value & !valid != 0 {
            self.error(DeviceError::BadDoorbell {
                offset: init_seg::CMD_DBELL,
                value: u64::from(value),
            });
        }
        let lost = if self.regs.untrapped {
            self.lost_rings(base, n, value)
        } else {
            0
        };
        for slot in 0..n {
            if lost & (1 << slot) != 0 {
                self.regs.unrung |= 1 << slot;
                self.run_slot(base, slot as u8);
            }
        }
        for slot in 0..n {
            if value & (1 << slot) == 0 {
                continue;
            }
            if self.regs.unrung & (1 << slot) != 0 {
                self.regs.unrung &= !(1 << slot);
                // The ring of a command already run as a lost ring (its owner byte was seen
                // before this store reached the word): nothing more to do for it.
                if !self.slot_hw_owned(base, slot as u8) {
                    continue;
                }
            }
            self.run_slot(base, slot as u8);
        }
    }

    /// Untrapped BAR: the slots (other than those in `rung`) whose entries are
    /// hardware-owned and not waiting for pages. Two driver stores to the doorbell word
    /// between two polls reach the device as the last of them, so a ring the driver made for
    /// another slot just before (an ordinary command's, then the page slot's MANAGE_PAGES
    /// while the first one waits) is lost; the entry's ownership bit still says it was handed
    /// over. A driver sets that bit only right before it rings, so running such an entry
    /// without its ring at most runs it a moment early.
    fn lost_rings(&mut self, base: u64, n: u32, rung: u32) -> u32 {
        let stride = u32::from(self.profile.log_cmdq_stride.min(12));
        let mut q = vec![0u8; (n as usize) << stride];
        // Quiet: a queue that cannot be read is recorded by the rung slot's own fetch.
        if crate::mem::dma_read(&*self.mem, base, &mut q).is_err() {
            return 0;
        }
        let mut lost = 0;
        for slot in 0..n {
            let own = q[((slot as usize) << stride) + cmd::STATUS_OWN_OFFSET];
            if rung & (1 << slot) == 0
                && own & cmd::OWNER_HW != 0
                && !self.hca.rt.parked.contains_key(&(slot as u8))
            {
                lost |= 1 << slot;
            }
        }
        lost
    }

    /// Whether the entry in `slot` is hardware-owned (false when it cannot be read).
    fn slot_hw_owned(&mut self, base: u64, slot: u8) -> bool {
        let stride = u32::from(self.profile.log_cmdq_stride.min(12));
        let at = base.wrapping_add(u64::from(slot) << stride) + cmd::STATUS_OWN_OFFSET as u64;
        let mut own = [0u8; 1];
        crate::mem::dma_read(&*self.mem, at, &mut own).is_ok() && own[0] & cmd::OWNER_HW != 0
    }

    fn run_slot(&mut self, base: u64, slot: u8) {
        self.run_slot_as(base, slot, Run::Fresh);
    }

    /// Runs the commands that waited for pages and can run now (after a GIVE).
    fn resume_parked(&mut self, base: u64) {
        while let Some((slot, charge)) = self.next_unparked() {
            self.run_slot_as(base, slot, Run::Resumed(charge));
        }
    }

    fn run_slot_as(&mut self, base: u64, slot: u8, run: Run) {
        let stride = u32::from(self.profile.log_cmdq_stride.min(12));
        let addr = base.wrapping_add(u64::from(slot) << stride);
        let mut raw = [0u8; cmd::ENTRY_SIZE];
        if self.cmd_dma_read(addr, &mut raw).is_err() {
            return;
        }
        let e = CmdLayout::from_bytes(&raw);
        if !e.hw_owned() {
            self.error(DeviceError::CmdNotOwned { slot });
            return;
        }
        if self.faults.stall_commands {
            return;
        }
        let opcode = mbox_in::OPCODE.get(&e.in_) as u16;
        let op_mod = mbox_in::OP_MOD.get(&e.in_) as u16;
        let charge = match run {
            Run::Fresh => {
                // A doorbell for a command that waits for pages: it is still the device's.
                if self.hca.rt.parked.contains_key(&slot) {
                    return;
                }
                let charge = self.page_charge(opcode);
                if charge > 0 && self.park_for_pages(slot, charge) {
                    return;
                }
                charge
            }
            Run::Resumed(c) => c,
            Run::Refused => 0,
        };
        let sig = self.sig_active();
        // The CMD event goes to the EQs subscribed when the command was handed over (so the
        // CREATE_EQ of the command EQ gets no event, its DESTROY_EQ neither).
        let subscribed = self.subscribed(eqe::event::CMD);
        let refuse = matches!(run, Run::Refused);
        let (delivery, head) = match self.deliver(&raw, &e, sig, refuse) {
            Ok(h) => (ds::OK, Some(h)),
            Err(d) => (d, None),
        };
        // Hand the entry back: out[] first, then the signature, the status byte last.
        let mut fin = raw;
        if let Some(h) = head {
            fin[0x20..0x30].copy_from_slice(&h);
        }
        fin[cmd::STATUS_OWN_OFFSET] = delivery << 1;
        if sig {
            fin[cmd::SIG_OFFSET] = 0;
            fin[cmd::SIG_OFFSET] = cmd::signature(&fin);
        }
        if head.is_some() {
            let _ = self.cmd_dma_write(addr + 0x20, &fin[0x20..0x30]);
        }
        if sig {
            let _ = self.cmd_dma_write(
                addr + cmd::SIG_OFFSET as u64,
                &fin[cmd::SIG_OFFSET..cmd::SIG_OFFSET + 1],
            );
        }
        let _ = self.cmd_dma_write(
            addr + cmd::STATUS_OWN_OFFSET as u64,
            &fin[cmd::STATUS_OWN_OFFSET..],
        );
        let (status, syndrome) = match head {
            Some(h) => (
                mbox_out::STATUS.get(&h) as u8,
                mbox_out::SYNDROME.try_get(&h).unwrap_or(0),
            ),
            None => (0, 0),
        };
        self.log.push(CmdRecord {
            slot,
            opcode,
            op_mod,
            delivery,
            status,
            syndrome,
        });
        let mut data = [0u8; 28];
        data[eqe::CMD_VECTOR - eqe::DATA..][..4].copy_from_slice(&(1u32 << slot).to_be_bytes());
        for eqn in subscribed {
            self.post_eqe(eqn, eqe::event::CMD, 0, &data);
        }
        let given = self.pages_after(&Done {
            opcode,
            op_mod,
            input: &e.in_,
            output: head.as_ref().map(|h| &h[..]),
            charge,
        });
        if opcode == op::MANAGE_PAGES
            && op_mod == op_mod::MANAGE_PAGES_CANT_GIVE
            && status == 0
            && delivery == ds::OK
        {
            // The driver has no pages for the waiting creates: they fail.
            for s in self.take_parked() {
                self.run_slot_as(base, s, Run::Refused);
            }
        } else if given {
            self.resume_parked(base);
        }
    }

    /// Everything between fetching the entry and writing `status_own`: returns the 16-byte
    /// output header for `out[]`, or a delivery status.
    fn deliver(
        &mut self,
        raw: &[u8; 64],
        e: &CmdLayout,
        sig: bool,
        refuse: bool,
    ) -> Result<[u8; 16], u8> {
        if e.type_ != cmd::XPORT_TYPE_PCI {
            return Err(ds::CMD_DESCRIPTOR_TYPE_ERR);
        }
        if sig && xor(raw) != 0xff {
            return Err(ds::SIGNATURE_ERR);
        }
        if e.rsvd0 != [0; 3] || e.rsvd1 != 0 {
            return Err(ds::RES_FLD_NOT_CLR);
        }
        let opcode = mbox_in::OPCODE.get(&e.in_) as u16;
        if let Some((op, d)) = self.faults.fail_delivery
            && op == opcode
        {
            return Err(d);
        }
        let inlen = e.inlen.get() as usize;
        let outlen = e.outlen.get() as usize;
        if !(cmd::INLINE_LEN..=MAX_MSG).contains(&inlen) {
            return Err(ds::IN_LENGTH_ERR);
        }
        if !(cmd::INLINE_LEN..=MAX_MSG).contains(&outlen) {
            return Err(ds::OUT_LENGTH_ERR);
        }
        let input = self.gather(e, inlen, sig)?;
        let chain = self.walk_out(e, outlen)?;
        let mut output = if refuse {
            crate::connectx::commands::header(cmd_status::NO_RES, syn::PAGES_REFUSED)
        } else {
            self.execute(&Input::new(&input, outlen))
        };
        output.resize(outlen, 0);
        if let Some(hook) = self.faults.output_hook.as_mut() {
            hook(opcode, &mut output);
            output.resize(outlen, 0);
        }
        self.scatter(e, &chain, &output, opcode, sig)?;
        let mut head = [0u8; 16];
        head.copy_from_slice(&output[..16]);
        Ok(head)
    }

    /// Reads one mailbox block and checks its header.
    fn read_block(
        &mut self,
        ptr: u64,
        i: usize,
        token: u8,
        align_err: u8,
    ) -> Result<Box<[u8; MAILBOX_SIZE]>, u8> {
        if !ptr.is_multiple_of(cmd::MAILBOX_ALIGN as u64) {
            return Err(align_err);
        }
        let mut b = Box::new([0u8; MAILBOX_SIZE]);
        if self.cmd_dma_read(ptr, &mut b[..]).is_err() {
            return Err(ds::FW_ERR);
        }
        if be32(&b[BLOCK_NUM..]) as usize != i {
            return Err(ds::BAD_BLOCK_NUMBER);
        }
        if b[TOKEN] != token {
            return Err(ds::TOKEN_ERR);
        }
        Ok(b)
    }

    fn gather(&mut self, e: &CmdLayout, inlen: usize, sig: bool) -> Result<Vec<u8>, u8> {
        let mut msg = Vec::with_capacity(inlen);
        msg.extend_from_slice(&e.in_[..inlen.min(cmd::INLINE_LEN)]);
        let mut ptr = e.in_ptr.get();
        for i in 0..cmd::mailbox_count(inlen) {
            if ptr == 0 {
                return Err(ds::IN_LENGTH_ERR);
            }
            let b = self.read_block(ptr, i, e.token, ds::IN_PTR_ALIGN)?;
            if sig
                && (xor(&b[cmd::MAILBOX_CTRL_SIG_RANGE.start..=cmd::MAILBOX_CTRL_SIG_RANGE.end])
                    != 0xff
                    || xor(&b[..]) != 0xff)
            {
                return Err(ds::SIGNATURE_ERR);
            }
            let n = MAILBOX_DATA.min(inlen - msg.len());
            msg.extend_from_slice(&b[..n]);
            ptr = be64(&b[NEXT..]);
        }
        Ok(msg)
    }

    fn walk_out(&mut self, e: &CmdLayout, outlen: usize) -> Result<OutChain, u8> {
        let mut chain = Vec::new();
        let mut ptr = e.out_ptr.get();
        for i in 0..cmd::mailbox_count(outlen) {
            if ptr == 0 {
                return Err(ds::OUT_LENGTH_ERR);
            }
            let b = self.read_block(ptr, i, e.token, ds::OUT_PTR_ALIGN)?;
            let next = be64(&b[NEXT..]);
            chain.push((ptr, b));
            ptr = next;
        }
        Ok(chain)
    }

    fn scatter(
        &mut self,
        e: &CmdLayout,
        chain: &OutChain,
        output: &[u8],
        opcode: u16,
        sig: bool,
    ) -> Result<(), u8> {
        let corrupt = self.faults.corrupt_output_mailbox == Some(opcode);
        for (i, (addr, blk)) in chain.iter().enumerate() {
            let start = cmd::INLINE_LEN + i * MAILBOX_DATA;
            let data = &output[start..output.len().min(start + MAILBOX_DATA)];
            if self.cmd_dma_write(*addr, data).is_err() {
                return Err(ds::FW_ERR);
            }
            let mut b = blk.clone();
            b[..data.len()].copy_from_slice(data);
            if corrupt && i == 0 {
                b[BLOCK_NUM..BLOCK_NUM + 4].copy_from_slice(&7u32.to_be_bytes());
                b[TOKEN] = e.token.wrapping_add(0x5a);
                if self
                    .dma_write(addr + BLOCK_NUM as u64, &b[BLOCK_NUM..BLOCK_NUM + 4])
                    .is_err()
                    || self
                        .dma_write(addr + TOKEN as u64, &b[TOKEN..TOKEN + 1])
                        .is_err()
                {
                    return Err(ds::FW_ERR);
                }
            }
            if sig {
                b[cmd::MAILBOX_CTRL_SIG_OFFSET] = 0;
                b[cmd::MAILBOX_SIG_OFFSET] = 0;
                b[cmd::MAILBOX_CTRL_SIG_OFFSET] = cmd::signature(&b[cmd::MAILBOX_CTRL_SIG_RANGE]);
                b[cmd::MAILBOX_SIG_OFFSET] = cmd::signature(&b[cmd::MAILBOX_SIG_RANGE]);
                let off = cmd::MAILBOX_CTRL_SIG_OFFSET;
                if self
                    .cmd_dma_write(addr + off as u64, &b[off..off + 2])
                    .is_err()
                {
                    return Err(ds::FW_ERR);
                }
            }
        }
        Ok(())
    }
}
