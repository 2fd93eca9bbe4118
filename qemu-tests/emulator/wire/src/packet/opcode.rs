//! The BTH opcode table (`docs/rocev2.md#opcodes`): numbers, transports, and which extension
//! headers follow.

use super::headers::Aeth;
use super::headers::{AtomicAckEth, AtomicEth, Deth, Ieth, ImmDt, Reth};

/// Transport class: BTH opcode bits 7:5.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connected (000).
    Rc,
    /// Unreliable connected (001).
    Uc,
    /// Unreliable datagram (011).
    Ud,
    /// Congestion notification packet (100).
    Cnp,
}

/// What an opcode does, whatever its place in a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// SEND (plain, with immediate or with invalidate).
    Send,
    /// RDMA WRITE (plain or with immediate).
    RdmaWrite,
    /// RDMA READ request.
    RdmaReadRequest,
    /// RDMA READ response.
    RdmaReadResponse,
    /// ACKNOWLEDGE (ACK, NAK or RNR NAK).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// COMPARE SWAP.
    CompareSwap,
    /// FETCH ADD.
    FetchAdd,
    /// Congestion notification.
    Cnp,
}

/// Where a packet sits in its message (`docs/rocev2.md#segmentation`). Single-packet operations
/// (READ request, ACK, atomics, UD sends, CNP) are [`Position::Only`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of a multi-packet message (exactly PMTU bytes).
    First,
    /// Middle packet (exactly PMTU bytes).
    Middle,
    /// Last packet of a multi-packet message (1..=PMTU bytes).
    Last,
    /// The whole message in one packet (0..=PMTU bytes).
    Only,
}

impl Position {
    /// FIRST or ONLY: the packet starts a message.
    pub const fn starts_message(self) -> bool {
        matches!(self, Self::First | Self::Only)
    }

    /// LAST or ONLY: the packet completes a message.
    pub const fn ends_message(self) -> bool {
        matches!(self, Self::Last | Self::Only)
    }

    /// The position of packet `index` (0-based) of a message of `count` packets.
    /// `count` 0 is treated as 1.
    pub const fn of(index: u32, count: u32) -> Self {
        if count <= 1 {
            Self::Only
        } else if index == 0 {
            Self::First
        } else if index + 1 >= count {
            Self::Last
        } else {
            Self::Middle
        }
    }
}

/// Which extension headers follow the BTH for an opcode, and whether it carries a payload.
/// On the wire they appear in the order of the fields here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtLayout {
    /// DETH (UD).
    pub deth: bool,
    /// RETH.
    pub reth: bool,
    /// AtomicETH.
    pub atomic_eth: bool,
    /// ImmDt.
    pub imm_dt: bool,
    /// IETH.
    pub ieth: bool,
    /// AETH.
    pub aeth: bool,
    /// AtomicAckETH.
    pub atomic_ack_eth: bool,
    /// The packet may carry a payload (may be empty). Opcodes without one must have none.
    pub payload: bool,
}

impl ExtLayout {
    const NONE: Self = Self {
        deth: false,
        reth: false,
        atomic_eth: false,
        imm_dt: false,
        ieth: false,
        aeth: false,
        atomic_ack_eth: false,
        payload: false,
    };

    /// Total bytes of extension headers.
    pub const fn len(&self) -> usize {
        let mut n = 0;
        if self.deth {
            n += Deth::LEN;
        }
        if self.reth {
            n += Reth::LEN;
        }
        if self.atomic_eth {
            n += AtomicEth::LEN;
        }
        if self.imm_dt {
            n += ImmDt::LEN;
        }
        if self.ieth {
            n += Ieth::LEN;
        }
        if self.aeth {
            n += Aeth::LEN;
        }
        if self.atomic_ack_eth {
            n += AtomicAckEth::LEN;
        }
        n
    }

    /// No extension header at all.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

macro_rules! opcodes {
    ($( $(#[$doc:meta])* $name:ident = $val:literal, $tr:ident, $kind:ident, $pos:ident,
        { $($hdr:ident),* } ; )*) => {
        /// A BTH opcode this crate knows (`docs/rocev2.md#opcodes`): RC, UC, UD and CNP.
        ///
        /// FLUSH (0x1C), ATOMIC WRITE (0x1D) and the RD opcodes are not supported; they decode
        /// as [`super::WireError::UnknownOpcode`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Opcode {
            $( $(#[$doc])* $name = $val, )*
        }

        impl Opcode {
            /// Every opcode, in numeric order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$name, )* ];

            /// The opcode with wire value `v`, if known.
            pub const fn from_u8(v: u8) -> Option<Self> {
                match v {
                    $( $val => Some(Self::$name), )*
                    _ => None,
                }
            }

            /// The transport class.
            pub const fn transport(self) -> Transport {
                match self { $( Self::$name => Transport::$tr, )* }
            }

            /// The operation.
            pub const fn kind(self) -> OpKind {
                match self { $( Self::$name => OpKind::$kind, )* }
            }

            /// The packet's place in its message.
            pub const fn position(self) -> Position {
                match self { $( Self::$name => Position::$pos, )* }
            }

            /// The extension headers that follow the BTH, and whether there is a payload.
            pub const fn ext_layout(self) -> ExtLayout {
                match self {
                    $( Self::$name => ExtLayout { $($hdr: true,)* ..ExtLayout::NONE }, )*
                }
            }
        }
    };
}

opcodes! {
    /// RC SEND FIRST.
    RcSendFirst = 0x00, Rc, Send, First, { payload };
    /// RC SEND MIDDLE.
    RcSendMiddle = 0x01, Rc, Send, Middle, { payload };
    /// RC SEND LAST.
    RcSendLast = 0x02, Rc, Send, Last, { payload };
    /// RC SEND LAST with immediate.
    RcSendLastWithImm = 0x03, Rc, Send, Last, { imm_dt, payload };
    /// RC SEND ONLY.
    RcSendOnly = 0x04, Rc, Send, Only, { payload };
    /// RC SEND ONLY with immediate.
    RcSendOnlyWithImm = 0x05, Rc, Send, Only, { imm_dt, payload };
    /// RC RDMA WRITE FIRST.
    RcRdmaWriteFirst = 0x06, Rc, RdmaWrite, First, { reth, payload };
    /// RC RDMA WRITE MIDDLE.
    RcRdmaWriteMiddle = 0x07, Rc, RdmaWrite, Middle, { payload };
    /// RC RDMA WRITE LAST.
    RcRdmaWriteLast = 0x08, Rc, RdmaWrite, Last, { payload };
    /// RC RDMA WRITE LAST with immediate.
    RcRdmaWriteLastWithImm = 0x09, Rc, RdmaWrite, Last, { imm_dt, payload };
    /// RC RDMA WRITE ONLY.
    RcRdmaWriteOnly = 0x0A, Rc, RdmaWrite, Only, { reth, payload };
    /// RC RDMA WRITE ONLY with immediate.
    RcRdmaWriteOnlyWithImm = 0x0B, Rc, RdmaWrite, Only, { reth, imm_dt, payload };
    /// RC RDMA READ REQUEST.
    RcRdmaReadRequest = 0x0C, Rc, RdmaReadRequest, Only, { reth };
    /// RC RDMA READ RESPONSE FIRST.
    RcRdmaReadResponseFirst = 0x0D, Rc, RdmaReadResponse, First, { aeth, payload };
    /// RC RDMA READ RESPONSE MIDDLE (no AETH).
    RcRdmaReadResponseMiddle = 0x0E, Rc, RdmaReadResponse, Middle, { payload };
    /// RC RDMA READ RESPONSE LAST.
    RcRdmaReadResponseLast = 0x0F, Rc, RdmaReadResponse, Last, { aeth, payload };
    /// RC RDMA READ RESPONSE ONLY.
    RcRdmaReadResponseOnly = 0x10, Rc, RdmaReadResponse, Only, { aeth, payload };
    /// RC ACKNOWLEDGE.
    RcAcknowledge = 0x11, Rc, Acknowledge, Only, { aeth };
    /// RC ATOMIC ACKNOWLEDGE.
    RcAtomicAcknowledge = 0x12, Rc, AtomicAcknowledge, Only, { aeth, atomic_ack_eth };
    /// RC COMPARE SWAP.
    RcCompareSwap = 0x13, Rc, CompareSwap, Only, { atomic_eth };
    /// RC FETCH ADD.
    RcFetchAdd = 0x14, Rc, FetchAdd, Only, { atomic_eth };
    /// RC SEND LAST with invalidate.
    RcSendLastWithInv = 0x16, Rc, Send, Last, { ieth, payload };
    /// RC SEND ONLY with invalidate.
    RcSendOnlyWithInv = 0x17, Rc, Send, Only, { ieth, payload };
    /// UC SEND FIRST.
    UcSendFirst = 0x20, Uc, Send, First, { payload };
    /// UC SEND MIDDLE.
    UcSendMiddle = 0x21, Uc, Send, Middle, { payload };
    /// UC SEND LAST.
    UcSendLast = 0x22, Uc, Send, Last, { payload };
    /// UC SEND LAST with immediate.
    UcSendLastWithImm = 0x23, Uc, Send, Last, { imm_dt, payload };
    /// UC SEND ONLY.
    UcSendOnly = 0x24, Uc, Send, Only, { payload };
    /// UC SEND ONLY with immediate.
    UcSendOnlyWithImm = 0x25, Uc, Send, Only, { imm_dt, payload };
    /// UC RDMA WRITE FIRST.
    UcRdmaWriteFirst = 0x26, Uc, RdmaWrite, First, { reth, payload };
    /// UC RDMA WRITE MIDDLE.
    UcRdmaWriteMiddle = 0x27, Uc, RdmaWrite, Middle, { payload };
    /// UC RDMA WRITE LAST.
    UcRdmaWriteLast = 0x28, Uc, RdmaWrite, Last, { payload };
    /// UC RDMA WRITE LAST with immediate.
    UcRdmaWriteLastWithImm = 0x29, Uc, RdmaWrite, Last, { imm_dt, payload };
    /// UC RDMA WRITE ONLY.
    UcRdmaWriteOnly = 0x2A, Uc, RdmaWrite, Only, { reth, payload };
    /// UC RDMA WRITE ONLY with immediate.
    UcRdmaWriteOnlyWithImm = 0x2B, Uc, RdmaWrite, Only, { reth, imm_dt, payload };
    /// UD SEND ONLY.
    UdSendOnly = 0x64, Ud, Send, Only, { deth, payload };
    /// UD SEND ONLY with immediate.
    UdSendOnlyWithImm = 0x65, Ud, Send, Only, { deth, imm_dt, payload };
    /// Congestion notification packet: BECN set, followed by 16 reserved zero bytes, which
    /// this crate carries as the payload (see [`super::Packet::cnp`]).
    Cnp = 0x81, Cnp, Cnp, Only, { payload };
}

impl Opcode {
    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    /// Whether the opcode carries a payload.
    pub const fn has_payload(self) -> bool {
        self.ext_layout().payload
    }

    /// Whether it is sent by a requester (SEND, WRITE, READ request, atomics) rather than a
    /// responder (READ responses, ACKs) or the congestion machinery (CNP).
    pub const fn is_request(self) -> bool {
        matches!(
            self.kind(),
            OpKind::Send
                | OpKind::RdmaWrite
                | OpKind::RdmaReadRequest
                | OpKind::CompareSwap
                | OpKind::FetchAdd
        )
    }
}

impl TryFrom<u8> for Opcode {
    type Error = super::WireError;

    fn try_from(v: u8) -> Result<Self, Self::Error> {
        Self::from_u8(v).ok_or(super::WireError::UnknownOpcode(v))
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_unknowns_are_rejected() {
        let mut known = 0;
        for v in 0..=255u8 {
            match Opcode::from_u8(v) {
                Some(op) => {
                    known += 1;
                    assert_eq!(op.as_u8(), v);
                    let top = v >> 5;
                    let expect = match op.transport() {
                        Transport::Rc => 0,
                        Transport::Uc => 1,
                        Transport::Ud => 3,
                        Transport::Cnp => 4,
                    };
                    assert_eq!(top, expect, "{op:?}");
                }
                None => assert!(Opcode::try_from(v).is_err()),
            }
        }
        assert_eq!(known, Opcode::ALL.len());
        assert_eq!(known, 23 + 12 + 2 + 1);
        for v in [0x15u8, 0x18, 0x1C, 0x1D, 0x2C, 0x40, 0x63, 0x66, 0x80, 0xFF] {
            assert_eq!(Opcode::from_u8(v), None, "{v:#x}");
        }
    }

    #[test]
    fn uc_mirrors_rc_sends_and_writes() {
        for v in 0x00..=0x0Bu8 {
            let rc = Opcode::from_u8(v).unwrap();
            let uc = Opcode::from_u8(v | 0x20).unwrap();
            assert_eq!(rc.ext_layout(), uc.ext_layout());
            assert_eq!(rc.kind(), uc.kind());
            assert_eq!(rc.position(), uc.position());
        }
    }

    #[test]
    fn layouts_from_the_spec_table() {
        use Opcode::*;
        let l = |op: Opcode| op.ext_layout();
        assert_eq!(l(RcSendOnly).len(), 0);
        assert_eq!(l(RcSendOnlyWithImm).len(), 4);
        assert_eq!(l(RcRdmaWriteFirst).len(), 16);
        assert_eq!(l(RcRdmaWriteOnlyWithImm).len(), 20);
        assert_eq!(l(RcRdmaReadRequest).len(), 16);
        assert!(!l(RcRdmaReadRequest).payload);
        assert_eq!(l(RcRdmaReadResponseFirst).len(), 4);
        assert_eq!(l(RcRdmaReadResponseMiddle).len(), 0);
        assert_eq!(l(RcAcknowledge).len(), 4);
        assert_eq!(l(RcAtomicAcknowledge).len(), 12);
        assert_eq!(l(RcCompareSwap).len(), 28);
        assert_eq!(l(RcFetchAdd).len(), 28);
        assert_eq!(l(RcSendOnlyWithInv).len(), 4);
        assert!(l(RcSendOnlyWithInv).ieth);
        assert_eq!(l(UdSendOnly).len(), 8);
        assert_eq!(l(UdSendOnlyWithImm).len(), 12);
        assert_eq!(l(Cnp).len(), 0);
        for op in Opcode::ALL {
            let lay = op.ext_layout();
            assert!(lay.len() <= 44, "{op:?}");
            assert!(!(lay.reth && lay.atomic_eth), "{op:?}");
            assert!(!(lay.imm_dt && lay.ieth), "{op:?}");
        }
    }

    #[test]
    fn positions() {
        assert_eq!(Position::of(0, 0), Position::Only);
        assert_eq!(Position::of(0, 1), Position::Only);
        assert_eq!(Position::of(0, 3), Position::First);
        assert_eq!(Position::of(1, 3), Position::Middle);
        assert_eq!(Position::of(2, 3), Position::Last);
        assert_eq!(Position::of(1, 2), Position::Last);
        assert!(Position::First.starts_message() && !Position::First.ends_message());
        assert!(Position::Only.starts_message() && Position::Only.ends_message());
    }
}
