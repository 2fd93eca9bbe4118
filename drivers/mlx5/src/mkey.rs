//! Memory keys (`docs/mlx5.md#mkey-context`): MTT-mode registrations of 4 KB pages.

use core::sync::atomic::Ordering;
use firmware_interface::cmds::{create_mkey_in, create_mkey_out, destroy_mkey_in};
use firmware_interface::ctx::mkc;
use firmware_interface::opcode;
use nic_hal::{Platform, RegisterIo};

use crate::cmdq::MAX_MSG_LEN;
use crate::device::{Device, cmd_in};
use crate::error::Error;

/// Access rights of a memory key (local read is always granted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MkeyAccess(u8);

// The accessors are for `mlx5::raw` users.
#[cfg_attr(not(feature = "raw"), allow(dead_code))]
impl MkeyAccess {
    /// Local read only.
    pub const LOCAL_READ: MkeyAccess = MkeyAccess(0);
    /// The device may write the memory for local operations (receives, RDMA read results).
    pub const LOCAL_WRITE: MkeyAccess = MkeyAccess(1 << 0);
    /// Remote peers may RDMA-write (requires `LOCAL_WRITE`).
    pub const REMOTE_WRITE: MkeyAccess = MkeyAccess(1 << 1);
    /// Remote peers may RDMA-read.
    pub const REMOTE_READ: MkeyAccess = MkeyAccess(1 << 2);
    /// Remote peers may perform atomics (requires `LOCAL_WRITE`).
    pub const REMOTE_ATOMIC: MkeyAccess = MkeyAccess(1 << 3);
    /// A SEND with invalidate naming the key may invalidate it (mkc `en_rinval`): the
    /// device then refuses every later access through it. A key without it is refused by
    /// such a SEND (the responder's QP and the sender's go to error).
    pub const REMOTE_INVALIDATE: MkeyAccess = MkeyAccess(1 << 4);

    /// Whether every right in `other` is in `self`.
    pub const fn contains(self, other: MkeyAccess) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl core::ops::BitOr for MkeyAccess {
    type Output = MkeyAccess;
    fn bitor(self, rhs: MkeyAccess) -> MkeyAccess {
        MkeyAccess(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for MkeyAccess {
    fn bitor_assign(&mut self, rhs: MkeyAccess) {
        self.0 |= rhs.0;
    }
}

/// A memory key. The memory it maps belongs to the caller and must stay valid (and
/// DMA-mapped) until [`destroy_mkey`](crate::raw::RawDevice::destroy_mkey) returned `Ok`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mkey {
    index: u32,
    key: u32,
    pd: u32,
    iova: u64,
    len: u64,
    access: MkeyAccess,
}

#[cfg_attr(not(feature = "raw"), allow(dead_code))]
impl Mkey {
    /// The mkey index (`key >> 8`).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The key used in WQEs: `index << 8 | mkey_7_0`.
    pub fn key(&self) -> u32 {
        self.key
    }

    /// Local key (the same value).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// Remote key (the same value).
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// Protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// First I/O virtual address covered.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: keys of zero length are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Access rights.
    pub fn access(&self) -> MkeyAccess {
        self.access
    }
}

/// Most MTT entries one CREATE_MKEY can carry (the command must fit in
/// [`MAX_MSG_LEN`]).
pub(crate) const MAX_MTT: usize =
    (MAX_MSG_LEN - create_mkey_in::SIZE) / create_mkey_in::MTT_ENTRY_SIZE;

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Registers `len` bytes at I/O virtual address `iova` in PD `pd`, translated through
    /// `pages`: the device addresses of the 4 KB pages covering `[iova, iova + len)`, the first
    /// being the page that holds `iova` (MTT mode, `log_page_size` 12).
    ///
    /// # Safety
    ///
    /// The pages are memory the caller owns, mapped for the device, and they stay allocated,
    /// mapped and given to nobody else until [`destroy_mkey`](Self::destroy_mkey) of the key
    /// returned `Ok` (forever if it never does): the device may read and write them through
    /// the key until then. (The verbs provider's safe `reg_mr` keeps the memory's
    /// [`verbs::Buffer`] for that long.)
    pub(crate) unsafe fn create_mkey(
        &self,
        pd: u32,
        iova: u64,
        len: u64,
        access: MkeyAccess,
        pages: &[u64],
    ) -> Result<Mkey, Error> {
        let end = iova.checked_add(len).ok_or(Error::InvalidArgument)?;
        let first = iova & !0xfff;
        let needed = end.div_ceil(4096) - first / 4096;
        if len == 0
            || pd > 0xff_ffff
            || (pages.len() as u64) < needed
            || pages.len() > MAX_MTT
            || pages.iter().any(|p| p & 0xfff != 0)
        {
            return Err(Error::InvalidArgument);
        }
        let remote_w = access.contains(MkeyAccess::REMOTE_WRITE);
        let remote_a = access.contains(MkeyAccess::REMOTE_ATOMIC);
        if (remote_w || remote_a) && !access.contains(MkeyAccess::LOCAL_WRITE) {
            return Err(Error::InvalidArgument);
        }
        if remote_a && !self.caps.atomic {
            return Err(Error::NotSupported);
        }
        // Translation entries go in pairs (16-byte octwords).
        let n = pages.len().next_multiple_of(2);
        let octwords = (n / 2) as u32;
        let mut inp = cmd_in(
            opcode::CREATE_MKEY,
            0,
            create_mkey_in::SIZE + n * create_mkey_in::MTT_ENTRY_SIZE,
        );
        // Variants run 1..=255, never 0: key `1 << 8 | 0` would be 0x100, the receive
        // scatter-list terminator (`wqe::INVALID_LKEY`), and a device handing out mkey index 1
        // would then see every SGE of that key as the end of the list.
        let variant = self.mkey_variant.fetch_add(1, Ordering::Relaxed) % 255 + 1;
        let c = create_mkey_in::MEMORY_KEY_MKEY_ENTRY.byte_off();
        mkc::LR.at(c).set(&mut inp, 1);
        mkc::LW
            .at(c)
            .set(&mut inp, access.contains(MkeyAccess::LOCAL_WRITE) as u32);
        mkc::RR
            .at(c)
            .set(&mut inp, access.contains(MkeyAccess::REMOTE_READ) as u32);
        mkc::RW.at(c).set(&mut inp, remote_w as u32);
        mkc::A.at(c).set(&mut inp, remote_a as u32);
        mkc::EN_RINVAL.at(c).set(
            &mut inp,
            access.contains(MkeyAccess::REMOTE_INVALIDATE) as u32,
        );
        mkc::ACCESS_MODE_1_0
            .at(c)
            .set(&mut inp, mkc::ACCESS_MODE_MTT);
        mkc::QPN.at(c).set(&mut inp, mkc::QPN_NONE);
        mkc::MKEY_7_0.at(c).set(&mut inp, variant as u32);
        mkc::PD.at(c).set(&mut inp, pd);
        mkc::START_ADDR.at(c).set64(&mut inp, iova);
        mkc::LEN.at(c).set64(&mut inp, len);
        mkc::TRANSLATIONS_OCTWORD_SIZE.at(c).set(&mut inp, octwords);
        mkc::LOG_PAGE_SIZE.at(c).set(&mut inp, 12);
        create_mkey_in::TRANSLATIONS_OCTWORD_ACTUAL_SIZE.set(&mut inp, octwords);
        let mtt = create_mkey_in::KLM_PAS_MTT.byte_off();
        for (i, p) in pages.iter().enumerate() {
            let off = mtt + i * create_mkey_in::MTT_ENTRY_SIZE;
            inp[off..off + 8].copy_from_slice(&p.to_be_bytes());
        }
        let out = self.cmd(&inp, 16)?;
        let index = self.object_number(
            opcode::CREATE_MKEY,
            &out,
            create_mkey_out::MKEY_INDEX,
            self.caps.log_max_mkey,
        )?;
        Ok(Mkey {
            index,
            key: (index << 8) | variant as u32,
            pd,
            iova,
            len,
            access,
        })
    }

    /// Destroys a memory key. After success the device no longer accesses its memory.
    pub(crate) fn destroy_mkey(&self, mkey: Mkey) -> Result<(), Error> {
        let mut inp = cmd_in(opcode::DESTROY_MKEY, 0, 16);
        destroy_mkey_in::MKEY_INDEX.set(&mut inp, mkey.index);
        self.cmd(&inp, 16).map(drop)
    }
}
