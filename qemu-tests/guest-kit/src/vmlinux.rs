//! The uncompressed ELF `vmlinux` inside an x86 bzImage.
//!
//! QEMU 7.2 boots an ELF with a PVH note directly (`-kernel vmlinux`), which skips the
//! decompressor; under TCG that saves about 3 s per boot. The bzImage's setup header (at
//! 0x1f1) gives `setup_sects` and, from boot protocol 2.08 on, `payload_offset` /
//! `payload_length` (relative to the protected-mode code, which starts at
//! `(setup_sects + 1) * 512`). Debian's payload is XZ with the x86 BCJ filter, followed by the
//! 4-byte uncompressed size.

use std::io::Read;

/// XZ stream magic.
const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0x00];
/// ELF magic.
const ELF_MAGIC: &[u8] = b"\x7fELF";

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The compressed payload of a bzImage (offset and length in the file).
pub fn payload(bz: &[u8]) -> Result<(usize, usize), String> {
    if bz.get(0x202..0x206) != Some(b"HdrS") {
        return Err("not a bzImage: no \"HdrS\" at 0x202".into());
    }
    let version = bz
        .get(0x206..0x208)
        .map(|s| u16::from_le_bytes([s[0], s[1]]));
    if version.is_none_or(|v| v < 0x208) {
        return Err(format!(
            "boot protocol {version:x?} is older than 2.08: no payload fields"
        ));
    }
    let setup_sects = match bz[0x1f1] {
        0 => 4,
        n => n as usize,
    };
    let pm = (setup_sects + 1) * 512;
    let off = u32_at(bz, 0x248).ok_or("truncated header")? as usize;
    let len = u32_at(bz, 0x24c).ok_or("truncated header")? as usize;
    let start = pm + off;
    if len == 0 || start.checked_add(len).is_none_or(|end| end > bz.len()) {
        return Err(format!(
            "payload at {start:#x}+{len:#x} is outside the {:#x}-byte image",
            bz.len()
        ));
    }
    Ok((start, len))
}

/// Decompresses the bzImage's payload to the ELF `vmlinux`. Only XZ payloads (Debian's) are
/// supported; anything else is an error naming the magic found.
pub fn extract(bz: &[u8]) -> Result<Vec<u8>, String> {
    let (start, len) = payload(bz)?;
    let p = &bz[start..start + len];
    if !p.starts_with(XZ_MAGIC) {
        return Err(format!(
            "payload is not XZ (starts with {:02x?}); only XZ kernels are supported",
            &p[..p.len().min(6)]
        ));
    }
    // One stream; the trailing 4-byte size is not XZ padding, so do not look for more.
    let mut r = lzma_rust2::XzReader::new(p, false);
    let mut out = Vec::with_capacity(80 << 20);
    r.read_to_end(&mut out)
        .map_err(|e| format!("XZ decompression of the kernel payload failed: {e}"))?;
    if len >= 4 {
        let size = u32_at(p, len - 4).unwrap_or(0) as usize;
        if size != out.len() {
            return Err(format!(
                "decompressed {} bytes, the image says {size}",
                out.len()
            ));
        }
    }
    if !out.starts_with(ELF_MAGIC) {
        return Err("decompressed payload is not an ELF file".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checks() {
        assert!(payload(&[0u8; 4096]).unwrap_err().contains("HdrS"));
        let mut b = vec![0u8; 4096];
        b[0x202..0x206].copy_from_slice(b"HdrS");
        b[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
        b[0x1f1] = 1; // protected-mode code at 1024
        b[0x248..0x24c].copy_from_slice(&16u32.to_le_bytes());
        b[0x24c..0x250].copy_from_slice(&100u32.to_le_bytes());
        assert_eq!(payload(&b).unwrap(), (1040, 100));
        b[0x24c..0x250].copy_from_slice(&10_000u32.to_le_bytes());
        assert!(payload(&b).unwrap_err().contains("outside"));
        b[0x24c..0x250].copy_from_slice(&100u32.to_le_bytes());
        assert!(extract(&b).unwrap_err().contains("not XZ"));
        b[0x206..0x208].copy_from_slice(&0x206u16.to_le_bytes());
        assert!(payload(&b).unwrap_err().contains("older"));
    }
}
