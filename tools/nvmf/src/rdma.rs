//! The RDMA transport binding's connection-manager private data (record format 0, 32 bytes
//! each way) and the reject status codes.

use crate::wire::{get_u16, put_u16};

/// Size of the NVMe private data in a connect request and an accept.
pub const PRIVATE_DATA_LEN: usize = 32;
/// Size of the NVMe private data in a reject.
pub const REJECT_DATA_LEN: usize = 4;
/// The default TCP port space port of an NVMe/RDMA target (also used for discovery).
pub const DEFAULT_PORT: u16 = 4420;
/// Admin queue depth a host uses and a target accepts (HSQSIZE + 1 at most).
pub const ADMIN_QUEUE_DEPTH: u16 = 32;
/// Largest queue depth over RDMA (host clamps SQSIZE to 127; CAP.MQES 127).
pub const MAX_QUEUE_DEPTH: u16 = 128;

/// The host's connect request private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ConnectRequest {
    /// Bytes 0-1: record format (0).
    pub recfmt: u16,
    /// Bytes 2-3: queue id (0 admin, 1.. I/O).
    pub qid: u16,
    /// Bytes 4-5: host receive queue size (1-based).
    pub hrqsize: u16,
    /// Bytes 6-7: host send queue size (0-based).
    pub hsqsize: u16,
    /// Bytes 8-9: controller id (reserved, 0, in Linux).
    pub cntlid: u16,
}

impl ConnectRequest {
    /// Decodes the private data of a connect request. Fewer than 32 bytes fail with
    /// [`RejectStatus::InvalidLength`]; a record format other than 0 with
    /// [`RejectStatus::InvalidRecfmt`]. A passive side sees more than 32 bytes (the CM pads
    /// the request); the rest is ignored.
    pub fn decode(b: &[u8]) -> Result<ConnectRequest, RejectStatus> {
        if b.len() < PRIVATE_DATA_LEN {
            return Err(RejectStatus::InvalidLength);
        }
        let r = ConnectRequest {
            recfmt: get_u16(b, 0),
            qid: get_u16(b, 2),
            hrqsize: get_u16(b, 4),
            hsqsize: get_u16(b, 6),
            cntlid: get_u16(b, 8),
        };
        if r.recfmt != 0 {
            return Err(RejectStatus::InvalidRecfmt);
        }
        Ok(r)
    }

    /// Encodes to 32 bytes (reserved bytes zero).
    pub fn encode(&self) -> [u8; PRIVATE_DATA_LEN] {
        let mut b = [0u8; PRIVATE_DATA_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.qid);
        put_u16(&mut b, 4, self.hrqsize);
        put_u16(&mut b, 6, self.hsqsize);
        put_u16(&mut b, 8, self.cntlid);
        b
    }
}

/// The target's accept private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Accept {
    /// Bytes 0-1: record format (0).
    pub recfmt: u16,
    /// Bytes 2-3: controller receive queue size (Linux: HSQSIZE + 1).
    pub crqsize: u16,
}

impl Accept {
    /// Decodes an accept's private data (at least 4 bytes).
    pub fn decode(b: &[u8]) -> Option<Accept> {
        if b.len() < 4 {
            return None;
        }
        Some(Accept {
            recfmt: get_u16(b, 0),
            crqsize: get_u16(b, 2),
        })
    }

    /// Encodes to 32 bytes.
    pub fn encode(&self) -> [u8; PRIVATE_DATA_LEN] {
        let mut b = [0u8; PRIVATE_DATA_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.crqsize);
        b
    }
}

/// Why a target refused a connect request (reject private data STS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectStatus {
    /// 1: private data missing or too short.
    InvalidLength,
    /// 2: record format not 0.
    InvalidRecfmt,
    /// 3: queue id not acceptable.
    InvalidQid,
    /// 4: HSQSIZE not acceptable (admin: more than 31).
    InvalidHsqsize,
    /// 5: HRQSIZE not acceptable.
    InvalidHrqsize,
    /// 6: no resources.
    NoResources,
    /// 7: invalid IRD (the host offers no RDMA READ responder resources).
    InvalidIrd,
    /// 8: invalid ORD.
    InvalidOrd,
    /// Any other value.
    Other(u16),
}

impl RejectStatus {
    /// The wire value.
    pub fn code(self) -> u16 {
        match self {
            RejectStatus::InvalidLength => 1,
            RejectStatus::InvalidRecfmt => 2,
            RejectStatus::InvalidQid => 3,
            RejectStatus::InvalidHsqsize => 4,
            RejectStatus::InvalidHrqsize => 5,
            RejectStatus::NoResources => 6,
            RejectStatus::InvalidIrd => 7,
            RejectStatus::InvalidOrd => 8,
            RejectStatus::Other(v) => v,
        }
    }

    /// From the wire value.
    pub fn from_code(v: u16) -> RejectStatus {
        match v {
            1 => RejectStatus::InvalidLength,
            2 => RejectStatus::InvalidRecfmt,
            3 => RejectStatus::InvalidQid,
            4 => RejectStatus::InvalidHsqsize,
            5 => RejectStatus::InvalidHrqsize,
            6 => RejectStatus::NoResources,
            7 => RejectStatus::InvalidIrd,
            8 => RejectStatus::InvalidOrd,
            v => RejectStatus::Other(v),
        }
    }
}

/// The IB CM reject reason a target sends with NVMe reject data: 28, "consumer defined".
pub const REJECT_REASON_CONSUMER: u16 = 28;

/// The target's reject private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reject {
    /// Bytes 0-1: record format (0).
    pub recfmt: u16,
    /// Bytes 2-3: status.
    pub status: RejectStatus,
}

impl Reject {
    /// A record-format-0 reject with `status`.
    pub fn new(status: RejectStatus) -> Reject {
        Reject { recfmt: 0, status }
    }

    /// Decodes a reject's private data (at least 4 bytes).
    pub fn decode(b: &[u8]) -> Option<Reject> {
        if b.len() < REJECT_DATA_LEN {
            return None;
        }
        Some(Reject {
            recfmt: get_u16(b, 0),
            status: RejectStatus::from_code(get_u16(b, 2)),
        })
    }

    /// Encodes to the 4 bytes Linux sends.
    pub fn encode(&self) -> [u8; REJECT_DATA_LEN] {
        let mut b = [0u8; REJECT_DATA_LEN];
        put_u16(&mut b, 0, self.recfmt);
        put_u16(&mut b, 2, self.status.code());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_admin_request_bytes() {
        // Linux host, admin queue: qid 0, hrqsize 32, hsqsize 31.
        let r = ConnectRequest {
            recfmt: 0,
            qid: 0,
            hrqsize: 32,
            hsqsize: 31,
            cntlid: 0,
        };
        let b = r.encode();
        assert_eq!(&b[..10], &[0, 0, 0, 0, 32, 0, 31, 0, 0, 0]);
        assert!(b[10..].iter().all(|&x| x == 0));
        // The passive side sees 56 bytes: the rest is padding.
        let mut padded = [0u8; 56];
        padded[..32].copy_from_slice(&b);
        assert_eq!(ConnectRequest::decode(&padded), Ok(r));
        assert_eq!(
            ConnectRequest::decode(&b[..31]),
            Err(RejectStatus::InvalidLength)
        );
        let mut bad = b;
        bad[0] = 1;
        assert_eq!(
            ConnectRequest::decode(&bad),
            Err(RejectStatus::InvalidRecfmt)
        );
    }

    #[test]
    fn accept_and_reject_bytes() {
        let a = Accept {
            recfmt: 0,
            crqsize: 128,
        };
        assert_eq!(&a.encode()[..4], &[0, 0, 128, 0]);
        assert_eq!(Accept::decode(&a.encode()), Some(a));
        let r = Reject::new(RejectStatus::InvalidHsqsize);
        assert_eq!(r.encode(), [0, 0, 4, 0]);
        assert_eq!(Reject::decode(&r.encode()), Some(r));
        for v in 0..12 {
            assert_eq!(RejectStatus::from_code(v).code(), v);
        }
    }
}
