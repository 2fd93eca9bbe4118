//! Builds and boots the smallest guest (busybox, `/init` prints the kernel version) and shows
//! its serial output: `cargo run -p guest-kit --example hello`.

use std::time::Instant;

use guest_kit::{Initramfs, Kit, Qemu};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let t = Instant::now();
    let kit = Kit::new(Kit::default_cache_dir())?;
    let kernel = kit.kernel()?;
    let mut init = Initramfs::new();
    init.busybox(&kit.busybox()?)?;
    init.modules(&kernel, &["vfio-pci", "vfio_iommu_type1"])?;
    init.init_script("echo \"hello from $(uname -r)\"; lsmod");
    let dir = std::env::temp_dir().join(format!("guest-kit-hello-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    init.write(dir.join("init.cpio"))?;
    println!("guest built in {:?}", t.elapsed());
    let mut q = Qemu::new(
        kernel.vmlinux.clone(),
        dir.join("init.cpio"),
        dir.join("serial.log"),
    );
    q.timeout_secs = 60;
    q.append = "quiet".into();
    let t = Instant::now();
    let status = q.command().status()?;
    println!("qemu {status} after {:?}", t.elapsed());
    print!("{}", std::fs::read_to_string(dir.join("serial.log"))?);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
