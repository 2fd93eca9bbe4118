//! Connection managers on opened devices, an emulated NIC on an Ethernet link (QEMU's
//! socket netdev, ARP), and the embedded fixture.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError, TryLockError};

use cm::{AddrInfo, Cm, CmConfig, CmId, Neighbor, RaiFlags, getaddrinfo};
use device_open::{Backing, Clock, Device, InProcess, Open, Opened, mac_for};
use nic_testbed::World;

/// The device's clock and relax hook as the connection manager's platform.
struct CmClock(Clock);

impl cm::Platform for CmClock {
    fn relax(&self) {
        nic_hal::Platform::relax(&self.0)
    }
    fn now_ns(&self) -> u64 {
        nic_hal::Platform::now_ns(&self.0)
    }
}

/// One end: a connection manager with one device.
pub struct Endpoint<D: Device> {
    /// The manager.
    pub cm: Cm<D>,
    /// The device's clock (waits relax on it).
    pub clock: Clock,
    /// The device's address.
    pub ip: Ipv4Addr,
    /// What the device is.
    pub label: String,
}

impl<D: Device> Endpoint<D> {
    /// Adds the opened device to a new manager whose blocking calls give up after
    /// `wait_limit_ns` of the device's clock; the neighbour table knows the MACs of the
    /// emulated NICs of the device's /24 (the UDP and in-process fabrics have no ARP). The
    /// backing is handed back: drop it after the endpoint.
    pub fn new(o: Opened<D>, wait_limit_ns: u64) -> Result<(Endpoint<D>, Backing), String> {
        let Opened {
            dev,
            mac,
            ip,
            label,
            clock,
            backing,
        } = o;
        let cm = Cm::new(
            CmClock(clock.clone()),
            CmConfig {
                wait_limit_ns: Some(wait_limit_ns),
                auto_comp_channels: false,
                ..CmConfig::default()
            },
        );
        cm.add_device(dev, mac)
            .map_err(|(e, _)| format!("{label}: add the device to the CM: {e:?}"))?;
        let [a, b, c, _] = ip.octets();
        for h in 1..=254 {
            let n = Ipv4Addr::new(a, b, c, h);
            if n != ip {
                cm.add_neighbor(n, Neighbor { mac: mac_for(n) });
            }
        }
        Ok((
            Endpoint {
                cm,
                clock,
                ip,
                label,
            },
            backing,
        ))
    }

    /// An endpoint over a manager that already holds its device (an emulated NIC on an
    /// Ethernet link, [`device_open::fabric::eth_nic`]): `clock` paces this side's waits.
    pub fn from_cm(cm: Cm<D>, clock: Clock, ip: Ipv4Addr, label: String) -> Endpoint<D> {
        Endpoint {
            cm,
            clock,
            ip,
            label,
        }
    }

    /// A passive endpoint on `port` of this device (no QP attributes: each connection's QP is
    /// sized from its request).
    pub fn listen(&self, port: u16) -> Result<CmId<D>, String> {
        let hints = AddrInfo {
            ai_flags: RaiFlags::PASSIVE,
            ..AddrInfo::default()
        };
        let res = getaddrinfo(
            Some(&self.ip.to_string()),
            Some(&port.to_string()),
            Some(&hints),
        )
        .map_err(|e| format!("getaddrinfo {}:{port}: {e:?}", self.ip))?;
        let id = self
            .cm
            .create_ep(&res, None, None)
            .map_err(|e| format!("create_ep {}:{port}: {e:?}", self.ip))?;
        id.listen(128)
            .map_err(|e| format!("listen {}:{port}: {e:?}", self.ip))?;
        Ok(id)
    }

    /// The address info for a connection from this device to `dst`.
    pub fn route_to(&self, dst: SocketAddr) -> Result<AddrInfo, String> {
        let hints = AddrInfo {
            ai_src_addr: Some(SocketAddr::from((self.ip, 0))),
            ..AddrInfo::default()
        };
        getaddrinfo(
            Some(&dst.ip().to_string()),
            Some(&dst.port().to_string()),
            Some(&hints),
        )
        .map_err(|e| format!("getaddrinfo {dst}: {e:?}"))
    }
}

/// Address of the embedded target's NIC.
pub const EMBEDDED_TARGET_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// Address of the embedded host's NIC.
pub const EMBEDDED_HOST_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// The embedded fixture: two emulated NICs on one in-process fabric (virtual time), each in a
/// connection manager of its own.
pub struct Embedded {
    /// The target's end.
    pub target: Endpoint<nic_testbed::EmuDevice>,
    /// The host's end.
    pub host: Endpoint<nic_testbed::EmuDevice>,
    // Dropped last: the devices live in them.
    _backings: [Backing; 2],
    /// The fabric.
    pub world: Arc<World>,
}

impl Embedded {
    /// Opens both NICs. The target's blocking calls give up after `target_wait_ns` of
    /// virtual time (its listener wakes up that often), the host's after `host_wait_ns`.
    ///
    /// The virtual clock leaps ahead whenever a relaxing thread finds both devices idle: on
    /// a loaded machine, a thread that is not scheduled for a few milliseconds looks to the
    /// other end like a peer silent for seconds. Fine for tests that wait for timeouts;
    /// [`Embedded::paced`] is the fixture for measurements.
    pub fn new(seed: u64, target_wait_ns: u64, host_wait_ns: u64) -> Result<Embedded, String> {
        Embedded::open(seed, target_wait_ns, host_wait_ns, None)
    }

    /// As [`Embedded::new`], but while the devices are idle the virtual clock runs no faster
    /// than wall-clock time (a waiting thread yields its CPU instead of moving it further):
    /// a peer thread the OS did not schedule for a while has lost that much time, not
    /// seconds, so RC retransmission, connection manager and queue timeouts keep their real
    /// meaning on a busy machine. What the devices do is unchanged (the clock moves only
    /// when no device has work), so throughput and latency are measured as with
    /// [`Embedded::new`]; waits for timeouts cost their full length in real time.
    pub fn paced(seed: u64, target_wait_ns: u64, host_wait_ns: u64) -> Result<Embedded, String> {
        Embedded::open(seed, target_wait_ns, host_wait_ns, Some(Poller::default()))
    }

    /// As [`Embedded::paced`], and every wait of the host's end (its clock's relax) first
    /// runs the work set on the returned [`Poller`] (a polled target, such as
    /// `nvmf_rdma_target::PolledTarget::poll`), then steps the devices: host, target and
    /// both emulated NICs advance from the host's thread alone, one loop, as rperf's
    /// embedded mode runs.
    pub fn one_loop(
        seed: u64,
        target_wait_ns: u64,
        host_wait_ns: u64,
    ) -> Result<(Embedded, Poller), String> {
        let p = Poller::default();
        let e = Embedded::open(seed, target_wait_ns, host_wait_ns, Some(p.clone()))?;
        Ok((e, p))
    }

    /// `paced`: the pacing clock (its poller on the host's end only), else the world's.
    fn open(
        seed: u64,
        target_wait_ns: u64,
        host_wait_ns: u64,
        paced: Option<Poller>,
    ) -> Result<Embedded, String> {
        let world = World::new(seed);
        let open = |ip: Ipv4Addr, poller: Option<Poller>| {
            let mut o = InProcess {
                world: &world,
                ip,
                profile: nic_emulator::Profile {
                    mac: mac_for(ip),
                    ..nic_emulator::Profile::default()
                },
            }
            .open()?;
            if let Some(poller) = poller {
                o.clock = Clock::new(Paced {
                    world: world.clone(),
                    poller,
                });
            }
            Ok::<_, String>(o)
        };
        let (target, tb) = Endpoint::new(
            open(
                EMBEDDED_TARGET_IP,
                paced.as_ref().map(|_| Poller::default()),
            )?,
            target_wait_ns,
        )?;
        let (host, hb) = Endpoint::new(open(EMBEDDED_HOST_IP, paced)?, host_wait_ns)?;
        Ok(Embedded {
            target,
            host,
            _backings: [tb, hb],
            world,
        })
    }
}

/// Work run by every wait of the host's end of [`Embedded::one_loop`], before the devices
/// are stepped: true when it did something. Nothing until [`Poller::set`]; a wait made from
/// inside the work itself, or while another thread runs it, skips it.
#[derive(Clone, Default)]
pub struct Poller(Arc<Mutex<Option<PollFn>>>);

/// What a [`Poller`] runs.
type PollFn = Box<dyn FnMut() -> bool + Send>;

impl Poller {
    /// Runs `f` from now on, in place of what was set before.
    pub fn set(&self, f: impl FnMut() -> bool + Send + 'static) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(Box::new(f));
    }

    /// Stops running the work and drops it (a polled target shuts down: drop it before the
    /// fixture).
    pub fn clear(&self) {
        let f = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        drop(f);
    }

    /// Runs the work once, if there is some and nobody runs it now.
    fn poll(&self) -> bool {
        let mut g = match self.0.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        g.as_mut().is_some_and(|f| f())
    }
}

/// The paced clock of [`Embedded::paced`]: relaxing runs the poller's work, then steps every
/// device of the world; after a pass where neither found anything to do, the virtual clock
/// may move (to the next frame or timer, as [`World::relax`] moves it) only while it has
/// moved less than the wall-clock time this thread has spent idle since it last saw
/// progress; otherwise the thread yields.
struct Paced {
    world: Arc<World>,
    poller: Poller,
}

/// One thread's idle stretch: (wall clock, virtual clock) when it began.
#[derive(Clone, Copy)]
struct IdleSince {
    wall: std::time::Instant,
    virt: u64,
}

thread_local! {
    static IDLE_SINCE: std::cell::Cell<Option<IdleSince>> = const { std::cell::Cell::new(None) };
}

impl nic_hal::Platform for Paced {
    fn relax(&self) {
        let polled = self.poller.poll();
        if self.world.step() || polled {
            IDLE_SINCE.with(|c| c.set(None));
            return;
        }
        let virt = self.world.now_ns();
        let since = IDLE_SINCE.with(|c| match c.get() {
            Some(s) => s,
            None => {
                let s = IdleSince {
                    wall: std::time::Instant::now(),
                    virt,
                };
                c.set(Some(s));
                s
            }
        });
        let wall = u64::try_from(since.wall.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if virt.saturating_sub(since.virt) <= wall {
            self.world.relax();
        } else {
            std::thread::yield_now();
        }
    }

    fn now_ns(&self) -> u64 {
        self.world.now_ns()
    }
}

/// The CM settings of an emulated NIC on an Ethernet link: blocking calls give up after
/// `wait_limit_ns` (the target's listener wakes up that often).
pub fn eth_cm_config(wait_limit_ns: u64) -> CmConfig {
    CmConfig {
        wait_limit_ns: Some(wait_limit_ns),
        auto_comp_channels: false,
        ..CmConfig::default()
    }
}

/// An endpoint on an emulated NIC on an Ethernet link (`--fabric eth:LOCAL,REMOTE`) at `ip`
/// on the virtual wire, with MAC `mac` (default [`device_open::mac_for`]); the NIC is handed
/// back beside it: shut it down (or drop it) after the endpoint's ids are gone.
pub fn eth_endpoint(
    ip: Ipv4Addr,
    local: u16,
    remote: u16,
    mac: Option<[u8; 6]>,
    wait_limit_ns: u64,
) -> Result<(Endpoint<nic_testbed::EthDevice>, nic_testbed::EthNic), String> {
    let nic = device_open::fabric::eth_nic(ip, local, remote, mac, eth_cm_config(wait_limit_ns))?;
    let label = format!(
        "emulated mlx5 at {ip} on the Ethernet link 127.0.0.1:{local} -> :{remote} (MAC {})",
        device_open::fabric::fmt_mac(&nic.mac())
    );
    let ep = Endpoint::from_cm(
        nic.cm.clone(),
        Clock::new(nic_testbed::eth::YieldingTime::new()),
        ip,
        label,
    );
    Ok((ep, nic))
}
