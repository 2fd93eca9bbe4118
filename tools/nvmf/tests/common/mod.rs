//! An in-memory loopback: the host's transport and the target's transport in one object.
//! Host memory the target may touch is a table of keyed regions; every command goes through
//! `nvmf::target::serve` synchronously.

#![allow(dead_code)]

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nvmf::capsule::{SQE_SIZE, Sgl, Sqe};
use nvmf::host::{ConnectParams, Data, HostQueue, HostQueueState, HostTransport};
use nvmf::namespace::{Namespace, NsError, RamNamespace};
use nvmf::rdma::ConnectRequest;
use nvmf::target::{Port, RemoteBuffer, Served, Subsystem, Target, TargetConfig, TargetTransport};

pub const SUBNQN: &str = "nqn.2024-01.io.test:sub1";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
pub const NS1_UUID: [u8; 16] = *b"nvmf-test-ns-001";

/// The target side of the loopback: host memory regions and the response that came back.
#[derive(Default)]
pub struct HostMemory {
    regions: HashMap<u32, (u64, Vec<u8>)>,
    pub response: Option<([u8; 16], Option<u32>)>,
    pub fail_reads: bool,
}

impl HostMemory {
    fn region(&mut self, r: RemoteBuffer) -> Result<&mut [u8], &'static str> {
        let (addr, buf) = self.regions.get_mut(&r.key).ok_or("bad key")?;
        let off = r.addr.checked_sub(*addr).ok_or("below region")? as usize;
        let end = off + r.len as usize;
        buf.get_mut(off..end).ok_or("beyond region")
    }
}

impl TargetTransport for HostMemory {
    type Error = &'static str;

    fn read_remote(&mut self, remote: RemoteBuffer, buf: &mut [u8]) -> Result<(), Self::Error> {
        if self.fail_reads {
            return Err("read failed");
        }
        let src = self.region(remote)?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_remote(&mut self, remote: RemoteBuffer, data: &[u8]) -> Result<(), Self::Error> {
        self.region(remote)?.copy_from_slice(data);
        Ok(())
    }

    fn send_response(&mut self, cqe: &[u8; 16], inv: Option<u32>) -> Result<(), Self::Error> {
        self.response = Some((*cqe, inv));
        Ok(())
    }
}

/// Why the loopback could not complete a command.
#[derive(Debug, PartialEq, Eq)]
pub enum LoopError {
    /// The target holds the command.
    Held,
    /// The target asked to disconnect.
    Disconnected,
    /// The target's transport side failed.
    Transport(&'static str),
    /// A with-invalidate response named the wrong key.
    WrongInvalidate,
}

/// Rewrites a capsule before the target sees it.
pub type Tamper = Box<dyn FnMut(&mut Vec<u8>)>;

/// Host transport over one target queue.
pub struct Loopback {
    pub queue: nvmf::target::Queue,
    pub mem: HostMemory,
    pub now: Rc<Cell<u64>>,
    next_key: u32,
    /// Put host-to-controller data up to this size in the capsule (0: never).
    pub inline: usize,
    /// Applied to the capsule bytes before the target sees them.
    pub tamper: Option<Tamper>,
    pub inline_sent: usize,
    pub keyed_sent: usize,
    pub closed: bool,
}

impl Loopback {
    pub fn new(queue: nvmf::target::Queue, now: Rc<Cell<u64>>) -> Loopback {
        let inline = queue.inline_data_size();
        Loopback {
            queue,
            mem: HostMemory::default(),
            now,
            next_key: 0x100,
            inline,
            tamper: None,
            inline_sent: 0,
            keyed_sent: 0,
            closed: false,
        }
    }

    fn expose(&mut self, data: Vec<u8>) -> Sgl {
        self.next_key += 1;
        let key = self.next_key;
        let addr = 0x7f00_0000_0000 + u64::from(key) * 0x10_0000;
        let len = data.len() as u32;
        self.mem.regions.insert(key, (addr, data));
        Sgl::Keyed {
            addr,
            len,
            key,
            invalidate: true,
        }
    }
}

impl HostTransport for Loopback {
    type Error = LoopError;

    fn execute(&mut self, sqe: &mut Sqe, data: Data<'_>) -> Result<[u8; 16], LoopError> {
        let mut capsule = Vec::with_capacity(SQE_SIZE);
        let mut out: Option<&mut [u8]> = None;
        let mut key = None;
        match data {
            Data::None => sqe.sgl = Sgl::NULL,
            Data::ToController(d) if !d.is_empty() && d.len() <= self.inline => {
                sqe.sgl = Sgl::InCapsule {
                    offset: 0,
                    len: d.len() as u32,
                };
                self.inline_sent += 1;
                capsule.extend_from_slice(&sqe.encode());
                capsule.extend_from_slice(d);
            }
            Data::ToController(d) => {
                sqe.sgl = self.expose(d.to_vec());
                key = Some(self.next_key);
                self.keyed_sent += 1;
            }
            Data::FromController(buf) => {
                sqe.sgl = self.expose(vec![0u8; buf.len()]);
                key = Some(self.next_key);
                self.keyed_sent += 1;
                out = Some(buf);
            }
        }
        if capsule.is_empty() {
            capsule.extend_from_slice(&sqe.encode());
        }
        if let Some(t) = &mut self.tamper {
            t(&mut capsule);
        }
        self.mem.response = None;
        let served = nvmf::target::serve(&mut self.queue, &mut self.mem, &capsule, self.now.get())
            .map_err(LoopError::Transport)?;
        let region = key.and_then(|k| self.mem.regions.remove(&k));
        match served {
            Served::Held => return Err(LoopError::Held),
            Served::Disconnect => {
                self.closed = true;
                return Err(LoopError::Disconnected);
            }
            Served::RespondedAndClosed => self.closed = true,
            Served::Responded => {}
        }
        let (cqe, inv) = self.mem.response.take().ok_or(LoopError::Held)?;
        // Like Linux: a with-invalidate response must name the key of this command.
        if inv.is_some() && inv != key {
            return Err(LoopError::WrongInvalidate);
        }
        if let (Some(buf), Some((_, data))) = (out, region) {
            buf.copy_from_slice(&data);
        }
        Ok(cqe)
    }
}

/// A namespace whose readiness the test switches.
pub struct Switchable {
    pub inner: RamNamespace,
    pub ready: AtomicBool,
}

impl Namespace for Switchable {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }
    fn read(&self, lba: u64, buf: &mut [u8]) -> Result<(), NsError> {
        self.inner.read(lba, buf)
    }
    fn write(&self, lba: u64, data: &[u8]) -> Result<(), NsError> {
        self.inner.write(lba, data)
    }
    fn flush(&self) -> Result<(), NsError> {
        Ok(())
    }
    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

pub struct Setup {
    pub target: Arc<Target>,
    pub now: Rc<Cell<u64>>,
    pub ns3: Arc<Switchable>,
}

/// A target with one port and:
/// * SUBNQN: ns 1 (512 B × 4096, UUID), ns 2 (4096 B × 64), ns 3 (switchable, 512 B × 64);
/// * "nqn.2024-01.io.test:private": only for another host;
/// * "nqn.2024-01.io.test:sub3" .. ":sub5": empty, any host.
pub fn setup() -> Setup {
    let cfg = TargetConfig {
        max_io_queues: 4,
        ports: vec![Port {
            portid: 1,
            trtype: nvmf::discovery::trtype::RDMA,
            adrfam: nvmf::discovery::adrfam::IPV4,
            traddr: "10.0.0.2".into(),
            trsvcid: "4420".into(),
            treq: nvmf::discovery::TREQ_SECURE_NOT_REQUIRED | nvmf::discovery::TREQ_SQFLOW_DISABLE,
        }],
        ..Default::default()
    };
    let mut t = Target::new(cfg);
    let mut s = Subsystem::new(SUBNQN, "SN-0001", "rdma-stack nvmf");
    s.add_namespace_with_ids(
        1,
        Arc::new(RamNamespace::new(512, 4096).unwrap()),
        Some(NS1_UUID),
        None,
    )
    .unwrap();
    s.add_namespace(2, Arc::new(RamNamespace::new(4096, 64).unwrap()))
        .unwrap();
    let ns3 = Arc::new(Switchable {
        inner: RamNamespace::new(512, 64).unwrap(),
        ready: AtomicBool::new(true),
    });
    s.add_namespace(3, ns3.clone()).unwrap();
    t.add_subsystem(s).unwrap();
    let mut p = Subsystem::new("nqn.2024-01.io.test:private", "SN-0002", "private");
    p.allow_host("nqn.2024-01.io.test:someone-else");
    t.add_subsystem(p).unwrap();
    for i in 3..=5 {
        t.add_subsystem(Subsystem::new(
            &format!("nqn.2024-01.io.test:sub{i}"),
            "SN",
            "M",
        ))
        .unwrap();
    }
    Setup {
        target: Arc::new(t),
        now: Rc::new(Cell::new(0)),
        ns3,
    }
}

pub fn params(subnqn: &str, kato: u32) -> ConnectParams {
    ConnectParams {
        hostnqn: HOSTNQN.into(),
        hostid: *b"host-id-01234567",
        subnqn: subnqn.into(),
        kato,
        disable_sqflow: false,
    }
}

/// Accepts a connection for queue `qid` of `depth` entries (private data through its wire
/// form) and returns the host queue over the loopback.
pub fn open_queue(s: &Setup, qid: u16, depth: u16) -> HostQueue<Loopback> {
    let st = HostQueueState::new(qid, depth);
    let wire = st.connect_request().encode();
    let req = ConnectRequest::decode(&wire).unwrap();
    let (queue, accept) = s.target.accept(&req).expect("accepted");
    assert_eq!(accept.crqsize, depth);
    HostQueue::new(qid, depth, Loopback::new(queue, s.now.clone()))
}
