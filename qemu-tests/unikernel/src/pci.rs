//! PCI configuration space through ports 0xCF8/0xCFC: a recursive bus scan and BAR sizing.

use alloc::vec::Vec;

use crate::io::{inl, outl};

/// One PCI function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    /// Bus number.
    pub bus: u8,
    /// Device number.
    pub dev: u8,
    /// Function number.
    pub func: u8,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Class code, subclass, programming interface (24 bits).
    pub class: u32,
}

fn addr(bus: u8, dev: u8, func: u8, off: u8) -> u32 {
    0x8000_0000
        | u32::from(bus) << 16
        | u32::from(dev & 0x1f) << 11
        | u32::from(func & 7) << 8
        | u32::from(off & 0xfc)
}

/// Reads a configuration dword.
pub fn read32(bus: u8, dev: u8, func: u8, off: u8) -> u32 {
    outl(0xcf8, addr(bus, dev, func, off));
    inl(0xcfc)
}

/// Writes a configuration dword.
pub fn write32(bus: u8, dev: u8, func: u8, off: u8, v: u32) {
    outl(0xcf8, addr(bus, dev, func, off));
    outl(0xcfc, v);
}

impl Function {
    /// Reads a dword of this function's configuration space.
    pub fn read(&self, off: u8) -> u32 {
        read32(self.bus, self.dev, self.func, off)
    }

    /// Writes a dword of this function's configuration space.
    pub fn write(&self, off: u8, v: u32) {
        write32(self.bus, self.dev, self.func, off, v)
    }

    /// Writes the command register only (the status half is write-1-to-clear: written 0).
    pub fn set_command(&self, cmd: u16) {
        self.write(0x04, u32::from(cmd));
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        self.read(0x04) as u16
    }
}

fn probe(bus: u8, dev: u8, func: u8) -> Option<Function> {
    let id = read32(bus, dev, func, 0);
    let vendor = id as u16;
    if vendor == 0xffff {
        return None;
    }
    Some(Function {
        bus,
        dev,
        func,
        vendor,
        device: (id >> 16) as u16,
        class: read32(bus, dev, func, 0x08) >> 8,
    })
}

fn scan_bus(bus: u8, out: &mut Vec<Function>, depth: u32) {
    for dev in 0..32 {
        let Some(f0) = probe(bus, dev, 0) else {
            continue;
        };
        let multi = (read32(bus, dev, 0, 0x0c) >> 16) & 0x80 != 0;
        let nfunc = if multi { 8 } else { 1 };
        for func in 0..nfunc {
            let f = if func == 0 {
                Some(f0)
            } else {
                probe(bus, dev, func)
            };
            let Some(f) = f else { continue };
            out.push(f);
            // A PCI-PCI bridge: scan its secondary bus.
            if f.class >> 8 == 0x0604 && depth < 8 {
                let secondary = (f.read(0x18) >> 8) as u8;
                if secondary > bus {
                    scan_bus(secondary, out, depth + 1);
                }
            }
        }
    }
}

/// Every function reachable from bus 0.
pub fn scan() -> Vec<Function> {
    let mut v = Vec::new();
    scan_bus(0, &mut v, 0);
    v
}

/// A memory BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bar {
    /// Physical address.
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
}

/// Memory BAR `index` (0..=5) of `f`, sized with decoding off; `None` for an I/O BAR, an
/// unimplemented one, or one the firmware left unassigned.
pub fn memory_bar(f: &Function, index: u8) -> Option<Bar> {
    if index > 5 {
        return None;
    }
    let off = 0x10 + 4 * index;
    let lo = f.read(off);
    if lo & 1 != 0 {
        return None;
    }
    let is64 = (lo >> 1) & 3 == 2;
    if is64 && index == 5 {
        return None;
    }
    let hi = if is64 { f.read(off + 4) } else { 0 };
    let cmd = f.command();
    f.set_command(cmd & !0x0003);
    f.write(off, 0xffff_ffff);
    if is64 {
        f.write(off + 4, 0xffff_ffff);
    }
    let size_lo = f.read(off) & !0xf;
    let size_hi = if is64 { f.read(off + 4) } else { 0xffff_ffff };
    f.write(off, lo);
    if is64 {
        f.write(off + 4, hi);
    }
    f.set_command(cmd);
    let mask = u64::from(size_hi) << 32 | u64::from(size_lo);
    if mask == 0 {
        return None;
    }
    let size = (!mask).wrapping_add(1);
    let addr = u64::from(hi) << 32 | u64::from(lo & !0xf);
    if addr == 0 || size == 0 {
        return None;
    }
    Some(Bar { addr, size })
}
