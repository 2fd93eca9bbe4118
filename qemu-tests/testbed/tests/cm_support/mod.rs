//! Helpers shared by the `cm_*` tests: a world of two NICs under one connection manager,
//! endpoints as librdmacm's examples make them, registered buffers.
#![allow(dead_code)]

use std::sync::Arc;

use cm::{AddrInfo, Cm, CmConfig, DeviceId, QpInitAttr, RaiFlags, getaddrinfo};
use nic_emulator::{Live, Profile};
use nic_testbed::{EmuDevice, Testbed, World};
use verbs::{Buffer, Gid, MemoryRegion, QpCap};

pub type Id = cm::CmId<EmuDevice>;

pub const SERVER: &str = "127.0.0.2";
pub const CLIENT: &str = "127.0.0.1";
pub const PORT: &str = "7471";

/// One NIC as the connection manager sees it.
pub struct Nic {
    pub tb: Testbed,
    pub dev: DeviceId,
}

/// A world of two NICs under one connection manager.
pub struct Setup {
    pub world: Arc<World>,
    pub cm: Cm<EmuDevice>,
    pub client: Nic,
    pub server: Nic,
}

pub fn probe(tb: &Testbed) -> (EmuDevice, [u8; 6]) {
    let dev = tb.probe(mlx5::Config::default()).expect("probe");
    let mac = dev.mac().unwrap();
    dev.set_roce_gid(0, Gid::from_ipv4(tb.ip().octets()).0, mac)
        .unwrap();
    (dev, mac)
}

pub fn cfg() -> CmConfig {
    CmConfig {
        // a hang is a test failure, not a stuck test (virtual time: 10 minutes)
        wait_limit_ns: Some(600_000_000_000),
        ..CmConfig::default()
    }
}

pub fn add(cm: &Cm<EmuDevice>, tb: Testbed) -> Nic {
    let (dev, mac) = probe(&tb);
    let id = cm.add_device(dev, mac).map_err(|(e, _)| e).unwrap();
    Nic { tb, dev: id }
}

pub fn setup(seed: u64) -> Setup {
    setup_cfg(seed, cfg())
}

/// Two NICs under a connection manager configured with `c`.
pub fn setup_cfg(seed: u64, c: CmConfig) -> Setup {
    let world = World::new(seed);
    let ctb = world.nic(CLIENT.parse().unwrap(), Profile::default());
    let stb = world.nic(SERVER.parse().unwrap(), Profile::default());
    let cm = Cm::new(ctb.platform(), c);
    let client = add(&cm, ctb);
    let server = add(&cm, stb);
    Setup {
        world,
        cm,
        client,
        server,
    }
}

impl Setup {
    /// Both NICs' live counts (client, server) once their drivers served the firmware's page
    /// requests (see [`Testbed::live_settled`]): a destroy's pages are asked back with an
    /// event that the driver serves when it next looks at its events.
    pub fn live_settled(&self) -> (Live, Live) {
        let live = |n: &Nic| {
            self.cm
                .with_provider(n.dev, |p| n.tb.live_settled(p))
                .expect("the device is the manager's")
        };
        (live(&self.client), live(&self.server))
    }

    /// Every device removed and shut down, nothing left on the emulated NICs.
    pub fn teardown(self) {
        assert_eq!(self.cm.live(), (0, 0), "ids and channels left");
        for n in [self.client, self.server] {
            let p = self.cm.remove_device(n.dev).expect("remove device");
            p.shutdown().unwrap();
            assert_eq!(n.tb.live(), Live::default());
            assert!(
                n.tb.device().errors().is_empty(),
                "{:?}",
                n.tb.device().errors()
            );
        }
    }
}

pub fn passive_hints() -> AddrInfo {
    AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    }
}

pub fn client_hints() -> AddrInfo {
    AddrInfo {
        ai_src_addr: Some(format!("{CLIENT}:0").parse().unwrap()),
        ..AddrInfo::default()
    }
}

pub fn attr() -> QpInitAttr<mlx5::Cq, mlx5::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

/// The passive endpoint: getaddrinfo(RAI_PASSIVE) + create_ep + listen.
pub fn listener(s: &Setup) -> Id {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&passive_hints())).unwrap();
    let mut a = attr();
    let id =
        s.cm.create_ep(&res, None, Some(&mut a))
            .expect("passive create_ep");
    // the passive side keeps a copy and leaves the caller's attr alone
    assert_eq!(a.cap.max_send_wr, 4);
    assert_eq!(id.qp_num(), None);
    id.listen(0).unwrap();
    id
}

/// The active endpoint: create_ep with a QP, resolved to the server.
pub fn active(s: &Setup) -> Id {
    let res = getaddrinfo(Some(SERVER), Some(PORT), Some(&client_hints())).unwrap();
    let mut a = attr();
    let id =
        s.cm.create_ep(&res, None, Some(&mut a))
            .expect("active create_ep");
    assert!(
        a.cap.max_inline_data >= 16,
        "actual caps written back: {a:?}"
    );
    assert!(id.qp_num().is_some());
    assert_eq!(id.device(), Some(s.client.dev));
    id
}

pub struct Buf {
    pub mem: Buffer,
    pub mr: mlx5::Mr,
}

/// `len` bytes of the id's device's memory, registered for messages.
pub fn buf(id: &Id, len: usize) -> Buf {
    let mem = id.alloc_buf(len).unwrap();
    let mr = id.reg_msgs(mem.clone()).unwrap();
    Buf { mem, mr }
}

impl Buf {
    pub fn addr(&self) -> u64 {
        self.mr.addr()
    }
    pub fn free(self, id: &Id) {
        id.dereg_mr(self.mr).unwrap();
    }
}

/// A connection set up in one thread: an asynchronous client connects with `param`, the
/// synchronous listener's request is accepted. Returns (listener, client, server side,
/// client channel).
pub fn connect_pair(
    s: &Setup,
    param: Option<&cm::ConnParam<'_>>,
) -> (Id, Id, Id, cm::EventChannel<EmuDevice>) {
    let listen = listener(s);
    let client = active(s);
    let ch = s.cm.create_event_channel().unwrap();
    client.migrate_id(Some(&ch)).unwrap();
    client.connect(param).unwrap();
    let conn = listen.get_request().unwrap();
    conn.accept(None).unwrap();
    let ev = ch.get_cm_event().unwrap();
    assert_eq!(ev.event, cm::EventType::Established, "{ev:?}");
    (listen, client, conn, ch)
}

/// The id's QP as the device reports it.
pub fn query(id: &Id) -> verbs::QpAttr {
    id.with_verbs(|v| verbs::Provider::query_qp(v.provider, v.qp.unwrap()).unwrap())
        .unwrap()
}
