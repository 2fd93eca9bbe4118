//! Memory keys on the data path (`docs/mlx5.md#mkey-context`): key → mkey, PD, bounds, access
//! flags, PA or MTT translation to I/O virtual addresses, and DMA over the resulting scatter/gather
//! list.

use firmware_interface::ctx::mkc;

use crate::{Device, DmaFault};

/// mkc byte 2 access bits (as kept in [`crate::connectx::objects::Mkey::access`]).
pub(crate) mod access {
    /// Local read.
    pub const LR: u8 = 1 << 2;
    /// Local write.
    pub const LW: u8 = 1 << 3;
    /// Remote read.
    pub const RR: u8 = 1 << 4;
    /// Remote write.
    pub const RW: u8 = 1 << 5;
    /// Remote atomic.
    pub const A: u8 = 1 << 6;
}

/// One physically contiguous piece of a translated buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// I/O virtual address.
    pub iova: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A translated buffer: chunks in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sgl {
    pub chunks: Vec<Chunk>,
    /// Sum of the chunk lengths.
    pub len: u64,
}

impl Sgl {
    pub(crate) fn push(&mut self, c: Chunk) {
        if c.len == 0 {
            return;
        }
        // Merge physically adjacent chunks (MTT pages that happen to be contiguous).
        if let Some(last) = self.chunks.last_mut()
            && last.iova.checked_add(last.len) == Some(c.iova)
        {
            last.len += c.len;
        } else {
            self.chunks.push(c);
        }
        self.len += c.len;
    }

    pub(crate) fn extend(&mut self, other: Sgl) {
        for c in other.chunks {
            self.push(c);
        }
    }

    /// The pieces covering `[off, off + len)` (clipped to the list).
    pub(crate) fn range(&self, off: u64, len: u64) -> impl Iterator<Item = Chunk> + '_ {
        let mut skip = off;
        let mut left = len;
        self.chunks.iter().filter_map(move |c| {
            if left == 0 {
                return None;
            }
            if skip >= c.len {
                skip -= c.len;
                return None;
            }
            let n = (c.len - skip).min(left);
            let out = Chunk {
                iova: c.iova + skip,
                len: n,
            };
            skip = 0;
            left -= n;
            Some(out)
        })
    }
}

/// Why a key check failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyError {
    /// No such mkey index, the variant byte differs, or the key was invalidated.
    NoKey,
    /// The key belongs to another PD.
    Pd,
    /// The range is outside `[start_addr, start_addr + len)`.
    Bounds,
    /// The key does not grant the access.
    Access,
}

impl Device {
    /// Checks `key` for `len` bytes at `va` with `need` access (bits of [`access`]) on behalf
    /// of PD `pd`, and translates the range. `len == 0` checks only the key and the PD.
    pub(crate) fn translate(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        need: u8,
    ) -> Result<Sgl, KeyError> {
        let m = self.obj.mkeys.get(key >> 8).ok_or(KeyError::NoKey)?;
        if m.key_7_0 != key as u8 || m.invalidated {
            return Err(KeyError::NoKey);
        }
        if m.pd != pd {
            return Err(KeyError::Pd);
        }
        if m.access & need != need {
            return Err(KeyError::Access);
        }
        let mut sgl = Sgl::default();
        if len == 0 {
            return Ok(sgl);
        }
        let end = va.checked_add(len).ok_or(KeyError::Bounds)?;
        if !m.length64 {
            let key_end = m.start.checked_add(m.len).ok_or(KeyError::Bounds)?;
            if va < m.start || end > key_end {
                return Err(KeyError::Bounds);
            }
        }
        if m.mode == mkc::ACCESS_MODE_PA {
            sgl.push(Chunk { iova: va, len });
            return Ok(sgl);
        }
        // MTT: page k of the list maps [page_base + k*page, page_base + (k+1)*page); the
        // `contig[k]` pages from k on are one physically contiguous extent.
        let page = 1u64 << m.log_page_size;
        let base = m.start & !(page - 1);
        let mut at = va;
        while at < end {
            let rel = at - base;
            let k = usize::try_from(rel >> m.log_page_size).map_err(|_| KeyError::Bounds)?;
            let pa = *m.mtt.get(k).ok_or(KeyError::Bounds)?;
            let run = u64::from(*m.contig.get(k).ok_or(KeyError::Bounds)?);
            let in_page = rel & (page - 1);
            let n = (run.saturating_mul(page) - in_page).min(end - at);
            sgl.push(Chunk {
                iova: pa + in_page,
                len: n,
            });
            at += n;
        }
        Ok(sgl)
    }

    /// SEND with invalidate of `key` arriving on a QP of PD `pd`: the key must name a valid
    /// mkey of that PD created with `en_rinval`; it is then invalidated (every later access
    /// through it fails as through an unknown key).
    pub(crate) fn remote_invalidate(&mut self, key: u32, pd: u32) -> Result<(), KeyError> {
        let m = self.obj.mkeys.get_mut(key >> 8).ok_or(KeyError::NoKey)?;
        if m.key_7_0 != key as u8 || m.invalidated {
            return Err(KeyError::NoKey);
        }
        if m.pd != pd {
            return Err(KeyError::Pd);
        }
        if !m.rinval {
            return Err(KeyError::Access);
        }
        m.invalidated = true;
        Ok(())
    }

    /// Reads `len` bytes at offset `off` of a translated buffer.
    pub(crate) fn sgl_read(
        &mut self,
        sgl: &Sgl,
        off: u64,
        len: usize,
    ) -> Result<Vec<u8>, DmaFault> {
        let mut out = vec![0u8; len];
        let mut at = 0usize;
        for c in sgl.range(off, len as u64) {
            let n = c.len as usize;
            self.dma_read(c.iova, &mut out[at..at + n])?;
            at += n;
        }
        out.truncate(at);
        Ok(out)
    }

    /// Fills `dst` from offset `off` of a translated buffer; `dst` must not extend past the
    /// buffer's end (the bytes past it are left as they are).
    pub(crate) fn sgl_read_into(
        &mut self,
        sgl: &Sgl,
        off: u64,
        dst: &mut [u8],
    ) -> Result<(), DmaFault> {
        let mut at = 0usize;
        for c in sgl.range(off, dst.len() as u64) {
            let n = c.len as usize;
            self.dma_read(c.iova, &mut dst[at..at + n])?;
            at += n;
        }
        Ok(())
    }

    /// Writes `data` at offset `off` of a translated buffer (clipped to the buffer).
    pub(crate) fn sgl_write(&mut self, sgl: &Sgl, off: u64, data: &[u8]) -> Result<(), DmaFault> {
        let mut at = 0usize;
        for c in sgl.range(off, data.len() as u64) {
            let n = c.len as usize;
            self.dma_write(c.iova, &data[at..at + n])?;
            at += n;
        }
        Ok(())
    }
}
