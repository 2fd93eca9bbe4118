//! The firmware command interface (`docs/mlx5.md#command-interface`), in polling mode.
//!
//! One command at a time per slot: slot 0 carries ordinary commands, the last slot the page
//! commands (MANAGE_PAGES), as rdma-core's `mlx5_vfio.c` does, so that a page request can be
//! served while an ordinary command waits: firmware may ask for pages in the middle of a
//! create and complete it only once they arrived, so the wait for an ordinary command looks
//! at the driver's EQ between two polls of the ownership bit (the `waiting` hook of
//! [`CmdQueue::exec`]) and answers page requests on the page slot. Each slot owns its input and output mailbox chains (1 KiB aligned
//! 576-byte blocks), grown on demand.
//!
//! Posting (`docs/mlx5.md#posting-a-command`): zero the entry and fill it with `status_own = 0`,
//! fill the mailboxes, write barrier, `status_own = 1`, MMIO barrier, doorbell `1 << slot` (BE) at
//! 0x18. Completion: poll the ownership bit (relaxing between reads) until it clears or the timeout
//! passes, read barrier, then check the delivery status, copy the output and check every output
//! block's token and block number before looking at the output status.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use firmware_interface::cmd::{
    self, CmdLayout, ENTRY_SIZE, INLINE_LEN, MAILBOX_BLOCK_NUM_OFFSET, MAILBOX_DATA,
    MAILBOX_NEXT_OFFSET, MAILBOX_SIZE, MAILBOX_TOKEN_OFFSET, STATUS_OWN_OFFSET, XPORT_TYPE_PCI,
};
use firmware_interface::{init_seg, mbox_in, mbox_out};
use nic_hal::barrier::{dma_rmb, dma_wmb, mmio_wmb};
use nic_hal::{DmaAllocator, Platform, RegisterIo};
use spin::Mutex;

use crate::error::{Error, OutputFault};
use crate::mem::Shared;
use alloc::sync::Arc;

/// Largest command message (input or output) the driver builds or accepts: 1024 mailbox
/// blocks (512 KiB) after the 16 inline bytes.
pub const MAX_MSG_LEN: usize = INLINE_LEN + 1024 * MAILBOX_DATA;

/// Mailbox blocks a slot keeps between commands (enough for SET_HCA_CAP and a full
/// MANAGE_PAGES chunk); a longer chain is freed again after the command.
const KEEP_BLOCKS: usize = 40;

/// Which slot a command goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotKind {
    /// Slot 0: ordinary commands.
    Ordinary,
    /// The last slot: page commands.
    Pages,
}

struct Slot {
    index: u8,
    inbox: Vec<Shared>,
    outbox: Vec<Shared>,
}

/// The command queue: the 4 KiB queue page and the slots the driver uses.
pub(crate) struct CmdQueue {
    page: Option<Shared>,
    log_stride: u8,
    entries: u8,
    ordinary: Mutex<Slot>,
    pages: Option<Mutex<Slot>>,
    token: AtomicU8,
    broken: AtomicBool,
    timeout_ns: u64,
    poll_relax: u32,
}

impl CmdQueue {
    /// Allocates the queue page for a queue of `1 << log_size` entries of `1 << log_stride`
    /// bytes (already validated).
    pub(crate) fn new(
        dma: &Arc<dyn DmaAllocator>,
        log_size: u8,
        log_stride: u8,
        timeout_ns: u64,
        poll_relax: u32,
    ) -> Result<Self, Error> {
        let page = Shared::new(dma, cmd::QUEUE_PAGE_SIZE, cmd::QUEUE_PAGE_SIZE)?;
        let entries = 1u8 << log_size;
        let last = entries - 1;
        let slot = |index| Slot {
            index,
            inbox: Vec::new(),
            outbox: Vec::new(),
        };
        Ok(CmdQueue {
            page: Some(page),
            log_stride,
            entries,
            ordinary: Mutex::new(slot(0)),
            pages: (last != 0).then(|| Mutex::new(slot(last))),
            token: AtomicU8::new(0),
            broken: AtomicBool::new(false),
            timeout_ns,
            poll_relax: poll_relax.max(1),
        })
    }

    /// Device address of the queue page (for `cmdq_addr_h` / `cmdq_addr_l_sz`).
    pub(crate) fn iova(&self) -> u64 {
        self.page.as_ref().map_or(0, |p| p.iova())
    }

    /// Number of entries of the queue.
    pub(crate) fn entries(&self) -> u8 {
        self.entries
    }

    /// Whether a command timed out (the interface is then unusable).
    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    fn next_token(&self) -> u8 {
        // 8-bit counter that skips 0 (Linux), so a zeroed block never matches by accident.
        let mut prev = self.token.load(Ordering::Relaxed);
        loop {
            let next = match prev.wrapping_add(1) {
                0 => 1,
                t => t,
            };
            match self
                .token
                .compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(p) => prev = p,
            }
        }
    }

    /// Whether page commands have a slot of their own (the queue has more than one entry):
    /// only then can a page request be served while an ordinary command waits.
    pub(crate) fn has_page_slot(&self) -> bool {
        self.pages.is_some()
    }

    /// Executes one command: `input` (header included, at least 16 bytes) in, `out_len` bytes
    /// (at least 16) out. Returns the whole output; fails on timeout, delivery error, bad output
    /// chain or a non-zero output status. `waiting` runs between two looks at the ownership
    /// bit while the firmware still owns the entry (the caller serves page requests there).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn exec<R: RegisterIo, P: Platform>(
        &self,
        regs: &R,
        platform: &P,
        dma: &Arc<dyn DmaAllocator>,
        kind: SlotKind,
        input: &[u8],
        out_len: usize,
        waiting: &dyn Fn(),
    ) -> Result<Vec<u8>, Error> {
        let opcode = mbox_in::OPCODE.get(input) as u16;
        if input.len() < INLINE_LEN
            || out_len < INLINE_LEN
            || input.len() > MAX_MSG_LEN
            || out_len > MAX_MSG_LEN
        {
            return Err(Error::InvalidArgument);
        }
        let slot = match kind {
            SlotKind::Pages => self.pages.as_ref().unwrap_or(&self.ordinary),
            SlotKind::Ordinary => &self.ordinary,
        };
        let mut slot = slot.lock();
        if self.is_broken() {
            return Err(Error::CmdTimeout { opcode });
        }
        let Some(page) = self.page.as_ref() else {
            return Err(Error::CmdTimeout { opcode });
        };
        let res = self.exec_locked(
            regs, platform, dma, page, &mut slot, opcode, input, out_len, waiting,
        );
        if !self.is_broken() {
            trim(&mut slot.inbox);
            trim(&mut slot.outbox);
        }
        res
    }

    #[allow(clippy::too_many_arguments)]
    fn exec_locked<R: RegisterIo, P: Platform>(
        &self,
        regs: &R,
        platform: &P,
        dma: &Arc<dyn DmaAllocator>,
        page: &Shared,
        slot: &mut Slot,
        opcode: u16,
        input: &[u8],
        out_len: usize,
        waiting: &dyn Fn(),
    ) -> Result<Vec<u8>, Error> {
        let n_in = cmd::mailbox_count(input.len());
        let n_out = cmd::mailbox_count(out_len);
        grow(dma, &mut slot.inbox, n_in)?;
        grow(dma, &mut slot.outbox, n_out)?;
        let token = self.next_token();

        // Input chain: bytes 16.. of the message, 512 per block.
        let rest = input.get(INLINE_LEN..).unwrap_or(&[]);
        for (k, chunk) in rest.chunks(MAILBOX_DATA).enumerate() {
            let next = slot.inbox.get(k + 1).filter(|_| k + 1 < n_in);
            prepare_block(
                &slot.inbox[k],
                chunk,
                k as u32,
                next.map_or(0, |b| b.iova()),
                token,
            )?;
        }
        // Output chain: zeroed data, our token and block numbers.
        for k in 0..n_out {
            let next = slot.outbox.get(k + 1).filter(|_| k + 1 < n_out);
            prepare_block(
                &slot.outbox[k],
                &[],
                k as u32,
                next.map_or(0, |b| b.iova()),
                token,
            )?;
        }

        let mut lay = CmdLayout::zeroed();
        lay.type_ = XPORT_TYPE_PCI;
        lay.inlen.set(input.len() as u32);
        lay.outlen.set(out_len as u32);
        if n_in > 0 {
            lay.in_ptr.set(slot.inbox[0].iova());
        }
        if n_out > 0 {
            lay.out_ptr.set(slot.outbox[0].iova());
        }
        lay.in_.copy_from_slice(&input[..INLINE_LEN]);
        lay.token = token;
        // The signature covers the entry as the firmware will see it (owner set, sig 0).
        lay.status_own = cmd::OWNER_HW;
        lay.sig = cmd::signature(&lay.to_bytes());
        lay.status_own = 0;

        // Everything that can fail for want of memory happens before the doorbell: after it,
        // the command may have executed, and every failure says so (`BadOutput`).
        let mut out = Vec::new();
        out.try_reserve_exact(out_len)
            .map_err(|_| Error::Dma(nic_hal::DmaError::NoMemory))?;
        let unreadable = Error::BadOutput {
            opcode,
            what: OutputFault::Unreadable,
        };

        let entry = (slot.index as usize) << self.log_stride;
        page.write(entry, &lay.to_bytes())?;
        dma_wmb();
        page.write_u8(entry + STATUS_OWN_OFFSET, cmd::OWNER_HW)?;
        mmio_wmb();
        regs.write32(init_seg::CMD_DBELL, (1u32 << slot.index).to_be());

        // Poll the ownership bit.
        let deadline = platform.now_ns().saturating_add(self.timeout_ns);
        loop {
            let Ok(own) = page.read_u8(entry + STATUS_OWN_OFFSET) else {
                // Who owns the slot is unknown: as after a timeout, nothing is reused.
                self.broken.store(true, Ordering::Release);
                return Err(unreadable);
            };
            if own & cmd::OWNER_HW == 0 {
                break;
            }
            if platform.now_ns() >= deadline {
                // The firmware still owns the slot and may write it (and its mailboxes) at any
                // time: the interface is unusable from here on, and that memory is never freed.
                self.broken.store(true, Ordering::Release);
                return Err(Error::CmdTimeout { opcode });
            }
            waiting();
            for _ in 0..self.poll_relax {
                platform.relax();
            }
        }
        dma_rmb();

        let mut raw = [0u8; ENTRY_SIZE];
        page.read(entry, &mut raw).map_err(|_| unreadable)?;
        let done = CmdLayout::from_bytes(&raw);
        let status = done.delivery_status();
        if status != 0 {
            return Err(Error::Delivery { opcode, status });
        }

        out.extend_from_slice(&done.out);
        let mut block = [0u8; MAILBOX_SIZE];
        for k in 0..n_out {
            slot.outbox[k].read(0, &mut block).map_err(|_| unreadable)?;
            let found = block[MAILBOX_TOKEN_OFFSET];
            if found != token {
                return Err(Error::BadOutput {
                    opcode,
                    what: OutputFault::Token {
                        block: k as u32,
                        found,
                        expected: token,
                    },
                });
            }
            let num = &block[MAILBOX_BLOCK_NUM_OFFSET..MAILBOX_BLOCK_NUM_OFFSET + 4];
            let found = u32::from_be_bytes([num[0], num[1], num[2], num[3]]);
            if found != k as u32 {
                return Err(Error::BadOutput {
                    opcode,
                    what: OutputFault::BlockNumber {
                        block: k as u32,
                        found,
                    },
                });
            }
            let want = (out_len - out.len()).min(MAILBOX_DATA);
            out.extend_from_slice(&block[..want]);
        }

        let status = mbox_out::STATUS.get(&out) as u8;
        if status != 0 {
            return Err(Error::Cmd {
                opcode,
                status,
                syndrome: mbox_out::SYNDROME.get(&out),
            });
        }
        Ok(out)
    }

    /// Frees the queue page and the mailboxes: only once the device can no longer use them
    /// (the function is disabled) and no command is outstanding.
    pub(crate) fn release(&mut self) {
        if self.is_broken() {
            return;
        }
        if let Some(p) = self.page.take() {
            p.release();
        }
        for slot in core::iter::once(&mut self.ordinary).chain(self.pages.as_mut()) {
            let s = slot.get_mut();
            for b in s.inbox.drain(..).chain(s.outbox.drain(..)) {
                b.release();
            }
        }
    }
}

/// Makes sure `chain` has at least `n` blocks.
fn grow(dma: &Arc<dyn DmaAllocator>, chain: &mut Vec<Shared>, n: usize) -> Result<(), Error> {
    while chain.len() < n {
        chain
            .try_reserve(1)
            .map_err(|_| Error::Dma(nic_hal::DmaError::NoMemory))?;
        chain.push(Shared::new(dma, MAILBOX_SIZE, cmd::MAILBOX_ALIGN)?);
    }
    Ok(())
}

/// Frees blocks beyond [`KEEP_BLOCKS`] (the command that needed them is complete).
fn trim(chain: &mut Vec<Shared>) {
    while chain.len() > KEEP_BLOCKS {
        if let Some(b) = chain.pop() {
            b.release();
        }
    }
}

/// Zeroes a mailbox block and writes its payload, `next`, `block_num` and `token`.
fn prepare_block(b: &Shared, data: &[u8], num: u32, next: u64, token: u8) -> Result<(), Error> {
    b.fill(0, MAILBOX_SIZE, 0)?;
    b.write(0, data)?;
    b.write_be64(MAILBOX_NEXT_OFFSET, next)?;
    b.write_be32(MAILBOX_BLOCK_NUM_OFFSET, num)?;
    b.write_u8(MAILBOX_TOKEN_OFFSET, token)?;
    Ok(())
}
