//! Brings an emulated ConnectX-class NIC up through the mlx5 driver, makes one of each object,
//! tears everything down, and prints what happened: the command log in PRM order, the
//! capabilities the driver parsed, the time each phase took, and the device's live-object
//! counters at the end (all zero when nothing leaked).

use std::time::Instant;

use firmware_interface::{cmd_status, opcode};
use mlx5::{AddressPath, MkeyAccess, QpCreate, QpModify, Transition};
use nic_emulator::{Live, Profile};
use nic_hal::DmaBuf;
use nic_testbed::Testbed;

fn main() {
    if let Err(e) = run() {
        eprintln!("bringup-demo: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let tb = Testbed::new(Profile::default());
    let t0 = Instant::now();
    let dev = tb
        .probe(Default::default())
        .map_err(|e| format!("probe failed: {e:?} (errno {})", e.errno()))?;
    let t_probe = t0.elapsed();
    let (maj, min, sub) = dev.fw_version();
    let caps = dev.caps();
    println!("device up: firmware {maj}.{min}.{sub}, ISSI {}", dev.issi());
    println!(
        "caps: log_max_qp {} log_max_cq {} log_max_mkey {} log_max_pd {} max_wqe_sz_sq {} port {:?}",
        caps.log_max_qp,
        caps.log_max_cq,
        caps.log_max_mkey,
        caps.log_max_pd,
        caps.max_wqe_sz_sq,
        caps.port_type
    );
    let n_bringup = tb.device().command_log().len();

    let t1 = Instant::now();
    let e = |what: &str| {
        let what = what.to_string();
        move |err: mlx5::Error| format!("{what}: {err:?}")
    };
    let pd = dev.alloc_pd().map_err(e("alloc_pd"))?;
    let eqn = dev.driver_eqn().map_err(e("driver_eqn"))?;
    let cq = dev.create_cq(8, eqn).map_err(e("create_cq"))?;
    // Freed by hand below, only once the key is destroyed (an early return leaks it).
    let mem = std::mem::ManuallyDrop::new(
        DmaBuf::new(dev.dma(), 64 << 10, 4096).map_err(|x| format!("dma: {x:?}"))?,
    );
    let pages: Vec<u64> = (0..16).map(|i| mem.iova() + i * 4096).collect();
    // SAFETY: `mem` is freed only after `destroy_mkey` succeeded (never, on any error).
    let mr = unsafe { dev.create_mkey(pd, mem.iova(), 64 << 10, MkeyAccess::LOCAL_WRITE, &pages) }
        .map_err(e("create_mkey"))?;
    let mut qp = dev
        .create_qp(&QpCreate {
            pd,
            send_cqn: cq.cqn(),
            recv_cqn: cq.cqn(),
            ..QpCreate::default()
        })
        .map_err(e("create_qp"))?;
    // A loopback path: our own GID (127.0.0.1, IPv4-mapped) and MAC.
    let mac = dev.mac().map_err(e("mac"))?;
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
    dev.set_roce_gid(0, gid, mac).map_err(e("set_roce_gid"))?;
    let attrs = QpModify {
        remote_qpn: qp.qpn(),
        path: AddressPath {
            rgid: gid,
            rmac: mac,
            grh: true,
            ..AddressPath::default()
        },
        ..QpModify::default()
    };
    for t in [
        Transition::Rst2Init,
        Transition::Init2Rtr,
        Transition::Rtr2Rts,
    ] {
        dev.modify_qp(&mut qp, t, &attrs).map_err(e("modify_qp"))?;
    }
    let state = dev.query_qp(&qp).map_err(e("query_qp"))?.state;
    println!(
        "objects: pd {pd} cq {:#x} mkey {:#x} qp {:#x} in {state:?}",
        cq.cqn(),
        mr.key(),
        qp.qpn()
    );
    dev.destroy_qp(qp).map_err(e("destroy_qp"))?;
    dev.destroy_mkey(mr).map_err(e("destroy_mkey"))?;
    dev.destroy_cq(cq).map_err(e("destroy_cq"))?;
    dev.dealloc_pd(pd).map_err(e("dealloc_pd"))?;
    drop(std::mem::ManuallyDrop::into_inner(mem));
    let t_objects = t1.elapsed();

    let t2 = Instant::now();
    dev.shutdown().map_err(e("shutdown"))?;
    let t_down = t2.elapsed();

    let d = tb.device();
    println!("\ncommand log ({} commands):", d.command_log().len());
    for (i, r) in d.command_log().iter().enumerate() {
        if i == n_bringup {
            println!("  -- bring-up done; objects and teardown --");
        }
        println!(
            "  {:>3} slot {:>2} {:<28} op_mod {:#06x} -> {}",
            i,
            r.slot,
            opcode::name(r.opcode).unwrap_or("?"),
            r.op_mod,
            if r.delivery != 0 {
                format!("delivery error {:#x}", r.delivery)
            } else {
                cmd_status::name(r.status).unwrap_or("?").to_string()
            }
        );
    }
    let live = d.live();
    println!(
        "\nbring-up {:.2?}, objects {:.2?}, teardown {:.2?}",
        t_probe, t_objects, t_down
    );
    println!("live objects after teardown: {live:?}");
    println!(
        "driver DMA buffers still allocated: {}",
        tb.dma.live_buffers()
    );
    if live != Live::default() || tb.dma.live_buffers() != 0 || !d.errors().is_empty() {
        return Err(format!("leak or device error: {:?}", d.errors()));
    }
    println!("ok: everything released");
    Ok(())
}
