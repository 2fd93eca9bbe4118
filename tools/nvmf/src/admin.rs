//! Admin commands a Linux host sends and their data: Identify (controller, namespace, active
//! namespace list, namespace identification descriptors), Get Log Page (error information,
//! SMART / health, firmware slot, changed namespaces; the discovery log is in
//! [`crate::discovery`]), Set / Get Features, Keep Alive and Asynchronous Event Request.

use alloc::string::String;
use alloc::vec::Vec;

use crate::capsule::Sqe;
use crate::status::Status;
use crate::wire::{get_padded_str, get_u16, get_u32, get_u64, put_str, put_u16, put_u32, put_u64};

/// Admin opcodes.
pub mod opcode {
    /// Delete I/O Submission Queue (not used on a fabric).
    pub const DELETE_SQ: u8 = 0x00;
    /// Create I/O Submission Queue (not used on a fabric).
    pub const CREATE_SQ: u8 = 0x01;
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue (not used on a fabric).
    pub const DELETE_CQ: u8 = 0x04;
    /// Create I/O Completion Queue (not used on a fabric).
    pub const CREATE_CQ: u8 = 0x05;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
}

/// Size of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_DESC_LIST: u8 = 0x03;
    /// I/O command set specific Identify Controller.
    pub const CTRL_CSI: u8 = 0x06;
}

/// NSID meaning "all namespaces".
pub const NSID_ALL: u32 = 0xFFFF_FFFF;

/// Identify (SQE fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identify {
    /// Bytes 4-7.
    pub nsid: u32,
    /// Byte 40: controller or namespace structure.
    pub cns: u8,
    /// Bytes 42-43: controller id.
    pub cntid: u16,
    /// Byte 47: command set identifier.
    pub csi: u8,
}

impl Identify {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> Identify {
        Identify {
            nsid: s.nsid,
            cns: s.cdw10 as u8,
            cntid: (s.cdw10 >> 16) as u16,
            csi: (s.cdw11 >> 24) as u8,
        }
    }

    /// An SQE for this command.
    pub fn to_sqe(&self) -> Sqe {
        let mut s = Sqe::new(opcode::IDENTIFY);
        s.nsid = self.nsid;
        s.cdw10 = u32::from(self.cns) | (u32::from(self.cntid) << 16);
        s.cdw11 = u32::from(self.csi) << 24;
        s
    }
}

/// Log page identifiers.
pub mod lid {
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FIRMWARE_SLOT: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS: u8 = 0x04;
    /// Commands Supported and Effects.
    pub const CMD_EFFECTS: u8 = 0x05;
    /// Asymmetric Namespace Access.
    pub const ANA: u8 = 0x0C;
    /// Discovery log.
    pub const DISCOVERY: u8 = 0x70;
}

/// Get Log Page (SQE fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GetLogPage {
    /// Bytes 4-7.
    pub nsid: u32,
    /// CDW10 7:0: log page identifier.
    pub lid: u8,
    /// CDW10 14:8: log specific field.
    pub lsp: u8,
    /// CDW10 15: retain asynchronous event.
    pub rae: bool,
    /// Number of dwords (1-based here; NUMDL CDW10 31:16 and NUMDU CDW11 15:0 hold it
    /// 0-based).
    pub numd: u32,
    /// CDW11 31:16: log specific identifier.
    pub lsi: u16,
    /// CDW12-13: byte offset into the log.
    pub lpo: u64,
}

impl GetLogPage {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> GetLogPage {
        let numd0 = (s.cdw10 >> 16) | ((s.cdw11 & 0xFFFF) << 16);
        GetLogPage {
            nsid: s.nsid,
            lid: s.cdw10 as u8,
            lsp: ((s.cdw10 >> 8) & 0x7F) as u8,
            rae: s.cdw10 & (1 << 15) != 0,
            numd: numd0.wrapping_add(1),
            lsi: (s.cdw11 >> 16) as u16,
            lpo: u64::from(s.cdw12) | (u64::from(s.cdw13) << 32),
        }
    }

    /// An SQE for this command (`numd` must be at least 1).
    pub fn to_sqe(&self) -> Sqe {
        let numd0 = self.numd.saturating_sub(1);
        let mut s = Sqe::new(opcode::GET_LOG_PAGE);
        s.nsid = self.nsid;
        s.cdw10 = u32::from(self.lid)
            | (u32::from(self.lsp & 0x7F) << 8)
            | (u32::from(self.rae) << 15)
            | ((numd0 & 0xFFFF) << 16);
        s.cdw11 = (numd0 >> 16) | (u32::from(self.lsi) << 16);
        s.cdw12 = self.lpo as u32;
        s.cdw13 = (self.lpo >> 32) as u32;
        s
    }

    /// Transfer length in bytes.
    pub fn len(&self) -> u64 {
        u64::from(self.numd) * 4
    }

    /// Whether the command asks for no bytes (never true of a decoded command).
    pub fn is_empty(&self) -> bool {
        self.numd == 0
    }
}

/// Feature identifiers.
pub mod fid {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MGMT: u8 = 0x02;
    /// Temperature Threshold.
    pub const TEMP_THRESHOLD: u8 = 0x04;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Volatile Write Cache.
    pub const VOLATILE_WC: u8 = 0x06;
    /// Number of Queues.
    pub const NUM_QUEUES: u8 = 0x07;
    /// Interrupt Coalescing.
    pub const IRQ_COALESCE: u8 = 0x08;
    /// Interrupt Vector Configuration.
    pub const IRQ_CONFIG: u8 = 0x09;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMIC: u8 = 0x0A;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT: u8 = 0x0B;
    /// Autonomous Power State Transition.
    pub const APST: u8 = 0x0C;
    /// Timestamp.
    pub const TIMESTAMP: u8 = 0x0E;
    /// Keep Alive Timer.
    pub const KATO: u8 = 0x0F;
    /// Host Behavior Support.
    pub const HOST_BEHAVIOR: u8 = 0x16;
    /// Host Identifier.
    pub const HOST_ID: u8 = 0x81;
}

/// Set Features (SQE fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SetFeatures {
    /// CDW10 7:0.
    pub fid: u8,
    /// CDW10 31: save.
    pub save: bool,
    /// CDW11: feature specific.
    pub cdw11: u32,
}

impl SetFeatures {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> SetFeatures {
        SetFeatures {
            fid: s.cdw10 as u8,
            save: s.cdw10 & (1 << 31) != 0,
            cdw11: s.cdw11,
        }
    }

    /// An SQE for this command.
    pub fn to_sqe(&self) -> Sqe {
        let mut s = Sqe::new(opcode::SET_FEATURES);
        s.cdw10 = u32::from(self.fid) | (u32::from(self.save) << 31);
        s.cdw11 = self.cdw11;
        s
    }
}

/// Get Features (SQE fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GetFeatures {
    /// CDW10 7:0.
    pub fid: u8,
    /// CDW10 10:8: select (0 current, 1 default, 2 saved, 3 capabilities).
    pub sel: u8,
    /// CDW11: feature specific.
    pub cdw11: u32,
}

impl GetFeatures {
    /// Reads the fields of an SQE.
    pub fn from_sqe(s: &Sqe) -> GetFeatures {
        GetFeatures {
            fid: s.cdw10 as u8,
            sel: ((s.cdw10 >> 8) & 7) as u8,
            cdw11: s.cdw11,
        }
    }

    /// An SQE for this command.
    pub fn to_sqe(&self) -> Sqe {
        let mut s = Sqe::new(opcode::GET_FEATURES);
        s.cdw10 = u32::from(self.fid) | (u32::from(self.sel & 7) << 8);
        s.cdw11 = self.cdw11;
        s
    }
}

/// Number of Queues value (Set Features CDW11 / completion DW0): submission queues 15:0,
/// completion queues 31:16, both 0-based.
pub const fn num_queues_value(nsq: u16, ncq: u16) -> u32 {
    (nsq.saturating_sub(1) as u32) | ((ncq.saturating_sub(1) as u32) << 16)
}

/// Asynchronous event configuration bits a target may accept: SMART critical warnings (4:0),
/// namespace attribute notices (8), firmware activation (9), ANA change (11), discovery log
/// change (31).
pub const AEN_CFG_ALLOWED: u32 = 0x1F | (1 << 8) | (1 << 9) | (1 << 11) | (1 << 31);

/// Asynchronous event completion DW0: type 2:0, information 15:8, log page 23:16.
pub const fn async_event_result(kind: u8, info: u8, log_page: u8) -> u32 {
    (kind as u32 & 7) | ((info as u32) << 8) | ((log_page as u32) << 16)
}

/// CTRATT bit 6: traffic-based keep-alive (any command restarts the keep-alive timer; a
/// Linux host then sends Keep Alive only when it saw no completion for KATO / 4).
pub const CTRATT_TBKAS: u32 = 1 << 6;

/// Identify Controller, the fields a target fills and a host reads. Offsets in the comments.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IdentifyController {
    /// 0: PCI vendor id.
    pub vid: u16,
    /// 2: PCI subsystem vendor id.
    pub ssvid: u16,
    /// 4: serial number (20 ASCII, space padded).
    pub sn: String,
    /// 24: model number (40 ASCII).
    pub mn: String,
    /// 64: firmware revision (8 ASCII).
    pub fr: String,
    /// 72: recommended arbitration burst.
    pub rab: u8,
    /// 76: multi-path I/O and namespace sharing capabilities.
    pub cmic: u8,
    /// 77: maximum data transfer size, 2^MDTS × 4 KiB (0 = unlimited).
    pub mdts: u8,
    /// 78: controller id.
    pub cntlid: u16,
    /// 80: version.
    pub ver: u32,
    /// 88: RTD3 entry latency (µs).
    pub rtd3e: u32,
    /// 92: optional asynchronous events supported.
    pub oaes: u32,
    /// 96: controller attributes.
    pub ctratt: u32,
    /// 111: controller type (1 I/O, 2 discovery, 3 administrative).
    pub cntrltype: u8,
    /// 128: command retry delay time 1 (100 ms units).
    pub crdt1: u16,
    /// 256: optional admin command support.
    pub oacs: u16,
    /// 258: abort command limit (0-based).
    pub acl: u8,
    /// 259: asynchronous event request limit (0-based).
    pub aerl: u8,
    /// 260: firmware updates.
    pub frmw: u8,
    /// 261: log page attributes.
    pub lpa: u8,
    /// 262: error log page entries (0-based).
    pub elpe: u8,
    /// 265: autonomous power state transition attributes.
    pub apsta: u8,
    /// 320: keep alive support (granularity in 100 ms units, 0 = none).
    pub kas: u16,
    /// 512: submission queue entry size (max 7:4, required 3:0, log2).
    pub sqes: u8,
    /// 513: completion queue entry size.
    pub cqes: u8,
    /// 514: maximum outstanding commands.
    pub maxcmd: u16,
    /// 516: number of namespaces (highest NSID).
    pub nn: u32,
    /// 520: optional NVM command support (bit 2 DSM, 3 Write Zeroes).
    pub oncs: u16,
    /// 522: fused operation support.
    pub fuses: u16,
    /// 525: volatile write cache (bit 0 present).
    pub vwc: u8,
    /// 526: atomic write unit normal (0-based blocks).
    pub awun: u16,
    /// 528: atomic write unit power fail.
    pub awupf: u16,
    /// 536: SGL support (1:0 = 01b, bit 2 keyed, bit 20 offset / in-capsule data).
    pub sgls: u32,
    /// 540: maximum number of allowed namespaces.
    pub mnan: u32,
    /// 768: subsystem NQN (256, NUL padded).
    pub subnqn: String,
    /// 1792: I/O queue command capsule supported size (16-byte units).
    pub ioccsz: u32,
    /// 1796: I/O queue response capsule supported size (16-byte units).
    pub iorcsz: u32,
    /// 1800: in-capsule data offset (16-byte units; must be 0 for Linux).
    pub icdoff: u16,
    /// 1802: fabrics controller attributes.
    pub fcatt: u8,
    /// 1803: maximum SGL data block descriptors.
    pub msdbd: u8,
    /// 1804: optional fabrics commands supported (bit 0 Disconnect).
    pub ofcs: u16,
}

/// CNTRLTYPE: I/O controller.
pub const CNTRLTYPE_IO: u8 = 1;
/// CNTRLTYPE: discovery controller.
pub const CNTRLTYPE_DISCOVERY: u8 = 2;
/// SGLS: SGLs supported (no alignment) | keyed data block.
pub const SGLS_KEYED: u32 = 0x0000_0005;
/// SGLS bit 20: offset in data block descriptors (in-capsule data).
pub const SGLS_OFFSET: u32 = 1 << 20;
/// ONCS bit 2: Dataset Management.
pub const ONCS_DSM: u16 = 1 << 2;
/// ONCS bit 3: Write Zeroes.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;

impl IdentifyController {
    /// Encodes the 4096-byte structure (fields not listed above are zero).
    pub fn encode(&self) -> [u8; IDENTIFY_LEN] {
        let mut b = [0u8; IDENTIFY_LEN];
        put_u16(&mut b, 0, self.vid);
        put_u16(&mut b, 2, self.ssvid);
        put_str(&mut b, 4, 20, &self.sn, b' ');
        put_str(&mut b, 24, 40, &self.mn, b' ');
        put_str(&mut b, 64, 8, &self.fr, b' ');
        b[72] = self.rab;
        b[76] = self.cmic;
        b[77] = self.mdts;
        put_u16(&mut b, 78, self.cntlid);
        put_u32(&mut b, 80, self.ver);
        put_u32(&mut b, 88, self.rtd3e);
        put_u32(&mut b, 92, self.oaes);
        put_u32(&mut b, 96, self.ctratt);
        b[111] = self.cntrltype;
        put_u16(&mut b, 128, self.crdt1);
        put_u16(&mut b, 256, self.oacs);
        b[258] = self.acl;
        b[259] = self.aerl;
        b[260] = self.frmw;
        b[261] = self.lpa;
        b[262] = self.elpe;
        b[265] = self.apsta;
        put_u16(&mut b, 320, self.kas);
        b[512] = self.sqes;
        b[513] = self.cqes;
        put_u16(&mut b, 514, self.maxcmd);
        put_u32(&mut b, 516, self.nn);
        put_u16(&mut b, 520, self.oncs);
        put_u16(&mut b, 522, self.fuses);
        b[525] = self.vwc;
        put_u16(&mut b, 526, self.awun);
        put_u16(&mut b, 528, self.awupf);
        put_u32(&mut b, 536, self.sgls);
        put_u32(&mut b, 540, self.mnan);
        put_str(&mut b, 768, 255, &self.subnqn, 0);
        put_u32(&mut b, 1792, self.ioccsz);
        put_u32(&mut b, 1796, self.iorcsz);
        put_u16(&mut b, 1800, self.icdoff);
        b[1802] = self.fcatt;
        b[1803] = self.msdbd;
        put_u16(&mut b, 1804, self.ofcs);
        b
    }

    /// Decodes the structure (`None` when shorter than 4096 bytes).
    pub fn decode(b: &[u8]) -> Option<IdentifyController> {
        if b.len() < IDENTIFY_LEN {
            return None;
        }
        Some(IdentifyController {
            vid: get_u16(b, 0),
            ssvid: get_u16(b, 2),
            sn: get_padded_str(&b[4..24]).into(),
            mn: get_padded_str(&b[24..64]).into(),
            fr: get_padded_str(&b[64..72]).into(),
            rab: b[72],
            cmic: b[76],
            mdts: b[77],
            cntlid: get_u16(b, 78),
            ver: get_u32(b, 80),
            rtd3e: get_u32(b, 88),
            oaes: get_u32(b, 92),
            ctratt: get_u32(b, 96),
            cntrltype: b[111],
            crdt1: get_u16(b, 128),
            oacs: get_u16(b, 256),
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            apsta: b[265],
            kas: get_u16(b, 320),
            sqes: b[512],
            cqes: b[513],
            maxcmd: get_u16(b, 514),
            nn: get_u32(b, 516),
            oncs: get_u16(b, 520),
            fuses: get_u16(b, 522),
            vwc: b[525],
            awun: get_u16(b, 526),
            awupf: get_u16(b, 528),
            sgls: get_u32(b, 536),
            mnan: get_u32(b, 540),
            subnqn: get_padded_str(&b[768..1024]).into(),
            ioccsz: get_u32(b, 1792),
            iorcsz: get_u32(b, 1796),
            icdoff: get_u16(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
            ofcs: get_u16(b, 1804),
        })
    }
}

/// Identify Namespace, the fields a target fills (one LBA format).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct IdentifyNamespace {
    /// 0: namespace size in blocks.
    pub nsze: u64,
    /// 8: namespace capacity (0 makes a host ignore the namespace).
    pub ncap: u64,
    /// 16: namespace utilisation.
    pub nuse: u64,
    /// 24: namespace features.
    pub nsfeat: u8,
    /// 25: number of LBA formats (0-based).
    pub nlbaf: u8,
    /// 26: formatted LBA size (format index 3:0).
    pub flbas: u8,
    /// 30: namespace multi-path and sharing (bit 0 shared).
    pub nmic: u8,
    /// 99: namespace attributes (bit 0 write protected).
    pub nsattr: u8,
    /// 104: namespace globally unique id.
    pub nguid: [u8; 16],
    /// 120: IEEE extended unique id.
    pub eui64: [u8; 8],
    /// 128: LBA format 0: LBADS (log2 of the block size), byte 130.
    pub lbads: u8,
}

impl IdentifyNamespace {
    /// Encodes the 4096-byte structure.
    pub fn encode(&self) -> [u8; IDENTIFY_LEN] {
        let mut b = [0u8; IDENTIFY_LEN];
        put_u64(&mut b, 0, self.nsze);
        put_u64(&mut b, 8, self.ncap);
        put_u64(&mut b, 16, self.nuse);
        b[24] = self.nsfeat;
        b[25] = self.nlbaf;
        b[26] = self.flbas;
        b[30] = self.nmic;
        b[99] = self.nsattr;
        b[104..120].copy_from_slice(&self.nguid);
        b[120..128].copy_from_slice(&self.eui64);
        // LBA format 0: MS 128-129 (0), LBADS 130, RP 131 (0).
        b[130] = self.lbads;
        b
    }

    /// Decodes the structure (`None` when shorter than 4096 bytes); LBADS is that of the
    /// format FLBAS selects.
    pub fn decode(b: &[u8]) -> Option<IdentifyNamespace> {
        if b.len() < IDENTIFY_LEN {
            return None;
        }
        let fmt = usize::from(b[26] & 0xF) | (usize::from((b[26] >> 5) & 3) << 4);
        let mut nguid = [0u8; 16];
        nguid.copy_from_slice(&b[104..120]);
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&b[120..128]);
        Some(IdentifyNamespace {
            nsze: get_u64(b, 0),
            ncap: get_u64(b, 8),
            nuse: get_u64(b, 16),
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            nmic: b[30],
            nsattr: b[99],
            nguid,
            eui64,
            lbads: b[128 + 4 * fmt + 2],
        })
    }

    /// Block size in bytes (`None` when LBADS is outside 9..=16).
    pub fn block_size(&self) -> Option<u32> {
        (9..=16).contains(&self.lbads).then(|| 1u32 << self.lbads)
    }
}

/// Namespace identification descriptor types.
pub mod nidt {
    /// IEEE EUI-64 (8 bytes).
    pub const EUI64: u8 = 1;
    /// NGUID (16 bytes).
    pub const NGUID: u8 = 2;
    /// UUID (16 bytes).
    pub const UUID: u8 = 3;
    /// Command set identifier (1 byte).
    pub const CSI: u8 = 4;
}

/// One namespace identification descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NsDescriptor {
    /// Type.
    pub nidt: u8,
    /// Value (length = NIDL).
    pub value: Vec<u8>,
}

/// Encodes a descriptor list into 4096 bytes: {NIDT, NIDL, 2 reserved, value}; NIDL 0 ends
/// it. Descriptors that do not fit are left out.
pub fn encode_ns_descriptors(list: &[NsDescriptor]) -> [u8; IDENTIFY_LEN] {
    let mut b = [0u8; IDENTIFY_LEN];
    let mut off = 0;
    for d in list {
        let n = d.value.len().min(255);
        if off + 4 + n > IDENTIFY_LEN - 4 {
            break;
        }
        b[off] = d.nidt;
        b[off + 1] = n as u8;
        b[off + 4..off + 4 + n].copy_from_slice(&d.value[..n]);
        off += 4 + n;
    }
    b
}

/// Decodes a descriptor list (stops at NIDL 0 or the end of the buffer).
pub fn decode_ns_descriptors(b: &[u8]) -> Vec<NsDescriptor> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= b.len() {
        let (nidt, nidl) = (b[off], usize::from(b[off + 1]));
        if nidl == 0 || off + 4 + nidl > b.len() {
            break;
        }
        out.push(NsDescriptor {
            nidt,
            value: b[off + 4..off + 4 + nidl].to_vec(),
        });
        off += 4 + nidl;
    }
    out
}

/// Encodes an active namespace list (ascending NSIDs, at most 1024, zero terminated).
pub fn encode_ns_list(nsids: &[u32]) -> [u8; IDENTIFY_LEN] {
    let mut b = [0u8; IDENTIFY_LEN];
    for (i, &n) in nsids.iter().take(IDENTIFY_LEN / 4).enumerate() {
        put_u32(&mut b, i * 4, n);
    }
    b
}

/// Decodes a namespace list (stops at the first 0).
pub fn decode_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

/// Size of one Error Information log entry.
pub const ERROR_LOG_ENTRY_LEN: usize = 64;

/// An Error Information log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ErrorLogEntry {
    /// 0: error count (unique, increasing; 0 = empty entry).
    pub error_count: u64,
    /// 8: submission queue id.
    pub sqid: u16,
    /// 10: command id.
    pub cid: u16,
    /// 12: status field (wire format: status << 1 | phase).
    pub status: Status,
    /// 14: parameter error location (byte 7:0, bit 10:8).
    pub param_error_location: u16,
    /// 16: LBA.
    pub lba: u64,
    /// 24: namespace.
    pub nsid: u32,
    /// 29: transport type.
    pub trtype: u8,
}

impl ErrorLogEntry {
    /// Encodes the 64-byte entry.
    pub fn encode(&self) -> [u8; ERROR_LOG_ENTRY_LEN] {
        let mut b = [0u8; ERROR_LOG_ENTRY_LEN];
        put_u64(&mut b, 0, self.error_count);
        put_u16(&mut b, 8, self.sqid);
        put_u16(&mut b, 10, self.cid);
        put_u16(&mut b, 12, self.status.to_wire(false));
        put_u16(&mut b, 14, self.param_error_location);
        put_u64(&mut b, 16, self.lba);
        put_u32(&mut b, 24, self.nsid);
        b[29] = self.trtype;
        b
    }

    /// Decodes an entry (`None` when shorter than 64 bytes).
    pub fn decode(b: &[u8]) -> Option<ErrorLogEntry> {
        if b.len() < ERROR_LOG_ENTRY_LEN {
            return None;
        }
        Some(ErrorLogEntry {
            error_count: get_u64(b, 0),
            sqid: get_u16(b, 8),
            cid: get_u16(b, 10),
            status: Status::from_wire(get_u16(b, 12)).0,
            param_error_location: get_u16(b, 14),
            lba: get_u64(b, 16),
            nsid: get_u32(b, 24),
            trtype: b[29],
        })
    }
}

/// Size of the SMART / Health log.
pub const SMART_LOG_LEN: usize = 512;

/// SMART / Health Information (the fields a target without media keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SmartLog {
    /// 0: critical warning bits.
    pub critical_warning: u8,
    /// 1: composite temperature (kelvin).
    pub temperature: u16,
    /// 3: available spare (%).
    pub avail_spare: u8,
    /// 4: available spare threshold (%).
    pub spare_thresh: u8,
    /// 5: percentage used.
    pub percent_used: u8,
    /// 32: data units read (thousands of 512-byte units, rounded up).
    pub data_units_read: u128,
    /// 48: data units written.
    pub data_units_written: u128,
    /// 64: host read commands.
    pub host_reads: u128,
    /// 80: host write commands.
    pub host_writes: u128,
    /// 112: power cycles.
    pub power_cycles: u128,
    /// 128: power on hours.
    pub power_on_hours: u128,
    /// 160: media and data integrity errors.
    pub media_errors: u128,
    /// 176: number of error information log entries.
    pub num_err_log_entries: u128,
}

impl SmartLog {
    /// Encodes the 512-byte page.
    pub fn encode(&self) -> [u8; SMART_LOG_LEN] {
        let mut b = [0u8; SMART_LOG_LEN];
        b[0] = self.critical_warning;
        put_u16(&mut b, 1, self.temperature);
        b[3] = self.avail_spare;
        b[4] = self.spare_thresh;
        b[5] = self.percent_used;
        for (off, v) in [
            (32, self.data_units_read),
            (48, self.data_units_written),
            (64, self.host_reads),
            (80, self.host_writes),
            (112, self.power_cycles),
            (128, self.power_on_hours),
            (160, self.media_errors),
            (176, self.num_err_log_entries),
        ] {
            b[off..off + 16].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Decodes the page (`None` when shorter than 512 bytes).
    pub fn decode(b: &[u8]) -> Option<SmartLog> {
        if b.len() < SMART_LOG_LEN {
            return None;
        }
        let u128_at = |off: usize| {
            let mut x = [0u8; 16];
            x.copy_from_slice(&b[off..off + 16]);
            u128::from_le_bytes(x)
        };
        Some(SmartLog {
            critical_warning: b[0],
            temperature: get_u16(b, 1),
            avail_spare: b[3],
            spare_thresh: b[4],
            percent_used: b[5],
            data_units_read: u128_at(32),
            data_units_written: u128_at(48),
            host_reads: u128_at(64),
            host_writes: u128_at(80),
            power_cycles: u128_at(112),
            power_on_hours: u128_at(128),
            media_errors: u128_at(160),
            num_err_log_entries: u128_at(176),
        })
    }
}

/// Size of the Firmware Slot Information log.
pub const FIRMWARE_SLOT_LOG_LEN: usize = 512;

/// Firmware Slot Information: active slot (AFI 2:0) and the revision in slot 1 (byte 8).
pub fn encode_firmware_slot_log(active_slot: u8, revision: &str) -> [u8; FIRMWARE_SLOT_LOG_LEN] {
    let mut b = [0u8; FIRMWARE_SLOT_LOG_LEN];
    b[0] = active_slot & 7;
    put_str(&mut b, 8, 8, revision, b' ');
    b
}

/// Size of the Changed Namespace List log.
pub const CHANGED_NS_LOG_LEN: usize = 4096;
