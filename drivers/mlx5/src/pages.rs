//! Firmware pages (`docs/mlx5.md#firmware-pages`): the 4 KB pages the driver lends the firmware at
//! boot, at init and on request, and takes back at teardown.
//!
//! The pool remembers every page given, by device address, so that a page the firmware hands
//! back can be checked: an address the driver never gave (or gave once and got back twice) is
//! [`Error::BadOutput`], and nothing is freed on its account.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use firmware_interface::cmds::{manage_pages_in, manage_pages_out, query_pages_out};
use firmware_interface::{op_mod, opcode};
use nic_hal::{Platform, RegisterIo};

use crate::cmdq::SlotKind;
use crate::device::{Device, cmd_in};
use crate::error::{Error, OutputFault};
use crate::mem::Shared;

/// Firmware page size.
const PAGE: usize = 4096;
/// Most page addresses in one MANAGE_PAGES command: 32 mailbox blocks of 64 addresses.
pub(crate) const PAGES_PER_CMD: u32 = 2048;
/// TAKE commands in a row that may return nothing before teardown gives up.
const MAX_IDLE_TAKES: u32 = 16;

/// Pages the firmware holds.
#[derive(Default)]
pub(crate) struct PagePool {
    given: BTreeMap<u64, Shared>,
    /// `(function_id, embedded_cpu_function)` of the last QUERY_PAGES / page request.
    func: (u16, bool),
}

impl PagePool {
    /// Number of pages the firmware holds.
    pub(crate) fn len(&self) -> usize {
        self.given.len()
    }
}

/// What is wrong with a TAKE answer, if anything: every address must be one we gave, once.
fn check_returned(pool: &PagePool, addrs: &[u64]) -> Result<(), OutputFault> {
    let mut sorted = addrs.to_vec();
    sorted.sort_unstable();
    for (i, &a) in sorted.iter().enumerate() {
        let dup = i > 0 && sorted[i - 1] == a;
        if dup || !pool.given.contains_key(&a) {
            return Err(OutputFault::PageAddress { addr: a });
        }
    }
    Ok(())
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// QUERY_PAGES: `(function_id, embedded_cpu_function, num_pages)`.
    pub(crate) fn query_pages(&self, which: u16) -> Result<(u16, bool, i32), Error> {
        let out = self.cmd(&cmd_in(opcode::QUERY_PAGES, which, 16), 16)?;
        Ok((
            query_pages_out::FUNCTION_ID.get(&out) as u16,
            query_pages_out::EMBEDDED_CPU_FUNCTION.get(&out) != 0,
            query_pages_out::NUM_PAGES.get(&out) as i32,
        ))
    }

    /// Boot or init pages: QUERY_PAGES, then GIVE that many (a negative or absurd count is an
    /// error, checked before anything is allocated).
    pub(crate) fn satisfy_pages(&self, which: u16) -> Result<(), Error> {
        let (func, ec, n) = self.query_pages(which)?;
        self.pages.lock().func = (func, ec);
        if n < 0 {
            return Err(Error::BadOutput {
                opcode: opcode::QUERY_PAGES,
                what: OutputFault::PageCount { value: n },
            });
        }
        self.give_pages(func, ec, n, opcode::QUERY_PAGES)
    }

    /// Gives `n` pages to function `func`, in commands of at most [`PAGES_PER_CMD`] pages.
    /// `origin` names the command (or 0: an event) that asked, for the error.
    pub(crate) fn give_pages(&self, func: u16, ec: bool, n: i32, origin: u16) -> Result<(), Error> {
        let held = self.pages.lock().len() as u64;
        if n < 0 || held + n as u64 > self.config.max_fw_pages as u64 {
            return Err(Error::BadOutput {
                opcode: origin,
                what: OutputFault::PageCount { value: n },
            });
        }
        let mut left = n as u32;
        while left > 0 {
            let k = left.min(PAGES_PER_CMD);
            let mut chunk: Vec<Shared> = Vec::new();
            chunk
                .try_reserve_exact(k as usize)
                .map_err(|_| Error::Dma(nic_hal::DmaError::NoMemory))?;
            for _ in 0..k {
                match Shared::new(&self.dma, PAGE, PAGE) {
                    Ok(p) => chunk.push(p),
                    Err(e) => {
                        chunk.into_iter().for_each(Shared::release);
                        return Err(e.into());
                    }
                }
            }
            let len = manage_pages_in::SIZE + chunk.len() * manage_pages_in::PAS_ENTRY_SIZE;
            let mut inp = cmd_in(opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_GIVE, len);
            manage_pages_in::FUNCTION_ID.set(&mut inp, func as u32);
            manage_pages_in::EMBEDDED_CPU_FUNCTION.set(&mut inp, ec as u32);
            manage_pages_in::INPUT_NUM_ENTRIES.set(&mut inp, k);
            for (i, p) in chunk.iter().enumerate() {
                let off = manage_pages_in::SIZE + i * manage_pages_in::PAS_ENTRY_SIZE;
                inp[off..off + 8].copy_from_slice(&p.iova().to_be_bytes());
            }
            match self.cmd_on(SlotKind::Pages, &inp, 16) {
                Ok(_) => {
                    let mut pool = self.pages.lock();
                    for p in chunk {
                        pool.given.insert(p.iova(), p);
                    }
                }
                Err(e) => {
                    if !crate::device_may_hold(&e) {
                        chunk.into_iter().for_each(Shared::release);
                    }
                    // else: dropped without release, i.e. leaked: the firmware may use them.
                    return Err(e);
                }
            }
            left -= k;
        }
        Ok(())
    }

    /// One MANAGE_PAGES TAKE of up to `n` (≤ [`PAGES_PER_CMD`]) pages; frees what comes back.
    /// Returns the number of pages returned.
    pub(crate) fn take_pages(&self, func: u16, ec: bool, n: u32) -> Result<u32, Error> {
        let n = n.min(PAGES_PER_CMD);
        let mut inp = cmd_in(opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_TAKE, 16);
        manage_pages_in::FUNCTION_ID.set(&mut inp, func as u32);
        manage_pages_in::EMBEDDED_CPU_FUNCTION.set(&mut inp, ec as u32);
        manage_pages_in::INPUT_NUM_ENTRIES.set(&mut inp, n);
        let out_len = manage_pages_out::SIZE + n as usize * manage_pages_out::PAS_ENTRY_SIZE;
        let out = self.cmd_on(SlotKind::Pages, &inp, out_len)?;
        let got = manage_pages_out::OUTPUT_NUM_ENTRIES.get(&out);
        if got > n {
            return Err(Error::BadOutput {
                opcode: opcode::MANAGE_PAGES,
                what: OutputFault::PageEntries {
                    returned: got,
                    requested: n,
                },
            });
        }
        let addrs: Vec<u64> = out[manage_pages_out::SIZE..]
            .chunks_exact(manage_pages_out::PAS_ENTRY_SIZE)
            .take(got as usize)
            .map(|c| u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect();
        let mut pool = self.pages.lock();
        check_returned(&pool, &addrs).map_err(|what| Error::BadOutput {
            opcode: opcode::MANAGE_PAGES,
            what,
        })?;
        for a in addrs {
            if let Some(p) = pool.given.remove(&a) {
                p.release();
            }
        }
        Ok(got)
    }

    /// Takes back every page (teardown, or a "release all" request). Stops when the firmware
    /// returned nothing [`MAX_IDLE_TAKES`] times in a row or [`Config::reclaim_timeout_ns`]
    /// passed without progress; the pages still held are then reported (and stay leaked).
    ///
    /// [`Config::reclaim_timeout_ns`]: crate::Config::reclaim_timeout_ns
    pub(crate) fn reclaim_all_pages(&self) -> Result<(), Error> {
        let (func, ec) = self.pages.lock().func;
        let mut idle = 0;
        let mut deadline = self
            .platform
            .now_ns()
            .saturating_add(self.config.reclaim_timeout_ns);
        loop {
            let left = self.pages.lock().len();
            if left == 0 {
                return Ok(());
            }
            if self.cmdq.is_broken() {
                return Err(Error::PagesNotReclaimed { left: left as u32 });
            }
            let ask = (left as u32).min(PAGES_PER_CMD);
            if self.take_pages(func, ec, ask)? == 0 {
                idle += 1;
                if idle >= MAX_IDLE_TAKES || self.platform.now_ns() >= deadline {
                    return Err(Error::PagesNotReclaimed { left: left as u32 });
                }
                self.platform.relax();
            } else {
                idle = 0;
                deadline = self
                    .platform
                    .now_ns()
                    .saturating_add(self.config.reclaim_timeout_ns);
            }
        }
    }

    /// Serves at most `budget` of the queued page requests, oldest first; returns how many,
    /// or the first error after all of them were tried.
    pub(crate) fn serve_page_requests(&self, budget: usize) -> Result<usize, Error> {
        let mut first = None;
        let mut n = 0;
        while n < budget {
            let Some(r) = self.pending.lock().page_requests.pop_front() else {
                break;
            };
            n += 1;
            if let Err(e) =
                self.handle_page_request(r.function_id, r.ec_function, r.release_all, r.num_pages)
            {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(n), Err)
    }

    /// Serves a firmware page request (EQE type PAGE_REQUEST): give `num_pages` (> 0), take
    /// back `-num_pages` (< 0), or everything when `release_all`. If the pages cannot be given,
    /// the firmware is told (MANAGE_PAGES CANT_GIVE) and the error returned.
    pub(crate) fn handle_page_request(
        &self,
        func: u16,
        ec: bool,
        release_all: bool,
        num_pages: i32,
    ) -> Result<(), Error> {
        self.pages.lock().func = (func, ec);
        if release_all {
            return self.reclaim_all_pages();
        }
        if num_pages > 0 {
            if let Err(e) = self.give_pages(func, ec, num_pages, 0) {
                if !self.cmdq.is_broken() {
                    let mut inp = cmd_in(opcode::MANAGE_PAGES, op_mod::MANAGE_PAGES_CANT_GIVE, 16);
                    manage_pages_in::FUNCTION_ID.set(&mut inp, func as u32);
                    manage_pages_in::EMBEDDED_CPU_FUNCTION.set(&mut inp, ec as u32);
                    let _ = self.cmd_on(SlotKind::Pages, &inp, 16);
                }
                return Err(e);
            }
            return Ok(());
        }
        // Negative: give back at most what the firmware holds.
        let mut want = (num_pages.unsigned_abs() as usize).min(self.pages.lock().len()) as u32;
        while want > 0 {
            let got = self.take_pages(func, ec, want)?;
            if got == 0 {
                break;
            }
            want = want.saturating_sub(got);
        }
        Ok(())
    }
}
