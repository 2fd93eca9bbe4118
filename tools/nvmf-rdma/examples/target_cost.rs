//! The workload behind `scripts/nvmf-target-cost.sh`: host and target in this process on two
//! emulated NICs (the paced embedded fixture), one I/O queue, `N` 4 KiB random reads or
//! writes (in-capsule data) one at a time (queue depth 1, so every command passes the target
//! alone and the count does not depend on how completions happen to batch).
//!
//! ```text
//! target_cost read|write N
//! ```
//!
//! The script runs it under callgrind, collecting only inside the target queue engine's
//! per-I/O function (`nvmf_rdma_target::QueueConn::serve`, which calls `take_capsules`,
//! `take_sends` and `start_commands`: it runs only when a completion or a capsule is there,
//! never for an empty poll), subtracts the emulated NIC's
//! work done synchronously inside the doorbell writes of those functions, and takes the
//! difference of two runs (`N` and `2 N`) so that connection setup and admin commands drop
//! out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nvmf::host::ConnectParams;
use nvmf::namespace::RamNamespace;
use nvmf::target::{Subsystem, Target, TargetConfig};
use nvmf_rdma::net::{EMBEDDED_TARGET_IP, Embedded};
use nvmf_rdma::perf::{self, Job, Pattern};
use nvmf_rdma::target::{ListenerStats, run_listener};

const NQN: &str = "nqn.2024-01.io.rdma-stack:cost";

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (pattern, n) = match args.as_slice() {
        [p, n] => (
            match p.as_str() {
                "read" => Pattern::RandRead,
                "write" => Pattern::RandWrite,
                _ => return Err(format!("'{p}': read or write")),
            },
            n.parse::<u64>().map_err(|_| format!("'{n}': a count"))?,
        ),
        _ => return Err("usage: target_cost read|write N".into()),
    };
    let e = Embedded::paced(0x636f_7374, 500_000_000, 60_000_000_000)?;
    let mut t = Target::new(TargetConfig {
        mdts: 8,
        ..TargetConfig::default()
    });
    let mut s = Subsystem::new(NQN, "RDMA-STACK-COST", "rdma-stack target cost");
    s.add_namespace(
        1,
        Arc::new(RamNamespace::new(512, 16 * 2048).ok_or("namespace")?),
    )
    .map_err(|e| format!("namespace: {e:?}"))?;
    t.add_subsystem(s)
        .map_err(|e| format!("subsystem: {e:?}"))?;
    let t = Arc::new(t);
    let port = 4420;
    let listen = e.target.listen(port)?;
    let stop = AtomicBool::new(false);
    let stats = ListenerStats::default();
    let job = Job {
        pattern,
        bs: 4096,
        depth: 1,
        queues: 1,
        count: Some(n),
        verify: false,
        ..Job::default()
    };
    let params = ConnectParams {
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:636f7374-0000-0000-0000-000000000001".into(),
        hostid: *b"target-cost-host",
        subnqn: NQN.into(),
        kato: 0,
        disable_sqflow: false,
    };
    let r = std::thread::scope(|sc| {
        sc.spawn(|| run_listener(&t, &listen, &e.target.clock, 1 << 20, &stop, &stats, false));
        let r = (|| {
            let dst = SocketAddr::from((EMBEDDED_TARGET_IP, port));
            let mut s = perf::open_session(&e.host, dst, &params, 0, 1, 2, 4096)?;
            let r = perf::run(&mut s, &job);
            s.close();
            r
        })();
        stop.store(true, Ordering::Relaxed);
        r
    });
    listen.destroy_ep();
    let r = r?;
    if r.errors != 0 || r.ios != n {
        return Err(format!("{} I/Os, {} errors", r.ios, r.errors));
    }
    println!(
        "{} I/Os: {}, commands served by the target: {}",
        pattern.name(),
        r.ios,
        stats.commands.load(Ordering::Relaxed)
    );
    Ok(())
}
