//! The host side, transport-agnostic: command builders, completion parsing, and queue-id /
//! command-id bookkeeping; [`HostQueue`] runs commands synchronously over a
//! [`HostTransport`].

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::admin::{
    self, GetFeatures, GetLogPage, IDENTIFY_LEN, Identify, IdentifyController, IdentifyNamespace,
    NsDescriptor, SetFeatures, cns, fid, lid,
};
use crate::capsule::{Cqe, Sqe};
use crate::discovery::{self, DISCOVERY_RECORD_LEN, DiscoveryEntry, DiscoveryHeader};
use crate::fabrics::{
    self, CNTLID_DYNAMIC, Cap, Cc, Connect, ConnectData, Csts, PropertyGet, PropertySet, prop,
};
use crate::io::{self, DSM_AD, DatasetManagement, DsmRange, ReadWrite};
use crate::rdma::ConnectRequest;
use crate::status::Status;

/// Command identifiers: a tag in bits 11:0 and a 4-bit generation in 15:12, so that a late
/// completion for a reused tag is recognised.
#[derive(Clone, Debug)]
pub struct CommandIds {
    gens: Vec<u8>,
    busy: Vec<bool>,
    next: usize,
}

impl CommandIds {
    /// Tags `0..depth` (at most 4096).
    pub fn new(depth: u16) -> CommandIds {
        let d = usize::from(depth.clamp(1, 4096));
        CommandIds {
            gens: vec![0; d],
            busy: vec![false; d],
            next: 0,
        }
    }

    /// A free command id, or `None` when every tag is in flight.
    pub fn alloc(&mut self) -> Option<u16> {
        let d = self.busy.len();
        for i in 0..d {
            let t = (self.next + i) % d;
            if !self.busy[t] {
                self.busy[t] = true;
                self.gens[t] = (self.gens[t] + 1) & 0xF;
                self.next = (t + 1) % d;
                return Some((u16::from(self.gens[t]) << 12) | t as u16);
            }
        }
        None
    }

    /// Frees `cid`; false when it is not in flight (unknown tag or stale generation).
    pub fn free(&mut self, cid: u16) -> bool {
        let t = usize::from(cid & 0xFFF);
        let g = (cid >> 12) as u8;
        if t >= self.busy.len() || !self.busy[t] || self.gens[t] != g {
            return false;
        }
        self.busy[t] = false;
        true
    }

    /// Commands in flight.
    pub fn in_flight(&self) -> usize {
        self.busy.iter().filter(|&&b| b).count()
    }
}

/// Host identity and target for Connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    /// Host NQN.
    pub hostnqn: String,
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Subsystem NQN.
    pub subnqn: String,
    /// Keep-alive timeout in ms (admin queue; 0 = none).
    pub kato: u32,
    /// Disable SQ flow control.
    pub disable_sqflow: bool,
}

/// Builders for the commands a host sends (command id and SGL are filled when sent).
pub mod cmd {
    use super::*;

    /// Connect for queue `qid` with a `sqsize` (0-based) queue.
    pub fn connect(qid: u16, sqsize: u16, kato: u32, disable_sqflow: bool) -> Sqe {
        Connect {
            recfmt: 0,
            qid,
            sqsize,
            cattr: if disable_sqflow {
                fabrics::CATTR_DISABLE_SQ_FLOW
            } else {
                0
            },
            kato: if qid == 0 { kato } else { 0 },
        }
        .to_sqe()
    }

    /// The Connect data: CNTLID 0xFFFF on the admin queue, the admin Connect's answer on I/O
    /// queues.
    pub fn connect_data(p: &ConnectParams, cntlid: u16) -> [u8; fabrics::CONNECT_DATA_LEN] {
        ConnectData {
            hostid: p.hostid,
            cntlid,
            subnqn: p.subnqn.clone(),
            hostnqn: p.hostnqn.clone(),
        }
        .encode()
    }

    /// Property Get.
    pub fn property_get(offset: u32, size8: bool) -> Sqe {
        PropertyGet { size8, offset }.to_sqe()
    }

    /// Property Set of a 4-byte property.
    pub fn property_set(offset: u32, value: u32) -> Sqe {
        PropertySet {
            size8: false,
            offset,
            value: u64::from(value),
        }
        .to_sqe()
    }

    /// Identify.
    pub fn identify(cns: u8, nsid: u32) -> Sqe {
        Identify {
            nsid,
            cns,
            cntid: 0,
            csi: 0,
        }
        .to_sqe()
    }

    /// Get Log Page of `len` bytes (a multiple of 4) at byte offset `lpo`.
    pub fn get_log_page(lid: u8, nsid: u32, len: u32, lpo: u64, rae: bool) -> Sqe {
        GetLogPage {
            nsid,
            lid,
            lsp: 0,
            rae,
            numd: len / 4,
            lsi: 0,
            lpo,
        }
        .to_sqe()
    }

    /// Set Features Number of Queues asking for `n` submission and completion queues.
    pub fn set_num_queues(n: u16) -> Sqe {
        SetFeatures {
            fid: fid::NUM_QUEUES,
            save: false,
            cdw11: admin::num_queues_value(n, n),
        }
        .to_sqe()
    }

    /// Set Features with a raw CDW11.
    pub fn set_features(fid: u8, cdw11: u32) -> Sqe {
        SetFeatures {
            fid,
            save: false,
            cdw11,
        }
        .to_sqe()
    }

    /// Get Features (current value).
    pub fn get_features(fid: u8, cdw11: u32) -> Sqe {
        GetFeatures { fid, sel: 0, cdw11 }.to_sqe()
    }

    /// Keep Alive.
    pub fn keep_alive() -> Sqe {
        Sqe::new(admin::opcode::KEEP_ALIVE)
    }

    /// Asynchronous Event Request.
    pub fn async_event() -> Sqe {
        Sqe::new(admin::opcode::ASYNC_EVENT)
    }

    /// Read or Write of `blocks` (1-based, at most 65536) blocks.
    pub fn rw(opcode: u8, nsid: u32, slba: u64, blocks: u32) -> Sqe {
        ReadWrite {
            nsid,
            slba,
            nlb: blocks.saturating_sub(1).min(0xFFFF) as u16,
            ..Default::default()
        }
        .to_sqe(opcode)
    }

    /// Flush.
    pub fn flush(nsid: u32) -> Sqe {
        let mut s = Sqe::new(io::opcode::FLUSH);
        s.nsid = nsid;
        s
    }

    /// Write Zeroes.
    pub fn write_zeroes(nsid: u32, slba: u64, blocks: u32) -> Sqe {
        rw(io::opcode::WRITE_ZEROES, nsid, slba, blocks)
    }

    /// Dataset Management with deallocate over `ranges` ranges (1..=256).
    pub fn deallocate(nsid: u32, ranges: usize) -> Sqe {
        DatasetManagement {
            nsid,
            nr: ranges.clamp(1, 256).saturating_sub(1) as u8,
            attr: DSM_AD,
        }
        .to_sqe()
    }

    /// Disconnect.
    pub fn disconnect() -> Sqe {
        fabrics::disconnect_sqe()
    }
}

/// The data a command moves.
pub enum Data<'a> {
    /// None.
    None,
    /// Host to controller.
    ToController(&'a [u8]),
    /// Controller to host.
    FromController(&'a mut [u8]),
}

/// What a host queue needs from its transport: run one command to completion.
pub trait HostTransport {
    /// Transport failure.
    type Error;
    /// Sends `sqe` after filling its SGL descriptor for `data` (a keyed descriptor for
    /// memory the target can reach, or in-capsule data where allowed), and returns the
    /// 16-byte response once it arrived; controller-to-host data is in the buffer by then.
    fn execute(&mut self, sqe: &mut Sqe, data: Data<'_>) -> Result<[u8; 16], Self::Error>;
}

/// Why a host command failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostError<E> {
    /// The transport failed.
    Transport(E),
    /// The controller answered with an error status (and DW0).
    Status(Status, u32),
    /// Every command id is in flight.
    QueueFull,
    /// A completion named a command id not in flight, or another queue.
    UnexpectedCompletion(Cqe),
    /// The controller's data did not make sense.
    BadData,
    /// CSTS.RDY did not come up (or CSTS.CFS did).
    NotReady(Csts),
}

/// The state of one host queue: queue id, size, command ids.
#[derive(Clone, Debug)]
pub struct HostQueueState {
    /// Queue id.
    pub qid: u16,
    /// Submission queue size, 0-based.
    pub sqsize: u16,
    /// Command ids.
    pub cids: CommandIds,
    /// Last SQ head the controller reported (0xFFFF: flow control off).
    pub sqhd: u16,
}

impl HostQueueState {
    /// A queue `qid` with `depth` entries.
    pub fn new(qid: u16, depth: u16) -> HostQueueState {
        HostQueueState {
            qid,
            sqsize: depth.saturating_sub(1),
            cids: CommandIds::new(depth),
            sqhd: 0,
        }
    }

    /// The connect request private data for this queue (HRQSIZE 1-based, HSQSIZE 0-based).
    pub fn connect_request(&self) -> ConnectRequest {
        ConnectRequest {
            recfmt: 0,
            qid: self.qid,
            hrqsize: self.sqsize.saturating_add(1),
            hsqsize: self.sqsize,
            cntlid: 0,
        }
    }

    /// Gives `sqe` a command id.
    pub fn start(&mut self, sqe: &mut Sqe) -> Option<u16> {
        let cid = self.cids.alloc()?;
        sqe.cid = cid;
        Some(cid)
    }

    /// Matches a completion to its command; false when it names no command in flight on this
    /// queue.
    pub fn finish(&mut self, cqe: &Cqe) -> bool {
        if cqe.sqid != self.qid || !self.cids.free(cqe.cid) {
            return false;
        }
        self.sqhd = cqe.sqhd;
        true
    }
}

/// One host queue over a transport.
pub struct HostQueue<T> {
    /// Bookkeeping.
    pub state: HostQueueState,
    /// The transport.
    pub transport: T,
    /// Controller id after Connect.
    pub cntlid: Option<u16>,
}

type R<T, E> = Result<T, HostError<E>>;

impl<T: HostTransport> HostQueue<T> {
    /// Queue `qid` of `depth` entries over `transport`.
    pub fn new(qid: u16, depth: u16, transport: T) -> HostQueue<T> {
        HostQueue {
            state: HostQueueState::new(qid, depth),
            transport,
            cntlid: None,
        }
    }

    /// Runs one command; any completion status is returned as is.
    pub fn execute(&mut self, mut sqe: Sqe, data: Data<'_>) -> R<Cqe, T::Error> {
        let cid = self.state.start(&mut sqe).ok_or(HostError::QueueFull)?;
        let raw = match self.transport.execute(&mut sqe, data) {
            Ok(r) => r,
            Err(e) => {
                self.state.cids.free(cid);
                return Err(HostError::Transport(e));
            }
        };
        let cqe = Cqe::decode(&raw).ok_or(HostError::BadData)?;
        if cqe.cid != cid || !self.state.finish(&cqe) {
            self.state.cids.free(cid);
            return Err(HostError::UnexpectedCompletion(cqe));
        }
        Ok(cqe)
    }

    /// Runs one command; a non-success status is an error.
    pub fn run(&mut self, sqe: Sqe, data: Data<'_>) -> R<Cqe, T::Error> {
        let cqe = self.execute(sqe, data)?;
        if cqe.status.is_success() {
            Ok(cqe)
        } else {
            Err(HostError::Status(cqe.status, cqe.dw0()))
        }
    }

    /// Connect: `cntlid` is [`CNTLID_DYNAMIC`] on the admin queue, the admin queue's
    /// controller id on I/O queues. Returns the controller id.
    pub fn connect(&mut self, p: &ConnectParams, cntlid: u16) -> R<u16, T::Error> {
        let sqe = cmd::connect(self.state.qid, self.state.sqsize, p.kato, p.disable_sqflow);
        let data = cmd::connect_data(p, cntlid);
        let cqe = self.run(sqe, Data::ToController(&data))?;
        let id = cqe.dw0() as u16;
        self.cntlid = Some(id);
        Ok(id)
    }

    /// Connect on the admin queue.
    pub fn connect_admin(&mut self, p: &ConnectParams) -> R<u16, T::Error> {
        self.connect(p, CNTLID_DYNAMIC)
    }

    /// Property Get.
    pub fn property_get(&mut self, offset: u32, size8: bool) -> R<u64, T::Error> {
        Ok(self
            .run(cmd::property_get(offset, size8), Data::None)?
            .result)
    }

    /// Property Set (4 bytes).
    pub fn property_set(&mut self, offset: u32, value: u32) -> R<(), T::Error> {
        self.run(cmd::property_set(offset, value), Data::None)
            .map(|_| ())
    }

    /// The enable handshake: read CAP, write CC with EN 0 then EN 1 (IOSQES 6, IOCQES 4, NVM
    /// command set, 4 KiB pages), then read CSTS until RDY (at most `polls` reads).
    pub fn enable(&mut self, polls: u32) -> R<Cap, T::Error> {
        let cap = Cap(self.property_get(prop::CAP, true)?);
        self.property_set(prop::CC, Cc::LINUX_ENABLE.0 & !1)?;
        self.property_set(prop::CC, Cc::LINUX_ENABLE.0)?;
        let mut csts = Csts(0);
        for _ in 0..polls.max(1) {
            csts = Csts(self.property_get(prop::CSTS, false)? as u32);
            if csts.cfs() {
                break;
            }
            if csts.rdy() {
                return Ok(cap);
            }
        }
        Err(HostError::NotReady(csts))
    }

    /// Shutdown: CC.SHN = 01b with EN still 1, then read CSTS once; returns it.
    pub fn shutdown(&mut self) -> R<Csts, T::Error> {
        self.property_set(prop::CC, Cc::LINUX_ENABLE.0 | (1 << 14))?;
        Ok(Csts(self.property_get(prop::CSTS, false)? as u32))
    }

    /// Identify into a 4096-byte buffer.
    pub fn identify(&mut self, cns: u8, nsid: u32) -> R<Vec<u8>, T::Error> {
        let mut buf = vec![0u8; IDENTIFY_LEN];
        self.run(cmd::identify(cns, nsid), Data::FromController(&mut buf))?;
        Ok(buf)
    }

    /// Identify Controller.
    pub fn identify_controller(&mut self) -> R<IdentifyController, T::Error> {
        let b = self.identify(cns::CONTROLLER, 0)?;
        IdentifyController::decode(&b).ok_or(HostError::BadData)
    }

    /// Identify Namespace.
    pub fn identify_namespace(&mut self, nsid: u32) -> R<IdentifyNamespace, T::Error> {
        let b = self.identify(cns::NAMESPACE, nsid)?;
        IdentifyNamespace::decode(&b).ok_or(HostError::BadData)
    }

    /// Active namespace ids above `after`.
    pub fn active_namespaces(&mut self, after: u32) -> R<Vec<u32>, T::Error> {
        Ok(admin::decode_ns_list(
            &self.identify(cns::ACTIVE_NS_LIST, after)?,
        ))
    }

    /// Namespace identification descriptors.
    pub fn ns_descriptors(&mut self, nsid: u32) -> R<Vec<NsDescriptor>, T::Error> {
        Ok(admin::decode_ns_descriptors(
            &self.identify(cns::NS_DESC_LIST, nsid)?,
        ))
    }

    /// Set Features Number of Queues; returns how many I/O queues the host may use:
    /// min(asked, granted submission queues, granted completion queues).
    pub fn set_num_queues(&mut self, n: u16) -> R<u16, T::Error> {
        let dw0 = self.run(cmd::set_num_queues(n), Data::None)?.dw0();
        let nsq = (dw0 & 0xFFFF) as u16;
        let ncq = (dw0 >> 16) as u16;
        Ok(n.min(nsq.saturating_add(1)).min(ncq.saturating_add(1)))
    }

    /// Keep Alive.
    pub fn keep_alive(&mut self) -> R<(), T::Error> {
        self.run(cmd::keep_alive(), Data::None).map(|_| ())
    }

    /// Get Log Page into `buf` (length a multiple of 4) from byte `lpo`.
    pub fn get_log_page(
        &mut self,
        lid: u8,
        nsid: u32,
        lpo: u64,
        rae: bool,
        buf: &mut [u8],
    ) -> R<(), T::Error> {
        let sqe = cmd::get_log_page(lid, nsid, buf.len() as u32, lpo, rae);
        self.run(sqe, Data::FromController(buf)).map(|_| ())
    }

    /// The discovery log, the way libnvme reads it: the header, then header and entries in
    /// pieces of at most 4096 bytes, retried (up to `tries` times) while the generation
    /// counter changes.
    pub fn discovery_log(&mut self, tries: u32) -> R<(u64, Vec<DiscoveryEntry>), T::Error> {
        for _ in 0..tries.max(1) {
            let mut hdr = vec![0u8; DISCOVERY_RECORD_LEN];
            self.get_log_page(lid::DISCOVERY, 0, 0, true, &mut hdr)?;
            let h = DiscoveryHeader::decode(&hdr).ok_or(HostError::BadData)?;
            let n = usize::try_from(h.numrec)
                .ok()
                .filter(|&n| n <= 1024)
                .ok_or(HostError::BadData)?;
            let total = DISCOVERY_RECORD_LEN * (n + 1);
            let mut log = vec![0u8; total];
            let mut off = 0;
            while off < total {
                let len = (total - off).min(4096);
                let last = off + len == total;
                self.get_log_page(
                    lid::DISCOVERY,
                    0,
                    off as u64,
                    !last,
                    &mut log[off..off + len],
                )?;
                off += len;
            }
            let (h2, entries) = discovery::decode_log(&log).ok_or(HostError::BadData)?;
            if h2.genctr == h.genctr {
                return Ok((h2.genctr, entries));
            }
        }
        Err(HostError::BadData)
    }

    /// Get Features (current); returns DW0.
    pub fn get_features(&mut self, fid: u8, cdw11: u32) -> R<u32, T::Error> {
        Ok(self.run(cmd::get_features(fid, cdw11), Data::None)?.dw0())
    }

    /// Set Features; returns DW0.
    pub fn set_features(&mut self, fid: u8, cdw11: u32) -> R<u32, T::Error> {
        Ok(self.run(cmd::set_features(fid, cdw11), Data::None)?.dw0())
    }

    /// Read `buf.len() / block_size` blocks from `slba`.
    pub fn read(
        &mut self,
        nsid: u32,
        slba: u64,
        block_size: u32,
        buf: &mut [u8],
    ) -> R<(), T::Error> {
        let blocks = blocks_of(buf.len(), block_size).ok_or(HostError::BadData)?;
        let sqe = cmd::rw(io::opcode::READ, nsid, slba, blocks);
        self.run(sqe, Data::FromController(buf)).map(|_| ())
    }

    /// Write `data` (whole blocks) at `slba`.
    pub fn write(&mut self, nsid: u32, slba: u64, block_size: u32, data: &[u8]) -> R<(), T::Error> {
        let blocks = blocks_of(data.len(), block_size).ok_or(HostError::BadData)?;
        let sqe = cmd::rw(io::opcode::WRITE, nsid, slba, blocks);
        self.run(sqe, Data::ToController(data)).map(|_| ())
    }

    /// Flush.
    pub fn flush(&mut self, nsid: u32) -> R<(), T::Error> {
        self.run(cmd::flush(nsid), Data::None).map(|_| ())
    }

    /// Write Zeroes.
    pub fn write_zeroes(&mut self, nsid: u32, slba: u64, blocks: u32) -> R<(), T::Error> {
        self.run(cmd::write_zeroes(nsid, slba, blocks), Data::None)
            .map(|_| ())
    }

    /// Dataset Management, deallocate; the range list goes as 4096 bytes, as Linux sends it.
    pub fn deallocate(&mut self, nsid: u32, ranges: &[DsmRange]) -> R<(), T::Error> {
        if ranges.is_empty() || ranges.len() > io::DSM_MAX_RANGES {
            return Err(HostError::BadData);
        }
        let data = io::encode_dsm_ranges(ranges, 4096);
        self.run(
            cmd::deallocate(nsid, ranges.len()),
            Data::ToController(&data),
        )
        .map(|_| ())
    }

    /// Disconnect this queue.
    pub fn disconnect(&mut self) -> R<(), T::Error> {
        self.run(cmd::disconnect(), Data::None).map(|_| ())
    }
}

fn blocks_of(len: usize, block_size: u32) -> Option<u32> {
    let bs = block_size as usize;
    if bs == 0 || len == 0 || !len.is_multiple_of(bs) || len / bs > 65536 {
        return None;
    }
    Some((len / bs) as u32)
}
