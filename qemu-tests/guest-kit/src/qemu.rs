//! The QEMU command line for a test guest, and the guest-physical address rule of its RAM file.

use std::path::PathBuf;
use std::process::Command;

/// q35 in QEMU 7.2 puts all RAM below 4 GiB when there is less than this much of it (the
/// PCI hole starts at 2.75 GiB); otherwise 2 GiB stay low and the rest starts at 4 GiB.
pub const Q35_LOWMEM_LIMIT: u64 = 0xb000_0000;
const GIB: u64 = 1 << 30;

/// The offset in the guest-RAM backing file of guest-physical address `gpa`, for a q35
/// machine with `ram` bytes of RAM (QEMU 7.2); `None` when `gpa` is not RAM (the PCI hole,
/// or beyond the end).
pub fn ram_file_offset(gpa: u64, ram: u64) -> Option<u64> {
    let low = if ram < Q35_LOWMEM_LIMIT { ram } else { 2 * GIB };
    if gpa < low {
        return Some(gpa);
    }
    let high = ram - low;
    (gpa >= 4 * GIB && gpa - 4 * GIB < high).then(|| gpa - 4 * GIB + low)
}

/// A file-backed `ivshmem-plain` PCI function (its BAR2 is the file).
#[derive(Clone, Debug)]
pub struct Ivshmem {
    /// The shared file (`/dev/shm/...`).
    pub path: PathBuf,
    /// Its size in bytes (a power of two).
    pub size: u64,
}

/// An `ivshmem-doorbell` PCI function: its shared memory (BAR2) and its MSI-X vectors'
/// eventfds come from an ivshmem server listening on a UNIX socket (`nic-emud
/// --ivshmem-server`), which must be listening before QEMU starts. BAR1 holds the MSI-X
/// table.
#[derive(Clone, Debug)]
pub struct IvshmemDoorbell {
    /// The server's socket.
    pub socket: PathBuf,
    /// MSI-X vectors (QEMU's `vectors=`; the server's count).
    pub vectors: u16,
}

/// Everything [`command`](Qemu::command) puts on the QEMU command line.
///
/// Defaults: TCG, 1 vCPU, 512 MiB, q35, no vIOMMU, no NIC (`-nic none`), no display, serial
/// to a file, `-no-reboot`; the whole run wrapped in `timeout`.
#[derive(Clone, Debug)]
pub struct Qemu {
    /// The kernel (`vmlinux` with a PVH note, or a bzImage).
    pub kernel: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
    /// The kernel command line (`console=ttyS0 panic=-1` are always added first).
    pub append: String,
    /// Guest RAM in MiB.
    pub ram_mib: u64,
    /// vCPUs.
    pub smp: u32,
    /// Guest RAM in a shared file at this path (`memory-backend-file,share=on`) so another
    /// process can read guest-physical memory ([`ram_file_offset`]).
    pub ram_file: Option<PathBuf>,
    /// `-device intel-iommu` (before the other devices) for VFIO in the guest; the guest then
    /// needs `intel_iommu=on` on its command line (added by [`command`](Qemu::command), with
    /// `no_timer_check`: under TCG on a busy host the kernel's early timer check through the
    /// remapped IO-APIC can fail, which panics the guest).
    pub intel_iommu: bool,
    /// ivshmem-plain functions, in this order on the bus.
    pub ivshmem: Vec<Ivshmem>,
    /// ivshmem-doorbell functions, after the ivshmem-plain ones.
    pub ivshmem_doorbell: Vec<IvshmemDoorbell>,
    /// The guest's serial console goes to this file.
    pub serial_log: PathBuf,
    /// Seconds before `timeout` kills QEMU.
    pub timeout_secs: u32,
    /// More arguments, appended as given.
    pub extra: Vec<String>,
}

impl Qemu {
    /// A guest with the defaults above.
    pub fn new(kernel: PathBuf, initrd: PathBuf, serial_log: PathBuf) -> Qemu {
        Qemu {
            kernel,
            initrd,
            append: String::new(),
            ram_mib: 512,
            smp: 1,
            ram_file: None,
            intel_iommu: false,
            ivshmem: Vec::new(),
            ivshmem_doorbell: Vec::new(),
            serial_log,
            timeout_secs: 120,
            extra: Vec::new(),
        }
    }

    /// The argument list after `timeout N qemu-system-x86_64`.
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |v: &[&str]| a.extend(v.iter().map(|s| s.to_string()));
        push(&["-accel", "tcg", "-nodefaults", "-no-user-config"]);
        push(&[
            "-smp",
            &self.smp.to_string(),
            "-m",
            &format!("{}M", self.ram_mib),
        ]);
        match &self.ram_file {
            Some(p) => {
                push(&["-machine", "q35,memory-backend=ram"]);
                push(&[
                    "-object",
                    &format!(
                        "memory-backend-file,id=ram,size={}M,mem-path={},share=on",
                        self.ram_mib,
                        p.display()
                    ),
                ]);
            }
            None => push(&["-machine", "q35"]),
        }
        if self.intel_iommu {
            push(&["-device", "intel-iommu"]);
        }
        for (i, s) in self.ivshmem.iter().enumerate() {
            push(&[
                "-object",
                &format!(
                    "memory-backend-file,id=ivshmem{i},size={},mem-path={},share=on",
                    s.size,
                    s.path.display()
                ),
            ]);
            push(&["-device", &format!("ivshmem-plain,memdev=ivshmem{i}")]);
        }
        for (i, d) in self.ivshmem_doorbell.iter().enumerate() {
            push(&[
                "-chardev",
                &format!("socket,path={},id=ivshsock{i}", d.socket.display()),
            ]);
            push(&[
                "-device",
                &format!("ivshmem-doorbell,chardev=ivshsock{i},vectors={}", d.vectors),
            ]);
        }
        push(&["-nic", "none", "-display", "none", "-no-reboot"]);
        push(&["-serial", &format!("file:{}", self.serial_log.display())]);
        push(&["-kernel", &self.kernel.display().to_string()]);
        push(&["-initrd", &self.initrd.display().to_string()]);
        let mut append = String::from("console=ttyS0 panic=-1");
        if self.intel_iommu {
            // With interrupt remapping on, the kernel panics ("timer doesn't work through
            // Interrupt-remapped IO-APIC") when its early timer check misses under a loaded
            // TCG host; skip the check.
            append.push_str(" intel_iommu=on no_timer_check");
        }
        if !self.append.is_empty() {
            append.push(' ');
            append.push_str(&self.append);
        }
        push(&["-append", &append]);
        a.extend(self.extra.iter().cloned());
        a
    }

    /// `timeout -k 5 -s KILL N qemu-system-x86_64 ARGS...`, ready to spawn. A SIGTERM sent to
    /// `timeout` reaches QEMU, and `-k` follows it with SIGKILL five seconds later, so whoever
    /// stops the guest that way can wait for `timeout` to exit and know QEMU is gone.
    pub fn command(&self) -> Command {
        let mut c = Command::new("timeout");
        c.args(["-k", "5"])
            .arg("-s")
            .arg("KILL")
            .arg(self.timeout_secs.to_string())
            .arg("qemu-system-x86_64")
            .args(self.args());
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpa_rule_of_q35() {
        let m = 1 << 20;
        // 512 MiB: everything low, offset = GPA
        assert_eq!(ram_file_offset(0x1ff9e000, 512 * m), Some(0x1ff9e000));
        assert_eq!(ram_file_offset(512 * m, 512 * m), None);
        // 3 GiB: 2 GiB low, 1 GiB at 4 GiB (the probe saw GPA 0x10200a000 at 0x8200a000)
        assert_eq!(ram_file_offset(0x1_0200_a000, 3 << 30), Some(0x8200_a000));
        assert_eq!(ram_file_offset(0x9000_0000, 3 << 30), None); // the PCI hole
        assert_eq!(ram_file_offset(0x1_4000_0000, 3 << 30), None); // past the end
        // just under the limit stays low
        assert_eq!(
            ram_file_offset(Q35_LOWMEM_LIMIT - 8192, Q35_LOWMEM_LIMIT - 4096),
            Some(Q35_LOWMEM_LIMIT - 8192)
        );
        // at the limit, only 2 GiB stay low
        assert_eq!(ram_file_offset(0xa000_0000, Q35_LOWMEM_LIMIT), None);
    }

    #[test]
    fn command_line_has_the_safety_and_vfio_parts() {
        let mut q = Qemu::new("vmlinux".into(), "i.cpio".into(), "/tmp/s.log".into());
        q.ram_file = Some("/dev/shm/ram-1".into());
        q.intel_iommu = true;
        q.ivshmem.push(Ivshmem {
            path: "/dev/shm/bar-1".into(),
            size: 32 << 20,
        });
        q.append = "hugepages=8".into();
        let a = q.args().join(" ");
        assert!(a.contains("-accel tcg"));
        assert!(a.contains("-nic none"));
        assert!(a.contains("q35,memory-backend=ram"));
        assert!(a.contains("mem-path=/dev/shm/ram-1,share=on"));
        let iommu = a.find("intel-iommu").unwrap();
        let ivsh = a.find("ivshmem-plain").unwrap();
        assert!(iommu < ivsh, "the vIOMMU must come before the device");
        assert!(a.contains("size=33554432,mem-path=/dev/shm/bar-1"));
        q.ivshmem_doorbell.push(IvshmemDoorbell {
            socket: "/tmp/nic.sock".into(),
            vectors: 8,
        });
        let d = q.args().join(" ");
        assert!(d.contains(
            "-chardev socket,path=/tmp/nic.sock,id=ivshsock0 \
             -device ivshmem-doorbell,chardev=ivshsock0,vectors=8"
        ));
        assert!(
            a.ends_with("-append console=ttyS0 panic=-1 intel_iommu=on no_timer_check hugepages=8")
        );
        let c = q.command();
        assert_eq!(c.get_program(), "timeout");
        // A SIGTERM to `timeout` is followed by SIGKILL to QEMU (guests' drops rely on it).
        let head: Vec<_> = c.get_args().take(4).collect();
        assert_eq!(head, ["-k", "5", "-s", "KILL"]);
    }
}
