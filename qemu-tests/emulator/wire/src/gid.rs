//! GIDs and IPv4 addresses (`docs/rocev2.md#gids`): a RoCEv2 GID for IPv4 address a.b.c.d is the
//! IPv4-mapped IPv6 address `::ffff:a.b.c.d`.

use core::net::Ipv4Addr;

/// A 16-byte GID.
pub type Gid = [u8; 16];

/// The IPv4-mapped GID of `addr`: bytes 0-9 zero, 10-11 `ff ff`, 12-15 the address.
pub const fn gid_from_ipv4(addr: Ipv4Addr) -> Gid {
    let o = addr.octets();
    [
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, o[0], o[1], o[2], o[3],
    ]
}

/// The IPv4 address of an IPv4-mapped GID; `None` for any other GID (an IPv6 address).
pub const fn ipv4_from_gid(gid: &Gid) -> Option<Ipv4Addr> {
    let mut i = 0;
    while i < 10 {
        if gid[i] != 0 {
            return None;
        }
        i += 1;
    }
    if gid[10] != 0xFF || gid[11] != 0xFF {
        return None;
    }
    Some(Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
}

/// A multicast GID: first byte 0xFF, or IPv4-mapped 224.0.0.0/4.
pub const fn gid_is_multicast(gid: &Gid) -> bool {
    if gid[0] == 0xFF {
        return true;
    }
    match ipv4_from_gid(gid) {
        Some(a) => a.is_multicast(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example() {
        let a = Ipv4Addr::new(10, 11, 11, 251);
        let g = gid_from_ipv4(a);
        assert_eq!(
            g,
            [
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x0a, 0x0b, 0x0b, 0xfb
            ]
        );
        assert_eq!(ipv4_from_gid(&g), Some(a));
        assert!(!gid_is_multicast(&g));
    }

    #[test]
    fn non_mapped_gids() {
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        link_local[15] = 1;
        assert_eq!(ipv4_from_gid(&link_local), None);
        let mut g = gid_from_ipv4(Ipv4Addr::new(1, 2, 3, 4));
        g[11] = 0xFE;
        assert_eq!(ipv4_from_gid(&g), None);
        let mut g = gid_from_ipv4(Ipv4Addr::new(1, 2, 3, 4));
        g[3] = 1;
        assert_eq!(ipv4_from_gid(&g), None);
    }

    #[test]
    fn multicast() {
        assert!(gid_is_multicast(&gid_from_ipv4(Ipv4Addr::new(
            224, 0, 0, 1
        ))));
        assert!(gid_is_multicast(&gid_from_ipv4(Ipv4Addr::new(
            239, 1, 2, 3
        ))));
        let mut g = [0u8; 16];
        g[0] = 0xFF;
        assert!(gid_is_multicast(&g));
        assert!(!gid_is_multicast(&gid_from_ipv4(Ipv4Addr::new(
            127, 0, 0, 1
        ))));
    }

    #[test]
    fn round_trip_every_octet() {
        for x in 0..=255u8 {
            let a = Ipv4Addr::new(x, 255 - x, x ^ 0x5A, x.wrapping_mul(7));
            assert_eq!(ipv4_from_gid(&gid_from_ipv4(a)), Some(a));
        }
    }
}
