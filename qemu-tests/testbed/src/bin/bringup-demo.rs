//! Brings an emulated ConnectX-class NIC up through the mlx5 driver, makes one of each object,
//! tears everything down, and prints what happened: the command log in PRM order, the
//! capabilities the driver parsed, the time each phase took, and the device's live-object
//! counters at the end (all zero when nothing leaked).

use std::time::Instant;

use firmware_interface::{cmd_status, opcode};
use nic_emulator::{Live, Profile};
use nic_testbed::Testbed;
use verbs::rc::RcParams;
use verbs::{
    AccessFlags, AhAttr, Gid, MemoryRegion, Provider, QpCap, QpInitAttr, QpType, QueuePair,
};

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
        move |err: verbs::Error| format!("{what}: {err} ({err:?})")
    };
    let pd = Provider::alloc_pd(&dev).map_err(e("alloc_pd"))?;
    let cq = Provider::create_cq(&dev, 255, 0, None).map_err(e("create_cq"))?;
    let mem = Provider::alloc_buf(&dev, 64 << 10).map_err(e("alloc_buf"))?;
    let mr = dev
        .reg_mr(&pd, mem, AccessFlags::LOCAL_WRITE)
        .map_err(e("reg_mr"))?;
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let (mut qp, _) = Provider::create_qp(&dev, &pd, &init).map_err(e("create_qp"))?;
    // A loopback path: our own GID (127.0.0.1, IPv4-mapped) and MAC.
    let mac = dev.mac().map_err(|x| format!("mac: {x:?}"))?;
    let gid = Gid::from_ipv4([127, 0, 0, 1]);
    dev.set_roce_gid(0, gid.0, mac)
        .map_err(|x| format!("set_roce_gid: {x:?}"))?;
    let rc = RcParams {
        ah_attr: AhAttr {
            dgid: gid,
            dmac: mac,
            is_global: true,
            hop_limit: 64,
            port_num: 1,
            ..AhAttr::default()
        },
        dest_qp_num: qp.qp_num(),
        ..RcParams::default()
    };
    verbs::rc::connect(&dev, &mut qp, &rc).map_err(e("RESET -> INIT -> RTR -> RTS"))?;
    let state = Provider::query_qp(&dev, &qp)
        .map_err(e("query_qp"))?
        .qp_state;
    println!(
        "objects: pd {:#x} cq {:#x} mkey {:#x} qp {:#x} in {state:?}",
        pd.pdn(),
        cq.cqn(),
        mr.lkey(),
        qp.qp_num()
    );
    let destroyed = |what: &'static str| move |err: verbs::Error| format!("{what}: {err:?}");
    Provider::destroy_qp(&dev, qp).map_err(|x| destroyed("destroy_qp")(x.error))?;
    Provider::dereg_mr(&dev, mr).map_err(|x| destroyed("dereg_mr")(x.error))?;
    Provider::destroy_cq(&dev, cq).map_err(|x| destroyed("destroy_cq")(x.error))?;
    Provider::dealloc_pd(&dev, pd).map_err(|x| destroyed("dealloc_pd")(x.error))?;
    let t_objects = t1.elapsed();

    let t2 = Instant::now();
    dev.shutdown().map_err(|x| format!("shutdown: {x:?}"))?;
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
