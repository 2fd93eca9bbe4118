//! The discovery log page (log identifier 0x70): a 1024-byte header, then one 1024-byte entry
//! per subsystem port, with the RDMA transport specific address subtype (TSAS).

use alloc::string::String;
use alloc::vec::Vec;

use crate::wire::{get_padded_str, get_u16, get_u64, put_str, put_u16, put_u64};

/// Size of the header and of each entry.
pub const DISCOVERY_RECORD_LEN: usize = 1024;

/// Transport types (TRTYPE).
pub mod trtype {
    /// RDMA.
    pub const RDMA: u8 = 1;
    /// Fibre Channel.
    pub const FC: u8 = 2;
    /// TCP.
    pub const TCP: u8 = 3;
    /// Intra-host loop.
    pub const LOOP: u8 = 254;
}

/// Address families (ADRFAM).
pub mod adrfam {
    /// PCI.
    pub const PCI: u8 = 0;
    /// IPv4.
    pub const IPV4: u8 = 1;
    /// IPv6.
    pub const IPV6: u8 = 2;
    /// InfiniBand.
    pub const IB: u8 = 3;
    /// Fibre Channel.
    pub const FC: u8 = 4;
}

/// Subsystem types (SUBTYPE).
pub mod subtype {
    /// A referral to another discovery service.
    pub const REFERRAL: u8 = 1;
    /// An NVM subsystem.
    pub const NVME: u8 = 2;
    /// The discovery subsystem answering.
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// TREQ bits 1:0 = 10b: secure channel not required.
pub const TREQ_SECURE_NOT_REQUIRED: u8 = 2;
/// TREQ bit 2: disabling SQ flow control is supported.
pub const TREQ_SQFLOW_DISABLE: u8 = 4;

/// RDMA QP type: reliable connected.
pub const RDMA_QPTYPE_CONNECTED: u8 = 1;
/// RDMA provider type: not specified.
pub const RDMA_PRTYPE_NOT_SPECIFIED: u8 = 1;
/// RDMA provider type: RoCEv2.
pub const RDMA_PRTYPE_ROCEV2: u8 = 4;
/// RDMA connection management service: RDMA CM.
pub const RDMA_CMS_RDMA_CM: u8 = 1;

/// The discovery log header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DiscoveryHeader {
    /// 0: generation counter (changes whenever the log does).
    pub genctr: u64,
    /// 8: number of records.
    pub numrec: u64,
    /// 16: record format (0).
    pub recfmt: u16,
}

impl DiscoveryHeader {
    /// Encodes the 1024-byte header.
    pub fn encode(&self) -> [u8; DISCOVERY_RECORD_LEN] {
        let mut b = [0u8; DISCOVERY_RECORD_LEN];
        put_u64(&mut b, 0, self.genctr);
        put_u64(&mut b, 8, self.numrec);
        put_u16(&mut b, 16, self.recfmt);
        b
    }

    /// Decodes the header (`None` when shorter than 18 bytes).
    pub fn decode(b: &[u8]) -> Option<DiscoveryHeader> {
        if b.len() < 18 {
            return None;
        }
        Some(DiscoveryHeader {
            genctr: get_u64(b, 0),
            numrec: get_u64(b, 8),
            recfmt: get_u16(b, 16),
        })
    }
}

/// RDMA transport specific address subtype (TSAS bytes 768-1023 of an entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RdmaTsas {
    /// 768: QP type.
    pub qptype: u8,
    /// 769: provider type.
    pub prtype: u8,
    /// 770: connection management service.
    pub cms: u8,
    /// 776: partition key.
    pub pkey: u16,
}

impl RdmaTsas {
    /// What nvmet reports: connected, not specified, RDMA CM.
    pub const DEFAULT: RdmaTsas = RdmaTsas {
        qptype: RDMA_QPTYPE_CONNECTED,
        prtype: RDMA_PRTYPE_NOT_SPECIFIED,
        cms: RDMA_CMS_RDMA_CM,
        pkey: 0,
    };
}

/// A discovery log entry.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DiscoveryEntry {
    /// 0: transport type.
    pub trtype: u8,
    /// 1: address family.
    pub adrfam: u8,
    /// 2: subsystem type.
    pub subtype: u8,
    /// 3: transport requirements.
    pub treq: u8,
    /// 4: port id.
    pub portid: u16,
    /// 6: controller id (0xFFFF: dynamic).
    pub cntlid: u16,
    /// 8: admin max submission queue size.
    pub asqsz: u16,
    /// 10: entry flags.
    pub eflags: u16,
    /// 32: transport service id (32 ASCII, space padded), e.g. "4420".
    pub trsvcid: String,
    /// 256: subsystem NQN (256, NUL padded).
    pub subnqn: String,
    /// 512: transport address (256 ASCII, space padded), e.g. "10.0.0.2".
    pub traddr: String,
    /// 768: RDMA TSAS (meaningful when TRTYPE is RDMA).
    pub tsas: RdmaTsas,
}

impl DiscoveryEntry {
    /// Encodes the 1024-byte entry.
    pub fn encode(&self) -> [u8; DISCOVERY_RECORD_LEN] {
        let mut b = [0u8; DISCOVERY_RECORD_LEN];
        b[0] = self.trtype;
        b[1] = self.adrfam;
        b[2] = self.subtype;
        b[3] = self.treq;
        put_u16(&mut b, 4, self.portid);
        put_u16(&mut b, 6, self.cntlid);
        put_u16(&mut b, 8, self.asqsz);
        put_u16(&mut b, 10, self.eflags);
        put_str(&mut b, 32, 32, &self.trsvcid, b' ');
        put_str(&mut b, 256, 255, &self.subnqn, 0);
        put_str(&mut b, 512, 256, &self.traddr, b' ');
        if self.trtype == trtype::RDMA {
            b[768] = self.tsas.qptype;
            b[769] = self.tsas.prtype;
            b[770] = self.tsas.cms;
            put_u16(&mut b, 776, self.tsas.pkey);
        }
        b
    }

    /// Decodes an entry (`None` when shorter than 1024 bytes). Trailing spaces of TRSVCID
    /// and TRADDR are stripped, as libnvme does.
    pub fn decode(b: &[u8]) -> Option<DiscoveryEntry> {
        if b.len() < DISCOVERY_RECORD_LEN {
            return None;
        }
        let tsas = if b[0] == trtype::RDMA {
            RdmaTsas {
                qptype: b[768],
                prtype: b[769],
                cms: b[770],
                pkey: get_u16(b, 776),
            }
        } else {
            RdmaTsas::default()
        };
        Some(DiscoveryEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: get_u16(b, 4),
            cntlid: get_u16(b, 6),
            asqsz: get_u16(b, 8),
            eflags: get_u16(b, 10),
            trsvcid: get_padded_str(&b[32..64]).into(),
            subnqn: get_padded_str(&b[256..512]).into(),
            traddr: get_padded_str(&b[512..768]).into(),
            tsas,
        })
    }
}

/// Encodes a whole discovery log: header then entries.
pub fn encode_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(DISCOVERY_RECORD_LEN * (1 + entries.len()));
    let hdr = DiscoveryHeader {
        genctr,
        numrec: entries.len() as u64,
        recfmt: 0,
    };
    out.extend_from_slice(&hdr.encode());
    for e in entries {
        out.extend_from_slice(&e.encode());
    }
    out
}

/// Decodes a whole discovery log (`None` when the header is short; entries beyond the bytes
/// given are left out).
pub fn decode_log(b: &[u8]) -> Option<(DiscoveryHeader, Vec<DiscoveryEntry>)> {
    let hdr = DiscoveryHeader::decode(b)?;
    let entries = b
        .get(DISCOVERY_RECORD_LEN..)
        .unwrap_or(&[])
        .chunks_exact(DISCOVERY_RECORD_LEN)
        .take(usize::try_from(hdr.numrec).unwrap_or(usize::MAX))
        .filter_map(DiscoveryEntry::decode)
        .collect();
    Some((hdr, entries))
}
