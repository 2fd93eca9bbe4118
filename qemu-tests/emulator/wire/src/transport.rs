//! RC transport arithmetic (`docs/rocev2.md#encapsulation`, `docs/rocev2.md#reliability`): 24-bit
//! PSNs, the retransmit and RNR timers, and the per-QP UDP source port.

use core::cmp::Ordering;

use crate::packet::{MASK_24, ROCE_SPORT_BASE};

/// `psn + n` modulo 2^24.
pub const fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & MASK_24
}

/// The signed distance `a − b` between two PSNs, in −2^23..2^23 (the kernel's
/// `(s32)((a − b) << 8)`, scaled back).
pub const fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// Orders two PSNs within the ±2^23 window: `Less` if `a` is before `b`.
pub const fn psn_cmp(a: u32, b: u32) -> Ordering {
    let d = psn_diff(a, b);
    if d < 0 {
        Ordering::Less
    } else if d > 0 {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

/// RNR NAK timer codes (AETH bits 4:0) in microseconds (`docs/rocev2.md#rnr-timer-codes`; code 25
/// is 61.44 ms, not rxe's typo 61.41).
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The wait an RNR NAK with timer code `code` (low 5 bits used) asks for, in nanoseconds.
pub const fn rnr_timer_ns(code: u8) -> u64 {
    RNR_TIMER_US[(code & 0x1F) as usize] as u64 * 1_000
}

/// The local ACK timeout for the 5-bit QP attribute `timeout`: 4.096 µs × 2^timeout, in
/// nanoseconds. `None` for 0 (timer disabled).
pub const fn retransmit_timeout_ns(timeout: u8) -> Option<u64> {
    if timeout == 0 {
        None
    } else {
        Some(4_096u64 << (timeout & 0x1F))
    }
}

/// rxe's UDP source port of a QP before any address vector sets one, which UD QPs (QP1
/// included) keep: `0xC000 + hash_32(qpn, 14)`, the kernel's multiplicative hash with
/// `GOLDEN_RATIO_32`. QP1's is 0xD872, as captured from soft-RoCE.
pub const fn qp_source_port(qpn: u32) -> u16 {
    ROCE_SPORT_BASE | (qpn.wrapping_mul(0x61C8_8647) >> (32 - 14)) as u16
}

/// `rdma_calc_flow_label(lqpn, rqpn)`: a 20-bit flow label from the two QPNs.
pub const fn flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = (lqpn as u64) * (rqpn as u64);
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// `rdma_get_udp_sport(flow_label, lqpn, rqpn)`: the UDP source port of an RC/UC QP. A zero
/// `flow_label` is replaced by [`flow_label`]`(lqpn, rqpn)`. The result is in
/// 0xC000..=0xFFFF.
pub const fn udp_source_port(flow_label_in: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label_in == 0 {
        flow_label(lqpn, rqpn)
    } else {
        flow_label_in
    };
    (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) as u16) | ROCE_SPORT_BASE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps() {
        assert_eq!(psn_add(0xFF_FFFF, 1), 0);
        assert_eq!(psn_add(0xFF_FFFE, 5), 3);
        assert_eq!(psn_diff(3, 0xFF_FFFE), 5);
        assert_eq!(psn_diff(0xFF_FFFE, 3), -5);
        assert_eq!(psn_cmp(0, 0xFF_FFFF), Ordering::Greater);
        assert_eq!(psn_cmp(10, 11), Ordering::Less);
        assert_eq!(psn_cmp(7, 7), Ordering::Equal);
        assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
        assert_eq!(psn_diff(0x7F_FFFF, 0), 0x7F_FFFF);
    }

    #[test]
    fn timers() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(25), 61_440_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
        assert_eq!(retransmit_timeout_ns(0), None);
        assert_eq!(retransmit_timeout_ns(1), Some(8_192));
        assert_eq!(retransmit_timeout_ns(14), Some(4_096 << 14));
        assert_eq!(retransmit_timeout_ns(31), Some(4_096 << 31));
    }

    #[test]
    fn ud_source_ports() {
        // captured: rxe's QP1 sends from port 55410 (notes/interop-softroce.md)
        assert_eq!(qp_source_port(1), 0xd872);
        assert_eq!(qp_source_port(0), 0xc000);
        assert!((0..5000).all(|q| qp_source_port(q) >= 0xC000));
    }

    #[test]
    fn source_ports() {
        for (l, r) in [(0u32, 0u32), (17, 18), (0xFF_FFFF, 0xFF_FFFF), (1, 1)] {
            let p = udp_source_port(0, l, r);
            assert!(p >= 0xC000);
            assert_eq!(p, udp_source_port(0, l, r));
        }
        // fl = 17*18 = 306: 306 ^ 0 ^ 0 = 306 → 0xC000 | 306.
        assert_eq!(flow_label(17, 18), 306);
        assert_eq!(udp_source_port(0, 17, 18), 0xC000 | 306);
        // An explicit label: (0x12345 & 0x3FFF) ^ (0x10000 >> 14) = 0x2345 ^ 4.
        assert_eq!(udp_source_port(0x12345, 1, 2), 0xC000 | (0x2345 ^ 4));
    }
}
