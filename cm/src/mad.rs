//! The IB CM wire format (`docs/cm.md#ib-cm-wire-protocol`): the 24-byte MAD common header, the CM
//! messages REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP, the rdma_cm
//! private-data header and service IDs.
//!
//! A CM MAD is 256 bytes: the common header (offsets 0..24) and 232 bytes of message data. Every
//! offset named in this module's field docs is relative to the start of the message data (byte 24
//! of the MAD), as `docs/cm.md#message-layouts` counts them; bit fields are MSB-first within their
//! byte. All multi-byte fields are big-endian.
//!
//! Encoding writes every reserved bit as zero and masks each field to its width; decoding
//! never panics: it checks the length and the header and reads every field, ignoring reserved
//! bits.
//!
//! ```
//! use cm::mad::{CmMad, CmMessage, Rtu, MAD_SIZE};
//! let mad = CmMad {
//!     tid: 0x1234,
//!     attr_mod: 0,
//!     msg: CmMessage::Rtu(Rtu { local_comm_id: 7, remote_comm_id: 9, private_data: [0; 224] }),
//! };
//! let bytes = mad.encode();
//! assert_eq!(bytes.len(), MAD_SIZE);
//! assert_eq!(&bytes[16..18], &[0x00, 0x14]); // AttributeID RTU
//! assert_eq!(CmMad::decode(&bytes), Ok(mad));
//! ```

use core::net::{Ipv4Addr, Ipv6Addr};

/// Size of a MAD.
pub const MAD_SIZE: usize = 256;
/// Size of the MAD common header.
pub const MAD_HEADER_SIZE: usize = 24;
/// Size of the CM message data after the header.
pub const CM_DATA_SIZE: usize = MAD_SIZE - MAD_HEADER_SIZE;

/// `BaseVersion` of every MAD.
pub const BASE_VERSION: u8 = 1;
/// `MgmtClass` of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `ClassVersion` of the Communication Manager.
pub const CM_CLASS_VERSION: u8 = 2;
/// Method `Send`, used by every CM message.
pub const METHOD_SEND: u8 = 0x03;
/// Method `Get`.
pub const METHOD_GET: u8 = 0x01;
/// The response bit of the method byte (`Get` → `GetResp` is 0x81).
pub const METHOD_RESP: u8 = 0x80;
/// Q_Key of the GSI QP (QP1).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// QP number of the GSI QP, where CM MADs are sent.
pub const GSI_QPN: u32 = 1;
/// P_Key of RoCE paths (the default partition, full membership).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// The datagram transport of a device without QP1 (EFA): the Q_Key of the manager's own UD
/// QP, which every peer's manager also uses (bit 31 clear: an EFA work request with bit 31
/// set would mean "the QP's own Q_Key").
pub const DGRAM_CM_QKEY: u32 = 0x4346_4d31;
/// First bytes of a datagram-transport message ("EFCM").
pub const DGRAM_MAGIC: u32 = 0x4546_434d;
/// Version of the datagram-transport header.
pub const DGRAM_VERSION: u8 = 1;
/// Size of the header in front of the MAD in a datagram-transport message.
pub const DGRAM_HEADER_SIZE: usize = 32;

/// The QP type a SIDR_REQ of the datagram transport asks for: byte 5 of its [`DgramHeader`]
/// (every other message, and a peer that predates the field, leaves it 0).
pub mod dgram_qp_type {
    /// Not said (another message, or an older peer's SIDR_REQ): the passive side answers as
    /// before the field existed, whatever its listener's type.
    pub const UNSAID: u8 = 0;
    /// A UD QP.
    pub const UD: u8 = 1;
    /// An SRD QP.
    pub const SRD: u8 = 2;
}

/// The header in front of each MAD of the datagram transport (big-endian): magic u32 @0,
/// version u8 @4, the QP type a SIDR_REQ asks for u8 @5 ([`dgram_qp_type`]), two reserved
/// bytes, the sender's IPv4 address @8, the sender's manager QPN u32 @12, the sender's device
/// GID (16 bytes) @16. A UD receive on EFA has no GRH, so the sender names itself here.
///
/// Byte 5 was reserved (written 0, not checked) before it carried the QP type, so the
/// version stays 1: an older peer ignores it and sends 0 ([`dgram_qp_type::UNSAID`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DgramHeader {
    /// The sender's IPv4 address (what its ids are bound to).
    pub ip: core::net::Ipv4Addr,
    /// The QP number of the sender's manager.
    pub qpn: u32,
    /// The sender's device address (its GID 0).
    pub gid: [u8; 16],
    /// The QP type the SIDR_REQ behind the header asks for ([`dgram_qp_type`]; 0 in every
    /// other message). Decoding takes any value: the passive side refuses one it does not
    /// serve.
    pub qp_type: u8,
}

impl DgramHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; DGRAM_HEADER_SIZE] {
        let mut b = [0u8; DGRAM_HEADER_SIZE];
        b[0..4].copy_from_slice(&DGRAM_MAGIC.to_be_bytes());
        b[4] = DGRAM_VERSION;
        b[5] = self.qp_type;
        b[8..12].copy_from_slice(&self.ip.octets());
        b[12..16].copy_from_slice(&self.qpn.to_be_bytes());
        b[16..32].copy_from_slice(&self.gid);
        b
    }

    /// Decodes a header: `None` for a short buffer, another magic or version, or a QPN
    /// wider than 24 bits.
    pub fn decode(b: &[u8]) -> Option<DgramHeader> {
        let b = b.get(..DGRAM_HEADER_SIZE)?;
        let word = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if word(0) != DGRAM_MAGIC || b[4] != DGRAM_VERSION {
            return None;
        }
        let qpn = word(12);
        if qpn > 0xFF_FFFF {
            return None;
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[16..32]);
        Some(DgramHeader {
            ip: core::net::Ipv4Addr::new(b[8], b[9], b[10], b[11]),
            qpn,
            gid,
            qp_type: b[5],
        })
    }
}

/// CM attribute IDs (`AttributeID` of the MAD header).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// REQ: request for communication.
    pub const REQ: u16 = 0x0010;
    /// MRA: message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// REJ: reject.
    pub const REJ: u16 = 0x0012;
    /// REP: reply to a request.
    pub const REP: u16 = 0x0013;
    /// RTU: ready to use.
    pub const RTU: u16 = 0x0014;
    /// DREQ: request for disconnection.
    pub const DREQ: u16 = 0x0015;
    /// DREP: reply to a disconnection request.
    pub const DREP: u16 = 0x0016;
    /// SIDR_REQ: service ID resolution request.
    pub const SIDR_REQ: u16 = 0x0017;
    /// SIDR_REP: service ID resolution response.
    pub const SIDR_REP: u16 = 0x0018;
    /// LAP: load alternate path (not used by rdma_cm).
    pub const LAP: u16 = 0x0019;
    /// APR: alternate path response (not used by rdma_cm).
    pub const APR: u16 = 0x001A;
}

/// Private-data sizes: what each message carries on the wire, and what an rdma_cm consumer
/// may put in it.
pub mod limits {
    /// REQ private data on the wire.
    pub const REQ: usize = 92;
    /// MRA private data.
    pub const MRA: usize = 222;
    /// REJ private data (also the `rdma_reject` limit).
    pub const REJ: usize = 148;
    /// REP private data (also the `rdma_accept` limit for RC).
    pub const REP: usize = 196;
    /// RTU private data.
    pub const RTU: usize = 224;
    /// DREQ private data.
    pub const DREQ: usize = 220;
    /// DREP private data.
    pub const DREP: usize = 224;
    /// SIDR_REQ private data on the wire.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP private data (also the `rdma_accept` limit for UD).
    pub const SIDR_REP: usize = 136;
    /// Additional information of a REJ (ARI).
    pub const REJ_ARI: usize = 72;
    /// Additional information of a SIDR_REP.
    pub const SIDR_REP_INFO: usize = 72;
    /// The rdma_cm header in front of REQ / SIDR_REQ private data of IP-addressed ids.
    pub const CMA_HEADER: usize = 36;
    /// What `rdma_connect` accepts for an IP-addressed RC id: REQ minus the header.
    pub const CONNECT: usize = REQ - CMA_HEADER;
    /// What `rdma_connect` accepts for an IP-addressed UD id: SIDR_REQ minus the header.
    pub const SIDR_CONNECT: usize = SIDR_REQ - CMA_HEADER;
}

/// REJ reason codes (IBTA; Linux `enum ib_cm_rej_reason`).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EEC available.
    pub const NO_EEC: u16 = 2;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout (sent when an active id is destroyed with its REQ outstanding).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED_REQUEST: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Invalid service ID: nobody listens on it.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONNECTION: u16 = 10;
    /// RDC does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// Invalid primary GID.
    pub const INVALID_GID: u16 = 12;
    /// Invalid primary LID.
    pub const INVALID_LID: u16 = 13;
    /// Invalid primary SL.
    pub const INVALID_SL: u16 = 14;
    /// Invalid primary traffic class.
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    /// Invalid primary hop limit.
    pub const INVALID_HOP_LIMIT: u16 = 16;
    /// Invalid primary packet rate.
    pub const INVALID_PACKET_RATE: u16 = 17;
    /// Port CM redirect.
    pub const PORT_CM_REDIRECT: u16 = 24;
    /// Port redirect.
    pub const PORT_REDIRECT: u16 = 25;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Consumer defined: `rdma_reject`, and every reject the rdma_cm layer itself initiates.
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Invalid class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// Invalid flow label.
    pub const INVALID_FLOW_LABEL: u16 = 32;
    /// Invalid alternate flow label.
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
    /// Vendor option (ECE) not supported.
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// SIDR_REP status values.
pub mod sidr_status {
    /// Success: the QPN and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// Service ID not supported: nobody listens on it.
    pub const UNSUPPORTED: u8 = 1;
    /// Rejected by the consumer.
    pub const REJECT: u8 = 2;
    /// No QP.
    pub const NO_QP: u8 = 3;
    /// Redirect.
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// `Message REJected` / `Message MRAed` values.
pub mod msg_kind {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (LAP).
    pub const OTHER: u8 = 2;
}

/// `Transport Service Type` values of a REQ.
pub mod transport {
    /// Reliable connected.
    pub const RC: u8 = 0;
    /// Unreliable connected.
    pub const UC: u8 = 1;
    /// Extended (the `Extended Transport Type` field says which; XRC).
    pub const EXTENDED: u8 = 3;
}

/// Why bytes are not a (supported) MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MadError {
    /// Fewer than 256 bytes (or fewer than 36 for a private-data header).
    Truncated {
        /// Bytes available.
        len: usize,
    },
    /// `BaseVersion` is not 1.
    BaseVersion(u8),
    /// `MgmtClass` is not the CM's.
    MgmtClass(u8),
    /// `ClassVersion` is not 2.
    ClassVersion(u8),
    /// The method is not `Send`.
    Method(u8),
    /// An attribute ID this codec does not decode (LAP, APR, ClassPortInfo, unknown).
    Attribute(u16),
    /// The rdma_cm private-data header's version byte is not 0.
    CmaVersion(u8),
    /// The rdma_cm private-data header's IP version is neither 4 nor 6.
    IpVersion(u8),
}

impl core::fmt::Display for MadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl core::error::Error for MadError {}

// ------------------------------------------------------------------ byte access

/// The 256 bytes of a MAD.
pub type MadBytes = [u8; MAD_SIZE];

const H: usize = MAD_HEADER_SIZE;

fn put8(b: &mut MadBytes, off: usize, v: u8) {
    b[off] = v;
}
fn put16(b: &mut MadBytes, off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}
fn put24(b: &mut MadBytes, off: usize, v: u32) {
    b[off..off + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
fn put32(b: &mut MadBytes, off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut MadBytes, off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}
fn put_bytes(b: &mut MadBytes, off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}
fn get8(b: &MadBytes, off: usize) -> u8 {
    b[off]
}
fn get16(b: &MadBytes, off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}
fn get24(b: &MadBytes, off: usize) -> u32 {
    u32::from_be_bytes([0, b[off], b[off + 1], b[off + 2]])
}
fn get32(b: &MadBytes, off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}
fn get64(b: &MadBytes, off: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(w)
}
fn get_array<const N: usize>(b: &MadBytes, off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[off..off + N]);
    a
}
/// `v` placed in a `width`-bit field whose least significant bit is bit `lsb` of a byte.
const fn bits(v: u8, width: u32, lsb: u32) -> u8 {
    (v & ((1u16 << width) - 1) as u8) << lsb
}
/// The `width`-bit field at bit `lsb` of `byte`.
const fn field(byte: u8, width: u32, lsb: u32) -> u8 {
    (byte >> lsb) & ((1u16 << width) - 1) as u8
}
const fn flag(byte: u8, bit: u32) -> bool {
    byte & (1 << bit) != 0
}

// ------------------------------------------------------------------ header

/// The MAD common header (offsets 0..24 of every MAD).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MadHeader {
    /// Offset 0: `BaseVersion` (1).
    pub base_version: u8,
    /// Offset 1: `MgmtClass` (CM: 0x07).
    pub mgmt_class: u8,
    /// Offset 2: `ClassVersion` (CM: 2).
    pub class_version: u8,
    /// Offset 3: the R bit (0x80) and `Method` (CM: 0x03 Send).
    pub method: u8,
    /// Offset 4: `Status`.
    pub status: u16,
    /// Offset 6: `ClassSpecific`.
    pub class_specific: u16,
    /// Offset 8: `TransactionID`.
    pub tid: u64,
    /// Offset 16: `AttributeID`.
    pub attr_id: u16,
    /// Offset 20: `AttributeModifier` (offset 18 is reserved).
    pub attr_mod: u32,
}

impl MadHeader {
    /// The header of a CM `Send` of attribute `attr_id`.
    pub const fn cm(attr_id: u16, tid: u64, attr_mod: u32) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    /// Writes the header into bytes 0..24.
    pub fn encode_into(&self, b: &mut MadBytes) {
        put8(b, 0, self.base_version);
        put8(b, 1, self.mgmt_class);
        put8(b, 2, self.class_version);
        put8(b, 3, self.method);
        put16(b, 4, self.status);
        put16(b, 6, self.class_specific);
        put64(b, 8, self.tid);
        put16(b, 16, self.attr_id);
        put16(b, 18, 0);
        put32(b, 20, self.attr_mod);
    }

    /// Reads the header of any MAD (no field is checked); at least 24 bytes are needed.
    pub fn decode(bytes: &[u8]) -> Result<MadHeader, MadError> {
        if bytes.len() < MAD_HEADER_SIZE {
            return Err(MadError::Truncated { len: bytes.len() });
        }
        let mut b = [0u8; MAD_SIZE];
        b[..H].copy_from_slice(&bytes[..H]);
        Ok(MadHeader {
            base_version: get8(&b, 0),
            mgmt_class: get8(&b, 1),
            class_version: get8(&b, 2),
            method: get8(&b, 3),
            status: get16(&b, 4),
            class_specific: get16(&b, 6),
            tid: get64(&b, 8),
            attr_id: get16(&b, 16),
            attr_mod: get32(&b, 20),
        })
    }
}

// ------------------------------------------------------------------ REQ

/// A path of a REQ (44 bytes: the primary at message offset 52, the alternate at 96).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReqPath {
    /// +0: local LID (RoCE: the permissive LID 0xFFFF when the hop limit is above 1).
    pub local_lid: u16,
    /// +2: remote LID.
    pub remote_lid: u16,
    /// +4: local GID.
    pub local_gid: [u8; 16],
    /// +20: remote GID.
    pub remote_gid: [u8; 16],
    /// +36: flow label (20 bits).
    pub flow_label: u32,
    /// +39, low 6 bits: packet rate.
    pub packet_rate: u8,
    /// +40: traffic class.
    pub traffic_class: u8,
    /// +41: hop limit.
    pub hop_limit: u8,
    /// +42, high 4 bits: SL.
    pub sl: u8,
    /// +42, bit 3: subnet local.
    pub subnet_local: bool,
    /// +43, high 5 bits: local ACK timeout.
    pub local_ack_timeout: u8,
}

impl ReqPath {
    fn encode_at(&self, b: &mut MadBytes, off: usize) {
        put16(b, off, self.local_lid);
        put16(b, off + 2, self.remote_lid);
        put_bytes(b, off + 4, &self.local_gid);
        put_bytes(b, off + 20, &self.remote_gid);
        // flow label: the top 20 bits of the 32-bit word; then 6 reserved bits, 6 rate bits
        put32(
            b,
            off + 36,
            ((self.flow_label & 0xF_FFFF) << 12) | u32::from(self.packet_rate & 0x3F),
        );
        put8(b, off + 40, self.traffic_class);
        put8(b, off + 41, self.hop_limit);
        put8(
            b,
            off + 42,
            bits(self.sl, 4, 4) | bits(self.subnet_local as u8, 1, 3),
        );
        // byte off+43 is shared with the SAP bit in the alternate path: OR it in
        b[off + 43] = bits(self.local_ack_timeout, 5, 3);
    }

    fn decode_at(b: &MadBytes, off: usize) -> ReqPath {
        let w = get32(b, off + 36);
        let sl_byte = get8(b, off + 42);
        ReqPath {
            local_lid: get16(b, off),
            remote_lid: get16(b, off + 2),
            local_gid: get_array(b, off + 4),
            remote_gid: get_array(b, off + 20),
            flow_label: w >> 12,
            packet_rate: (w & 0x3F) as u8,
            traffic_class: get8(b, off + 40),
            hop_limit: get8(b, off + 41),
            sl: field(sl_byte, 4, 4),
            subnet_local: flag(sl_byte, 3),
            local_ack_timeout: field(get8(b, off + 43), 5, 3),
        }
    }
}

/// REQ (attribute 0x0010): request for communication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Req {
    /// 0: local communication ID.
    pub local_comm_id: u32,
    /// 8: service ID.
    pub service_id: u64,
    /// 16: local CA GUID.
    pub local_ca_guid: u64,
    /// 28: local Q_Key.
    pub local_qkey: u32,
    /// 32: local QPN (24 bits).
    pub local_qpn: u32,
    /// 35: responder resources.
    pub responder_resources: u8,
    /// 36: local EECN (24 bits).
    pub local_eecn: u32,
    /// 39: initiator depth.
    pub initiator_depth: u8,
    /// 40: remote EECN (24 bits).
    pub remote_eecn: u32,
    /// 43, bits 7..3: remote CM response timeout.
    pub remote_cm_response_timeout: u8,
    /// 43, bits 2..1: transport service type ([`transport`]).
    pub transport_service_type: u8,
    /// 43, bit 0: end-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// 44: starting PSN (24 bits).
    pub starting_psn: u32,
    /// 47, bits 7..3: local CM response timeout.
    pub local_cm_response_timeout: u8,
    /// 47, bits 2..0: retry count.
    pub retry_count: u8,
    /// 48: partition key.
    pub partition_key: u16,
    /// 50, bits 7..4: path MTU (`ibv_mtu` code).
    pub path_mtu: u8,
    /// 50, bit 3: RDC exists.
    pub rdc_exists: bool,
    /// 50, bits 2..0: RNR retry count.
    pub rnr_retry_count: u8,
    /// 51, bits 7..4: max CM retries.
    pub max_cm_retries: u8,
    /// 51, bit 3: SRQ.
    pub srq: bool,
    /// 51, bits 2..0: extended transport type.
    pub extended_transport_type: u8,
    /// 52..96: primary path.
    pub primary_path: ReqPath,
    /// 96..140: alternate path.
    pub alternate_path: ReqPath,
    /// 139, bit 2: SAP supported (shares the byte with the alternate local ACK timeout).
    pub sap_supported: bool,
    /// 140: private data.
    pub private_data: [u8; limits::REQ],
}

impl Default for Req {
    fn default() -> Self {
        Req {
            local_comm_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: 0,
            transport_service_type: 0,
            end_to_end_flow_control: false,
            starting_psn: 0,
            local_cm_response_timeout: 0,
            retry_count: 0,
            partition_key: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            extended_transport_type: 0,
            primary_path: ReqPath::default(),
            alternate_path: ReqPath::default(),
            sap_supported: false,
            private_data: [0; limits::REQ],
        }
    }
}

impl Req {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.local_comm_id);
        put64(b, H + 8, self.service_id);
        put64(b, H + 16, self.local_ca_guid);
        put32(b, H + 28, self.local_qkey);
        put24(b, H + 32, self.local_qpn);
        put8(b, H + 35, self.responder_resources);
        put24(b, H + 36, self.local_eecn);
        put8(b, H + 39, self.initiator_depth);
        put24(b, H + 40, self.remote_eecn);
        put8(
            b,
            H + 43,
            bits(self.remote_cm_response_timeout, 5, 3)
                | bits(self.transport_service_type, 2, 1)
                | bits(self.end_to_end_flow_control as u8, 1, 0),
        );
        put24(b, H + 44, self.starting_psn);
        put8(
            b,
            H + 47,
            bits(self.local_cm_response_timeout, 5, 3) | bits(self.retry_count, 3, 0),
        );
        put16(b, H + 48, self.partition_key);
        put8(
            b,
            H + 50,
            bits(self.path_mtu, 4, 4)
                | bits(self.rdc_exists as u8, 1, 3)
                | bits(self.rnr_retry_count, 3, 0),
        );
        put8(
            b,
            H + 51,
            bits(self.max_cm_retries, 4, 4)
                | bits(self.srq as u8, 1, 3)
                | bits(self.extended_transport_type, 3, 0),
        );
        self.primary_path.encode_at(b, H + 52);
        self.alternate_path.encode_at(b, H + 96);
        b[H + 139] |= bits(self.sap_supported as u8, 1, 2);
        put_bytes(b, H + 140, &self.private_data);
    }

    fn decode(b: &MadBytes) -> Req {
        let b43 = get8(b, H + 43);
        let b47 = get8(b, H + 47);
        let b50 = get8(b, H + 50);
        let b51 = get8(b, H + 51);
        Req {
            local_comm_id: get32(b, H),
            service_id: get64(b, H + 8),
            local_ca_guid: get64(b, H + 16),
            local_qkey: get32(b, H + 28),
            local_qpn: get24(b, H + 32),
            responder_resources: get8(b, H + 35),
            local_eecn: get24(b, H + 36),
            initiator_depth: get8(b, H + 39),
            remote_eecn: get24(b, H + 40),
            remote_cm_response_timeout: field(b43, 5, 3),
            transport_service_type: field(b43, 2, 1),
            end_to_end_flow_control: flag(b43, 0),
            starting_psn: get24(b, H + 44),
            local_cm_response_timeout: field(b47, 5, 3),
            retry_count: field(b47, 3, 0),
            partition_key: get16(b, H + 48),
            path_mtu: field(b50, 4, 4),
            rdc_exists: flag(b50, 3),
            rnr_retry_count: field(b50, 3, 0),
            max_cm_retries: field(b51, 4, 4),
            srq: flag(b51, 3),
            extended_transport_type: field(b51, 3, 0),
            primary_path: ReqPath::decode_at(b, H + 52),
            alternate_path: ReqPath::decode_at(b, H + 96),
            sap_supported: flag(get8(b, H + 139), 2),
            private_data: get_array(b, H + 140),
        }
    }
}

// ------------------------------------------------------------------ REP

/// REP (attribute 0x0013): reply to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rep {
    /// 0: local communication ID.
    pub local_comm_id: u32,
    /// 4: remote communication ID (the REQ's local one).
    pub remote_comm_id: u32,
    /// 8: local Q_Key.
    pub local_qkey: u32,
    /// 12: local QPN (24 bits).
    pub local_qpn: u32,
    /// 16: local EECN (24 bits).
    pub local_eecn: u32,
    /// 20: starting PSN (24 bits).
    pub starting_psn: u32,
    /// 24: responder resources.
    pub responder_resources: u8,
    /// 25: initiator depth.
    pub initiator_depth: u8,
    /// 26, bits 7..3: target ACK delay.
    pub target_ack_delay: u8,
    /// 26, bits 2..1: failover accepted.
    pub failover_accepted: u8,
    /// 26, bit 0: end-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// 27, bits 7..5: RNR retry count.
    pub rnr_retry_count: u8,
    /// 27, bit 4: SRQ.
    pub srq: bool,
    /// 28: local CA GUID.
    pub local_ca_guid: u64,
    /// 36: private data.
    pub private_data: [u8; limits::REP],
}

impl Default for Rep {
    fn default() -> Self {
        Rep {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: 0,
            local_eecn: 0,
            starting_psn: 0,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: [0; limits::REP],
        }
    }
}

impl Rep {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.local_comm_id);
        put32(b, H + 4, self.remote_comm_id);
        put32(b, H + 8, self.local_qkey);
        put24(b, H + 12, self.local_qpn);
        put24(b, H + 16, self.local_eecn);
        put24(b, H + 20, self.starting_psn);
        put8(b, H + 24, self.responder_resources);
        put8(b, H + 25, self.initiator_depth);
        put8(
            b,
            H + 26,
            bits(self.target_ack_delay, 5, 3)
                | bits(self.failover_accepted, 2, 1)
                | bits(self.end_to_end_flow_control as u8, 1, 0),
        );
        put8(
            b,
            H + 27,
            bits(self.rnr_retry_count, 3, 5) | bits(self.srq as u8, 1, 4),
        );
        put64(b, H + 28, self.local_ca_guid);
        put_bytes(b, H + 36, &self.private_data);
    }

    fn decode(b: &MadBytes) -> Rep {
        let b26 = get8(b, H + 26);
        let b27 = get8(b, H + 27);
        Rep {
            local_comm_id: get32(b, H),
            remote_comm_id: get32(b, H + 4),
            local_qkey: get32(b, H + 8),
            local_qpn: get24(b, H + 12),
            local_eecn: get24(b, H + 16),
            starting_psn: get24(b, H + 20),
            responder_resources: get8(b, H + 24),
            initiator_depth: get8(b, H + 25),
            target_ack_delay: field(b26, 5, 3),
            failover_accepted: field(b26, 2, 1),
            end_to_end_flow_control: flag(b26, 0),
            rnr_retry_count: field(b27, 3, 5),
            srq: flag(b27, 4),
            local_ca_guid: get64(b, H + 28),
            private_data: get_array(b, H + 36),
        }
    }
}

// ------------------------------------------------------------------ small messages

/// RTU (attribute 0x0014): ready to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rtu {
    /// 0: local communication ID.
    pub local_comm_id: u32,
    /// 4: remote communication ID.
    pub remote_comm_id: u32,
    /// 8: private data.
    pub private_data: [u8; limits::RTU],
}

/// REJ (attribute 0x0012): reject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rej {
    /// 0: local communication ID.
    pub local_comm_id: u32,
    /// 4: remote communication ID (0 when rejecting a REQ whose sender is unknown).
    pub remote_comm_id: u32,
    /// 8, bits 7..6: the message rejected ([`msg_kind`]).
    pub message_rejected: u8,
    /// 9, bits 7..1: length of the additional reject information.
    pub reject_info_length: u8,
    /// 10: reason ([`rej_reason`]).
    pub reason: u16,
    /// 12: additional reject information (ARI).
    pub ari: [u8; limits::REJ_ARI],
    /// 84: private data.
    pub private_data: [u8; limits::REJ],
}

/// MRA (attribute 0x0011): message receipt acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Mra {
    /// 0: local communication ID.
    pub local_comm_id: u32,
    /// 4: remote communication ID.
    pub remote_comm_id: u32,
    /// 8, bits 7..6: the message MRAed ([`msg_kind`]).
    pub message_mraed: u8,
    /// 9, bits 7..3: service timeout.
    pub service_timeout: u8,
    /// 10: private data.
    pub private_data: [u8; limits::MRA],
}

/// DREQ (attribute 0x0015): request for disconnection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dreq {
    /// 0: local communication ID.
    pub local_comm_id: u32,
    /// 4: remote communication ID.
    pub remote_comm_id: u32,
    /// 8: remote QPN/EECN (24 bits).
    pub remote_qpn_eecn: u32,
    /// 12: private data.
    pub private_data: [u8; limits::DREQ],
}

/// DREP (attribute 0x0016): reply to a disconnection request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Drep {
    /// 0: local communication ID.
    pub local_comm_id: u32,
    /// 4: remote communication ID.
    pub remote_comm_id: u32,
    /// 8: private data.
    pub private_data: [u8; limits::DREP],
}

/// SIDR_REQ (attribute 0x0017): service ID resolution request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrReq {
    /// 0: request ID.
    pub request_id: u32,
    /// 4: partition key.
    pub partition_key: u16,
    /// 8: service ID.
    pub service_id: u64,
    /// 16: private data.
    pub private_data: [u8; limits::SIDR_REQ],
}

/// SIDR_REP (attribute 0x0018): service ID resolution response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SidrRep {
    /// 0: request ID (the SIDR_REQ's).
    pub request_id: u32,
    /// 4: status ([`sidr_status`]).
    pub status: u8,
    /// 5: additional information length.
    pub additional_info_length: u8,
    /// 8: QPN (24 bits).
    pub qpn: u32,
    /// 12: service ID.
    pub service_id: u64,
    /// 20: Q_Key.
    pub qkey: u32,
    /// 24: additional information.
    pub additional_info: [u8; limits::SIDR_REP_INFO],
    /// 96: private data.
    pub private_data: [u8; limits::SIDR_REP],
}

impl Rtu {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.local_comm_id);
        put32(b, H + 4, self.remote_comm_id);
        put_bytes(b, H + 8, &self.private_data);
    }
    fn decode(b: &MadBytes) -> Rtu {
        Rtu {
            local_comm_id: get32(b, H),
            remote_comm_id: get32(b, H + 4),
            private_data: get_array(b, H + 8),
        }
    }
}

impl Rej {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.local_comm_id);
        put32(b, H + 4, self.remote_comm_id);
        put8(b, H + 8, bits(self.message_rejected, 2, 6));
        put8(b, H + 9, bits(self.reject_info_length, 7, 1));
        put16(b, H + 10, self.reason);
        put_bytes(b, H + 12, &self.ari);
        put_bytes(b, H + 84, &self.private_data);
    }
    fn decode(b: &MadBytes) -> Rej {
        Rej {
            local_comm_id: get32(b, H),
            remote_comm_id: get32(b, H + 4),
            message_rejected: field(get8(b, H + 8), 2, 6),
            reject_info_length: field(get8(b, H + 9), 7, 1),
            reason: get16(b, H + 10),
            ari: get_array(b, H + 12),
            private_data: get_array(b, H + 84),
        }
    }
}

impl Mra {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.local_comm_id);
        put32(b, H + 4, self.remote_comm_id);
        put8(b, H + 8, bits(self.message_mraed, 2, 6));
        put8(b, H + 9, bits(self.service_timeout, 5, 3));
        put_bytes(b, H + 10, &self.private_data);
    }
    fn decode(b: &MadBytes) -> Mra {
        Mra {
            local_comm_id: get32(b, H),
            remote_comm_id: get32(b, H + 4),
            message_mraed: field(get8(b, H + 8), 2, 6),
            service_timeout: field(get8(b, H + 9), 5, 3),
            private_data: get_array(b, H + 10),
        }
    }
}

impl Dreq {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.local_comm_id);
        put32(b, H + 4, self.remote_comm_id);
        put24(b, H + 8, self.remote_qpn_eecn);
        put_bytes(b, H + 12, &self.private_data);
    }
    fn decode(b: &MadBytes) -> Dreq {
        Dreq {
            local_comm_id: get32(b, H),
            remote_comm_id: get32(b, H + 4),
            remote_qpn_eecn: get24(b, H + 8),
            private_data: get_array(b, H + 12),
        }
    }
}

impl Drep {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.local_comm_id);
        put32(b, H + 4, self.remote_comm_id);
        put_bytes(b, H + 8, &self.private_data);
    }
    fn decode(b: &MadBytes) -> Drep {
        Drep {
            local_comm_id: get32(b, H),
            remote_comm_id: get32(b, H + 4),
            private_data: get_array(b, H + 8),
        }
    }
}

impl SidrReq {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.request_id);
        put16(b, H + 4, self.partition_key);
        put64(b, H + 8, self.service_id);
        put_bytes(b, H + 16, &self.private_data);
    }
    fn decode(b: &MadBytes) -> SidrReq {
        SidrReq {
            request_id: get32(b, H),
            partition_key: get16(b, H + 4),
            service_id: get64(b, H + 8),
            private_data: get_array(b, H + 16),
        }
    }
}

impl SidrRep {
    fn encode_into(&self, b: &mut MadBytes) {
        put32(b, H, self.request_id);
        put8(b, H + 4, self.status);
        put8(b, H + 5, self.additional_info_length);
        put24(b, H + 8, self.qpn);
        put64(b, H + 12, self.service_id);
        put32(b, H + 20, self.qkey);
        put_bytes(b, H + 24, &self.additional_info);
        put_bytes(b, H + 96, &self.private_data);
    }
    fn decode(b: &MadBytes) -> SidrRep {
        SidrRep {
            request_id: get32(b, H),
            status: get8(b, H + 4),
            additional_info_length: get8(b, H + 5),
            qpn: get24(b, H + 8),
            service_id: get64(b, H + 12),
            qkey: get32(b, H + 20),
            additional_info: get_array(b, H + 24),
            private_data: get_array(b, H + 96),
        }
    }
}

// ------------------------------------------------------------------ the MAD

/// A CM message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmMessage {
    /// REQ.
    Req(Req),
    /// MRA.
    Mra(Mra),
    /// REJ.
    Rej(Rej),
    /// REP.
    Rep(Rep),
    /// RTU.
    Rtu(Rtu),
    /// DREQ.
    Dreq(Dreq),
    /// DREP.
    Drep(Drep),
    /// SIDR_REQ.
    SidrReq(SidrReq),
    /// SIDR_REP.
    SidrRep(SidrRep),
}

impl CmMessage {
    /// The attribute ID of the message.
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }
}

/// A CM MAD: the message, and the two header fields that vary (the header is otherwise fixed:
/// base version 1, class 0x07, class version 2, method Send, status 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmMad {
    /// `TransactionID`.
    pub tid: u64,
    /// `AttributeModifier` (Linux carries ECE options here in REQ/REP; 0 otherwise).
    pub attr_mod: u32,
    /// The message.
    pub msg: CmMessage,
}

impl CmMad {
    /// The 256 bytes of the MAD.
    pub fn encode(&self) -> MadBytes {
        let mut b = [0u8; MAD_SIZE];
        MadHeader::cm(self.msg.attr_id(), self.tid, self.attr_mod).encode_into(&mut b);
        match &self.msg {
            CmMessage::Req(m) => m.encode_into(&mut b),
            CmMessage::Mra(m) => m.encode_into(&mut b),
            CmMessage::Rej(m) => m.encode_into(&mut b),
            CmMessage::Rep(m) => m.encode_into(&mut b),
            CmMessage::Rtu(m) => m.encode_into(&mut b),
            CmMessage::Dreq(m) => m.encode_into(&mut b),
            CmMessage::Drep(m) => m.encode_into(&mut b),
            CmMessage::SidrReq(m) => m.encode_into(&mut b),
            CmMessage::SidrRep(m) => m.encode_into(&mut b),
        }
        b
    }

    /// Decodes a CM MAD from the first 256 bytes of `bytes` (more are ignored: a UD receive
    /// buffer may be larger). The header must say base version 1, class CM, class version 2,
    /// method Send; `Status` and `ClassSpecific` are not checked.
    pub fn decode(bytes: &[u8]) -> Result<CmMad, MadError> {
        if bytes.len() < MAD_SIZE {
            return Err(MadError::Truncated { len: bytes.len() });
        }
        let mut b = [0u8; MAD_SIZE];
        b.copy_from_slice(&bytes[..MAD_SIZE]);
        let h = MadHeader::decode(&b)?;
        if h.base_version != BASE_VERSION {
            return Err(MadError::BaseVersion(h.base_version));
        }
        if h.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::MgmtClass(h.mgmt_class));
        }
        if h.class_version != CM_CLASS_VERSION {
            return Err(MadError::ClassVersion(h.class_version));
        }
        if h.method != METHOD_SEND {
            return Err(MadError::Method(h.method));
        }
        let msg = match h.attr_id {
            attr::REQ => CmMessage::Req(Req::decode(&b)),
            attr::MRA => CmMessage::Mra(Mra::decode(&b)),
            attr::REJ => CmMessage::Rej(Rej::decode(&b)),
            attr::REP => CmMessage::Rep(Rep::decode(&b)),
            attr::RTU => CmMessage::Rtu(Rtu::decode(&b)),
            attr::DREQ => CmMessage::Dreq(Dreq::decode(&b)),
            attr::DREP => CmMessage::Drep(Drep::decode(&b)),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq::decode(&b)),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep::decode(&b)),
            other => return Err(MadError::Attribute(other)),
        };
        Ok(CmMad {
            tid: h.tid,
            attr_mod: h.attr_mod,
            msg,
        })
    }
}

// ------------------------------------------------------------------ rdma_cm header, service IDs

/// The addresses of an rdma_cm private-data header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmaAddrs {
    /// IP version 4.
    V4 {
        /// Source (active side) address.
        src: Ipv4Addr,
        /// Destination (passive side) address.
        dst: Ipv4Addr,
    },
    /// IP version 6.
    V6 {
        /// Source (active side) address.
        src: Ipv6Addr,
        /// Destination (passive side) address.
        dst: Ipv6Addr,
    },
}

/// The 36-byte header rdma_cm puts in front of the consumer's REQ / SIDR_REQ private data for
/// IP-addressed ids (`docs/cm.md#cma-header-and-service-id`).
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 1 | version, 0 |
/// | 1 | 1 | IP version in the high nibble (4 or 6), low nibble 0 |
/// | 2 | 2 | source port |
/// | 4 | 16 | source IP (IPv4: bytes 16..20, bytes 4..16 zero) |
/// | 20 | 16 | destination IP (IPv4: bytes 32..36) |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CmaHeader {
    /// Source (active side) port.
    pub src_port: u16,
    /// Source and destination addresses.
    pub addrs: CmaAddrs,
}

impl CmaHeader {
    /// The header bytes.
    pub fn encode(&self) -> [u8; limits::CMA_HEADER] {
        let mut h = [0u8; limits::CMA_HEADER];
        h[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        match self.addrs {
            CmaAddrs::V4 { src, dst } => {
                h[1] = 4 << 4;
                h[16..20].copy_from_slice(&src.octets());
                h[32..36].copy_from_slice(&dst.octets());
            }
            CmaAddrs::V6 { src, dst } => {
                h[1] = 6 << 4;
                h[4..20].copy_from_slice(&src.octets());
                h[20..36].copy_from_slice(&dst.octets());
            }
        }
        h
    }

    /// Reads the header at the start of `pd` (REQ or SIDR_REQ private data). The version byte
    /// must be 0 and the IP version 4 or 6 (what the passive kernel checks); the padding of an
    /// IPv4 address and the low nibble of the IP version byte are not checked.
    pub fn decode(pd: &[u8]) -> Result<CmaHeader, MadError> {
        let Some(h) = pd.get(..limits::CMA_HEADER) else {
            return Err(MadError::Truncated { len: pd.len() });
        };
        let mut a = [0u8; limits::CMA_HEADER];
        a.copy_from_slice(h);
        if a[0] != 0 {
            return Err(MadError::CmaVersion(a[0]));
        }
        let src_port = u16::from_be_bytes([a[2], a[3]]);
        let addrs = match a[1] >> 4 {
            4 => CmaAddrs::V4 {
                src: Ipv4Addr::new(a[16], a[17], a[18], a[19]),
                dst: Ipv4Addr::new(a[32], a[33], a[34], a[35]),
            },
            6 => {
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                s.copy_from_slice(&a[4..20]);
                d.copy_from_slice(&a[20..36]);
                CmaAddrs::V6 {
                    src: Ipv6Addr::from(s),
                    dst: Ipv6Addr::from(d),
                }
            }
            v => return Err(MadError::IpVersion(v)),
        };
        Ok(CmaHeader { src_port, addrs })
    }
}

/// rdma_cm port spaces (`enum rdma_ucm_port_space`).
pub mod port_space {
    /// `RDMA_PS_IPOIB`.
    pub const IPOIB: u16 = 0x0002;
    /// `RDMA_PS_TCP` (the low byte is the IP protocol number).
    pub const TCP: u16 = 0x0106;
    /// `RDMA_PS_UDP`.
    pub const UDP: u16 = 0x0111;
    /// `RDMA_PS_IB`.
    pub const IB: u16 = 0x013F;
}

/// The service ID of port `port` in port space `ps`: `(ps << 16) + port`, e.g. PS_TCP port
/// 7471 → `0x0000_0000_0106_1D2F`.
pub const fn service_id(ps: u16, port: u16) -> u64 {
    ((ps as u64) << 16) | port as u64
}

/// The port space and port of an rdma_cm service ID, if it is one (the top 32 bits zero).
pub const fn parse_service_id(sid: u64) -> Option<(u16, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    Some(((sid >> 16) as u16, sid as u16))
}

#[cfg(test)]
mod tests;
