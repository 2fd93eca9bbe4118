//! PCI function addresses (`DDDD:BB:DD.F`) and the config-space facts this crate uses.

use std::fmt;
use std::str::FromStr;

/// Config space offset of the vendor ID (16 bits, little-endian).
pub const PCI_VENDOR_ID: u64 = 0x00;
/// Config space offset of the device ID (16 bits, little-endian).
pub const PCI_DEVICE_ID: u64 = 0x02;
/// Config space offset of the command register (16 bits, little-endian).
pub const PCI_COMMAND: u64 = 0x04;
/// Command register: respond to memory-space accesses (BARs).
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: the function may master the bus (issue DMA).
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// A PCI function address as sysfs spells it: `domain:bus:device.function`.
///
/// Parsing accepts a 4- to 8-digit hex domain (VMD domains have five digits), a 2-digit bus, a
/// 2-digit device (at most `1f`) and a 1-digit function (at most 7), in either case; `Display`
/// gives the lowercase form sysfs uses.
///
/// ```
/// use vfio_attach::PciAddress;
/// let a: PciAddress = "0000:3B:00.1".parse().unwrap();
/// assert_eq!((a.domain, a.bus, a.device, a.function), (0, 0x3b, 0, 1));
/// assert_eq!(a.to_string(), "0000:3b:00.1");
/// assert!("3b:00.1".parse::<PciAddress>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI segment (domain).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

/// Why a string is not a PCI address; the `Display` says what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciAddressError {
    /// The string given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for PciAddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a PCI address: {} (expected DDDD:BB:DD.F in hex, e.g. 0000:3b:00.0, as `lspci -D` prints it)",
            self.input, self.reason
        )
    }
}

impl std::error::Error for PciAddressError {}

fn hex_field(s: &str, min: usize, max: usize) -> Option<u32> {
    if s.len() < min || s.len() > max || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

impl FromStr for PciAddress {
    type Err = PciAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| PciAddressError {
            input: s.to_string(),
            reason,
        };
        let (dbd, func) = s
            .rsplit_once('.')
            .ok_or_else(|| err("no '.' before the function"))?;
        let mut parts = dbd.split(':');
        let (Some(dom), Some(bus), Some(dev), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(err(
                "domain, bus and device must be three ':'-separated fields",
            ));
        };
        let domain = hex_field(dom, 4, 8).ok_or_else(|| err("domain must be 4 to 8 hex digits"))?;
        let bus = hex_field(bus, 2, 2).ok_or_else(|| err("bus must be 2 hex digits"))?;
        let device = hex_field(dev, 2, 2).ok_or_else(|| err("device must be 2 hex digits"))?;
        let function = hex_field(func, 1, 1).ok_or_else(|| err("function must be 1 hex digit"))?;
        if device > 0x1f {
            return Err(err("device number must be at most 1f"));
        }
        if function > 7 {
            return Err(err("function number must be at most 7"));
        }
        Ok(PciAddress {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_addresses() {
        let cases = [
            ("0000:00:02.0", (0, 0, 2, 0), "0000:00:02.0"),
            ("0000:3b:00.1", (0, 0x3b, 0, 1), "0000:3b:00.1"),
            ("0000:FF:1F.7", (0, 0xff, 0x1f, 7), "0000:ff:1f.7"),
            ("abcd:01:10.3", (0xabcd, 1, 0x10, 3), "abcd:01:10.3"),
            ("10000:e1:00.0", (0x10000, 0xe1, 0, 0), "10000:e1:00.0"),
        ];
        for (input, (d, b, dev, f), shown) in cases {
            let a: PciAddress = input.parse().unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(
                (a.domain, a.bus, a.device, a.function),
                (d, b, dev, f),
                "{input}"
            );
            assert_eq!(a.to_string(), shown);
            assert_eq!(shown.parse::<PciAddress>().unwrap(), a);
        }
    }

    #[test]
    fn invalid_addresses() {
        let cases = [
            ("", "no '.'"),
            ("0000:00:02", "no '.'"),
            ("00:02.0", "three"),
            ("0000:00:00:02.0", "three"),
            ("000:00:02.0", "domain"),
            ("000000000:00:02.0", "domain"),
            ("0000:0:02.0", "bus"),
            ("0000:000:02.0", "bus"),
            ("0000:00:2.0", "device"),
            ("0000:00:20.0", "at most 1f"),
            ("0000:00:02.8", "at most 7"),
            ("0000:00:02.00", "function"),
            ("0000:00:02.", "function"),
            ("0000:0g:02.0", "bus"),
            ("0000:+1:02.0", "bus"),
            ("../../../x:00:02.0", "domain"),
            ("0000:00:02.0 ", "function"),
        ];
        for (input, why) in cases {
            let e = input.parse::<PciAddress>().unwrap_err();
            assert_eq!(e.input, input);
            assert!(e.reason.contains(why), "{input:?}: {}", e.reason);
            assert!(e.to_string().contains("DDDD:BB:DD.F"));
        }
    }
}
