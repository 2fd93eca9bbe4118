//! Ethernet II framing and ARP for IPv4 over Ethernet (RFC 826): what a RoCEv2 port puts
//! around its IPv4 packets on a real (or QEMU-emulated) Ethernet link.
//!
//! * [`EthHeader`]: destination MAC, source MAC, EtherType (no VLAN tag, no FCS).
//! * [`ArpPacket`]: the 28-byte ARP body for hardware type Ethernet and protocol IPv4.
//! * [`frame_for_me`]: the receive filter of a port (its own MAC or broadcast).
//!
//! `core` + `alloc` only.

use alloc::vec::Vec;
use core::net::Ipv4Addr;

/// A 48-bit Ethernet address.
pub type Mac = [u8; 6];

/// The broadcast address.
pub const BROADCAST: Mac = [0xFF; 6];
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// Shortest frame on the wire without FCS (senders such as e1000 pad to it; virtio-net does
/// not).
pub const MIN_FRAME: usize = 60;

/// Whether `mac` is a group (multicast or broadcast) address: bit 0 of the first byte.
pub const fn is_multicast(mac: &Mac) -> bool {
    mac[0] & 1 == 1
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
pub fn mac_to_string(mac: &Mac) -> alloc::string::String {
    use core::fmt::Write;
    let mut s = alloc::string::String::with_capacity(17);
    for (i, b) in mac.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Why bytes are not the Ethernet/ARP frame expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EthError {
    /// Shorter than the header or body.
    Truncated,
    /// ARP with a hardware type other than Ethernet (1), a protocol other than IPv4, or
    /// address lengths other than 6 and 4.
    UnsupportedArp,
    /// ARP operation other than request (1) or reply (2).
    BadArpOp(u16),
}

impl core::fmt::Display for EthError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated Ethernet frame"),
            Self::UnsupportedArp => f.write_str("ARP not for Ethernet/IPv4"),
            Self::BadArpOp(op) => write!(f, "ARP operation {op}"),
        }
    }
}

impl core::error::Error for EthError {}

/// The 14-byte Ethernet II header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthHeader {
    /// Destination address.
    pub dst: Mac,
    /// Source address.
    pub src: Mac,
    /// EtherType.
    pub ethertype: u16,
}

impl EthHeader {
    /// Header length.
    pub const LEN: usize = 14;

    /// The header bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..6].copy_from_slice(&self.dst);
        b[6..12].copy_from_slice(&self.src);
        b[12..].copy_from_slice(&self.ethertype.to_be_bytes());
        b
    }

    /// Parses the front of a frame.
    pub fn from_bytes(b: &[u8]) -> Result<Self, EthError> {
        let b = b.get(..Self::LEN).ok_or(EthError::Truncated)?;
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&b[..6]);
        src.copy_from_slice(&b[6..12]);
        Ok(Self {
            dst,
            src,
            ethertype: u16::from_be_bytes([b[12], b[13]]),
        })
    }

    /// A frame: this header followed by `payload` (not padded).
    pub fn frame(&self, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::with_capacity(Self::LEN + payload.len());
        f.extend_from_slice(&self.to_bytes());
        f.extend_from_slice(payload);
        f
    }
}

/// ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// Who has `target_ip`? (1)
    Request,
    /// `sender_ip` is at `sender_mac` (2).
    Reply,
}

/// An ARP packet for Ethernet/IPv4 (hardware type 1, protocol 0x0800, lengths 6 and 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArpPacket {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender hardware address.
    pub sender_mac: Mac,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in a request).
    pub target_mac: Mac,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

impl ArpPacket {
    /// Body length.
    pub const LEN: usize = 28;

    /// A request from `mac`/`ip` for `target`.
    pub const fn request(mac: Mac, ip: Ipv4Addr, target: Ipv4Addr) -> Self {
        Self {
            op: ArpOp::Request,
            sender_mac: mac,
            sender_ip: ip,
            target_mac: [0; 6],
            target_ip: target,
        }
    }

    /// The reply of `mac`/`ip` to `req`.
    pub const fn reply_to(req: &ArpPacket, mac: Mac, ip: Ipv4Addr) -> Self {
        Self {
            op: ArpOp::Reply,
            sender_mac: mac,
            sender_ip: ip,
            target_mac: req.sender_mac,
            target_ip: req.sender_ip,
        }
    }

    /// The body bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..2].copy_from_slice(&1u16.to_be_bytes());
        b[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        b[4] = 6;
        b[5] = 4;
        let op: u16 = match self.op {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        };
        b[6..8].copy_from_slice(&op.to_be_bytes());
        b[8..14].copy_from_slice(&self.sender_mac);
        b[14..18].copy_from_slice(&self.sender_ip.octets());
        b[18..24].copy_from_slice(&self.target_mac);
        b[24..28].copy_from_slice(&self.target_ip.octets());
        b
    }

    /// Parses an ARP body (trailing padding is ignored).
    pub fn from_bytes(b: &[u8]) -> Result<Self, EthError> {
        let b = b.get(..Self::LEN).ok_or(EthError::Truncated)?;
        if b[0..2] != [0, 1] || b[2..4] != ETHERTYPE_IPV4.to_be_bytes() || b[4] != 6 || b[5] != 4 {
            return Err(EthError::UnsupportedArp);
        }
        let op = match u16::from_be_bytes([b[6], b[7]]) {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            other => return Err(EthError::BadArpOp(other)),
        };
        let mac = |at: usize| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&b[at..at + 6]);
            m
        };
        let ip = |at: usize| Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3]);
        Ok(Self {
            op,
            sender_mac: mac(8),
            sender_ip: ip(14),
            target_mac: mac(18),
            target_ip: ip(24),
        })
    }

    /// The whole frame: to broadcast for a request, to the target for a reply; not padded.
    pub fn frame(&self) -> Vec<u8> {
        let dst = match self.op {
            ArpOp::Request => BROADCAST,
            ArpOp::Reply => self.target_mac,
        };
        EthHeader {
            dst,
            src: self.sender_mac,
            ethertype: ETHERTYPE_ARP,
        }
        .frame(&self.to_bytes())
    }
}

/// The receive filter of a port whose address is `mine`: frames to it or to broadcast.
/// Multicast (IPv6 neighbour discovery, MLD) and other stations' unicast are not for it.
pub fn frame_for_me(dst: &Mac, mine: &Mac) -> bool {
    dst == mine || *dst == BROADCAST
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUEST_MAC: Mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    const HOST_MAC: Mac = [0x02, 0x00, 0x00, 0x77, 0x00, 0x01];
    const GUEST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
    const HOST: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);

    /// The guest's ARP request captured on QEMU's socket netdev (`docs/qemu.md#the-socket-netdev`;
    /// virtio-net, 42 bytes, unpadded).
    const GUEST_REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x0a, 0x4d,
        0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x4d, 0x00, 0x01,
    ];
    /// The host reply the guest accepted (same note).
    const HOST_REPLY: [u8; 42] = [
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x77, 0x00, 0x01, 0x0a, 0x4d,
        0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x0a, 0x4d, 0x00, 0x02,
    ];

    #[test]
    fn captured_request_and_reply() {
        let h = EthHeader::from_bytes(&GUEST_REQUEST).unwrap();
        assert_eq!(h.dst, BROADCAST);
        assert_eq!(h.src, GUEST_MAC);
        assert_eq!(h.ethertype, ETHERTYPE_ARP);
        let req = ArpPacket::from_bytes(&GUEST_REQUEST[EthHeader::LEN..]).unwrap();
        assert_eq!(req, ArpPacket::request(GUEST_MAC, GUEST, HOST));
        assert_eq!(req.frame(), GUEST_REQUEST);
        let rep = ArpPacket::reply_to(&req, HOST_MAC, HOST);
        assert_eq!(rep.frame(), HOST_REPLY);
        assert_eq!(
            ArpPacket::from_bytes(&HOST_REPLY[EthHeader::LEN..]).unwrap(),
            rep
        );
    }

    #[test]
    fn padded_request_parses() {
        // e1000 pads to 60 bytes.
        let mut f = GUEST_REQUEST.to_vec();
        f.resize(MIN_FRAME, 0);
        let req = ArpPacket::from_bytes(&f[EthHeader::LEN..]).unwrap();
        assert_eq!(req.target_ip, HOST);
    }

    #[test]
    fn bad_arp() {
        let body = &GUEST_REQUEST[EthHeader::LEN..];
        assert_eq!(ArpPacket::from_bytes(&body[..27]), Err(EthError::Truncated));
        let mut b = body.to_vec();
        b[1] = 6; // IEEE 802 hardware
        assert_eq!(ArpPacket::from_bytes(&b), Err(EthError::UnsupportedArp));
        let mut b = body.to_vec();
        b[5] = 16; // IPv6 lengths
        assert_eq!(ArpPacket::from_bytes(&b), Err(EthError::UnsupportedArp));
        let mut b = body.to_vec();
        b[7] = 3; // RARP request
        assert_eq!(ArpPacket::from_bytes(&b), Err(EthError::BadArpOp(3)));
        assert_eq!(EthHeader::from_bytes(&[0u8; 13]), Err(EthError::Truncated));
    }

    #[test]
    fn filter() {
        assert!(frame_for_me(&HOST_MAC, &HOST_MAC));
        assert!(frame_for_me(&BROADCAST, &HOST_MAC));
        assert!(!frame_for_me(&GUEST_MAC, &HOST_MAC));
        let mld: Mac = [0x33, 0x33, 0, 0, 0, 0x16];
        assert!(is_multicast(&mld) && !frame_for_me(&mld, &HOST_MAC));
        assert!(!is_multicast(&HOST_MAC));
        assert_eq!(mac_to_string(&GUEST_MAC), "52:54:00:12:34:56");
    }
}
