//! The target side of the RDMA binding: a listener, and one thread per queue. Admission and
//! the queue engine are [`nvmf_rdma_target`]'s (no_std; the unikernel runs them from one loop).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cm::CmId;
use device_open::{Clock, Device};
use nvmf::target::Target;
pub use nvmf_rdma_target::{
    DATA_IN_FLIGHT, IoError, ListenerStats, MAX_IN_FLIGHT, MAX_READS, QueueConn, Step, admit,
};

use crate::now_ms;

/// Serves connection requests on `listen` until `stop` is set (checked whenever the
/// manager's wait limit ends a `get_request`), each accepted queue on a thread of its own.
/// Returns once every queue thread ended. Controllers whose keep-alive timer ran out are
/// failed from here. `staging` is the largest transfer of one command (MDTS).
pub fn run_listener<D: Device>(
    target: &Arc<Target>,
    listen: &CmId<D>,
    clock: &Clock,
    staging: usize,
    stop: &AtomicBool,
    stats: &ListenerStats,
    verbose: bool,
) {
    std::thread::scope(|s| {
        while !stop.load(Ordering::Relaxed) {
            for cntlid in target.check_keep_alive(now_ms(clock)) {
                if verbose {
                    eprintln!("nvmf-target: controller {cntlid}: keep-alive timeout, failed");
                }
            }
            let conn = match listen.get_request() {
                Ok(c) => c,
                Err(cm::Error::TimedOut) => continue,
                Err(e) => {
                    if verbose {
                        eprintln!("nvmf-target: get_request: {e:?}");
                    }
                    continue;
                }
            };
            let target = target.clone();
            let clock = clock.clone();
            s.spawn(move || {
                match serve_connection(&target, conn, &clock, staging, stats, verbose) {
                    Ok(()) => {}
                    Err(e) => {
                        stats.failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("nvmf-target: {e}");
                    }
                }
            });
        }
    });
}

/// Checks one connection request, accepts or rejects it, and serves the queue until the host
/// disconnects, the queue is closed (Disconnect, a fatal capsule) or its controller fails.
pub fn serve_connection<D: Device>(
    target: &Arc<Target>,
    conn: CmId<D>,
    clock: &Clock,
    staging: usize,
    stats: &ListenerStats,
    verbose: bool,
) -> Result<(), String> {
    let log: Option<nvmf_rdma_target::Log> = if verbose {
        Some(|a| eprintln!("nvmf-target: {a}"))
    } else {
        None
    };
    let param = conn.event().map(|ev| ev.param).unwrap_or_default();
    let mut q = match admit(target, &conn, &param, staging, stats, log) {
        Ok(Some(q)) => q,
        Ok(None) => {
            conn.destroy_ep();
            return Ok(());
        }
        Err(e) => {
            conn.destroy_ep();
            return Err(e);
        }
    };
    let r = loop {
        match q.poll(now_ms(clock), stats) {
            Step::Busy => {}
            Step::Idle => nic_hal::Platform::relax(clock),
            Step::Done(r) => break r,
        }
    };
    q.finish(&conn);
    conn.destroy_ep();
    stats.closed.fetch_add(1, Ordering::Relaxed);
    r
}
