//! Builds small Linux guests for QEMU tests from Debian packages, with nothing installed on
//! the host but `apt-get`, `dpkg` and QEMU.
//!
//! - [`Kit`]: a cache directory (under the workspace's `target/`) holding downloaded `.deb`s
//!   (`apt-get download`, reused when present), their extracted trees (`dpkg -x`), the
//!   kernel's `modules.dep` (made with busybox's `depmod`: the kernel package ships none)
//!   and the PVH `vmlinux` taken out of the bzImage ([`vmlinux::extract`], pure Rust). A
//!   file lock serializes builders across threads and processes.
//! - [`Kernel`]: the image, the modules tree and [`ModulesDep`] resolution.
//! - [`Initramfs`]: a newc archive ([`cpio`]) with busybox and its applets, `/dev` nodes, the
//!   selected modules with their transitive dependencies (in load order, listed in
//!   `/mods/order`), an `/init` script, and any extra files, host trees or Debian package
//!   contents ([`Initramfs::package`]: for example rdma-core's programs and their shared
//!   libraries, with `libc6` for the loader).
//! - [`Qemu`]: the command line (TCG, q35, `-nic none`, optional shared-file RAM,
//!   `intel-iommu`, `ivshmem-plain` functions, serial to a file, wrapped in `timeout`), and
//!   [`ram_file_offset`], the q35 rule from guest-physical address to RAM-file offset.
//!
//! ```no_run
//! use guest_kit::{Initramfs, Kit, Qemu};
//!
//! let kit = Kit::new(Kit::default_cache_dir())?;
//! let kernel = kit.kernel()?; // linux-image-amd64's current image, depmod, vmlinux
//! let mut init = Initramfs::new();
//! init.busybox(&kit.busybox()?)?;
//! init.modules(&kernel, &["vfio-pci", "vfio_iommu_type1"])?;
//! init.init_script("echo hello; poweroff -f");
//! init.write("/tmp/guest.cpio")?;
//! let q = Qemu::new(kernel.vmlinux.clone(), "/tmp/guest.cpio".into(), "/tmp/serial.log".into());
//! let status = q.command().status()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cpio;
pub mod modules;
pub mod qemu;
pub mod vmlinux;

use std::fmt;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use modules::ModulesDep;
pub use qemu::{Ivshmem, IvshmemDoorbell, Qemu, ram_file_offset};

/// The kernel metapackage whose dependency names the current image.
pub const KERNEL_META: &str = "linux-image-amd64";
/// The statically linked busybox package.
pub const BUSYBOX: &str = "busybox-static";

/// What went wrong, with the command or file involved.
#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

fn err(what: impl Into<String>) -> Error {
    Error(what.into())
}

fn io_err(what: &str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let s = format!("{what} {}", path.display());
    move |e| Error(format!("{s}: {e}"))
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| err(format!("cannot run {cmd:?}: {e}")))?;
    if !out.status.success() {
        return Err(err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// An exclusive `flock` on a file, released on drop.
pub struct CacheLock(fs::File);

impl CacheLock {
    /// Blocks until the lock on `path` is held.
    pub fn acquire(path: &Path) -> Result<CacheLock> {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(io_err("cannot open lock file", path))?;
        // SAFETY: flock on an fd we own; no memory is involved.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
        if r != 0 {
            return Err(err(format!(
                "flock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            )));
        }
        Ok(CacheLock(f))
    }
}

impl Drop for CacheLock {
    fn drop(&mut self) {
        // SAFETY: unlock of an fd we own (closing it would release it as well).
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The package cache: `debs/` (downloads), `root/<package>/` (extracted trees), kernel
/// artefacts. Every method is safe to call from several threads and processes at once
/// (a file lock serializes them) and reuses what is already there.
#[derive(Clone, Debug)]
pub struct Kit {
    dir: PathBuf,
}

impl Kit {
    /// A cache in `dir` (created if missing).
    pub fn new(dir: impl Into<PathBuf>) -> Result<Kit> {
        let dir = dir.into();
        fs::create_dir_all(dir.join("debs")).map_err(io_err("cannot create", &dir))?;
        fs::create_dir_all(dir.join("root")).map_err(io_err("cannot create", &dir))?;
        Ok(Kit { dir })
    }

    /// `<workspace>/target/guest-cache`: the workspace's own `target/`, whatever
    /// `CARGO_TARGET_DIR` says, so downloads are shared by every build of the tree.
    /// `GUEST_KIT_CACHE` overrides it.
    pub fn default_cache_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("GUEST_KIT_CACHE") {
            return d.into();
        }
        // this crate is <workspace>/qemu-tests/guest-kit
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        match manifest.parent().and_then(Path::parent) {
            Some(ws) => ws.join("target/guest-cache"),
            None => manifest.join("target/guest-cache"),
        }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Holds the cache lock (for callers that put their own artefacts in the cache).
    pub fn lock(&self) -> Result<CacheLock> {
        CacheLock::acquire(&self.dir.join(".lock"))
    }

    fn cached_deb(&self, package: &str) -> Option<PathBuf> {
        let prefix = format!("{package}_");
        let rd = fs::read_dir(self.dir.join("debs")).ok()?;
        let mut found: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
            })
            .collect();
        found.sort();
        found.pop()
    }

    /// The `.deb` of each package, downloading those not in the cache with
    /// `apt-get download` (after an `apt-get update` if the first try fails: a fresh
    /// machine has no package lists).
    pub fn fetch(&self, packages: &[&str]) -> Result<Vec<PathBuf>> {
        let _l = self.lock()?;
        self.fetch_locked(packages)
    }

    fn fetch_locked(&self, packages: &[&str]) -> Result<Vec<PathBuf>> {
        let missing: Vec<&str> = packages
            .iter()
            .copied()
            .filter(|p| self.cached_deb(p).is_none())
            .collect();
        if !missing.is_empty() {
            let debs = self.dir.join("debs");
            let download = || {
                run(Command::new("apt-get")
                    .arg("download")
                    .args(&missing)
                    .current_dir(&debs))
            };
            if download().is_err() {
                run(Command::new("apt-get").arg("update").arg("-q"))?;
                download()?;
            }
        }
        packages
            .iter()
            .map(|p| {
                self.cached_deb(p)
                    .ok_or_else(|| err(format!("apt-get download gave no .deb for {p}")))
            })
            .collect()
    }

    /// The tree of `package` extracted with `dpkg -x` (fetched first if needed).
    pub fn extract(&self, package: &str) -> Result<PathBuf> {
        let _l = self.lock()?;
        self.extract_locked(package)
    }

    fn extract_locked(&self, package: &str) -> Result<PathBuf> {
        let root = self.dir.join("root").join(package);
        if root.join(".done").exists() {
            return Ok(root);
        }
        let deb = self.fetch_locked(&[package])?.remove(0);
        if root.exists() {
            fs::remove_dir_all(&root).map_err(io_err("cannot clear", &root))?;
        }
        fs::create_dir_all(&root).map_err(io_err("cannot create", &root))?;
        run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
        fs::write(root.join(".done"), deb.display().to_string())
            .map_err(io_err("cannot write", &root))?;
        Ok(root)
    }

    /// Extracts several packages; their trees, in order.
    pub fn extract_all(&self, packages: &[&str]) -> Result<Vec<PathBuf>> {
        let _l = self.lock()?;
        self.fetch_locked(packages)?;
        packages.iter().map(|p| self.extract_locked(p)).collect()
    }

    /// The busybox binary (from busybox-static).
    pub fn busybox(&self) -> Result<PathBuf> {
        let p = self.extract(BUSYBOX)?.join("bin/busybox");
        if !p.exists() {
            return Err(err(format!("{} is missing", p.display())));
        }
        Ok(p)
    }

    /// The image package [`KERNEL_META`] depends on (`linux-image-6.1.0-57-amd64`), from the
    /// cache if one is there, else from `apt-cache`.
    pub fn kernel_package(&self) -> Result<String> {
        if let Ok(rd) = fs::read_dir(self.dir.join("debs")) {
            let mut names: Vec<String> = rd
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .filter_map(|n| n.split('_').next().map(str::to_string))
                .filter(|n| n.starts_with("linux-image-") && n != KERNEL_META)
                .collect();
            names.sort();
            if let Some(n) = names.pop() {
                return Ok(n);
            }
        }
        let show = || run(Command::new("apt-cache").args(["show", KERNEL_META]));
        let text = match show() {
            Ok(t) if t.contains("Depends:") => t,
            _ => {
                run(Command::new("apt-get").arg("update").arg("-q"))?;
                show()?
            }
        };
        text.lines()
            .filter_map(|l| l.strip_prefix("Depends:"))
            .flat_map(|d| d.split(','))
            .map(|d| d.trim().split(' ').next().unwrap_or("").to_string())
            .find(|d| d.starts_with("linux-image-"))
            .ok_or_else(|| {
                err(format!(
                    "no linux-image dependency in `apt-cache show {KERNEL_META}`"
                ))
            })
    }

    /// The kernel: fetched, extracted, `modules.dep` made, `vmlinux` extracted (each step
    /// once; later calls reuse the results).
    pub fn kernel(&self) -> Result<Kernel> {
        let package = self.kernel_package()?;
        let bb = self.busybox()?;
        let _l = self.lock()?;
        let root = self.extract_locked(&package)?;
        let version = package
            .strip_prefix("linux-image-")
            .ok_or_else(|| err(format!("unexpected kernel package name {package}")))?
            .to_string();
        let modules_dir = root.join("lib/modules").join(&version);
        if !modules_dir.exists() {
            return Err(err(format!(
                "no modules directory for {version} in {}",
                root.display()
            )));
        }
        let dep = modules_dir.join("modules.dep");
        if !dep.exists() {
            // busybox depmod -b BASE VERSION looks in BASE/lib/modules/VERSION
            let base = root.clone();
            run(Command::new(&bb)
                .arg("depmod")
                .arg("-b")
                .arg(base)
                .arg(&version))?;
            if !dep.exists() {
                return Err(err(format!("depmod made no {}", dep.display())));
            }
        }
        let bzimage = root.join("boot").join(format!("vmlinuz-{version}"));
        let vmlinux = self.dir.join(format!("vmlinux-{version}"));
        if !vmlinux.exists() {
            let bz = fs::read(&bzimage).map_err(io_err("cannot read", &bzimage))?;
            let elf =
                vmlinux::extract(&bz).map_err(|e| err(format!("{}: {e}", bzimage.display())))?;
            let tmp = vmlinux.with_extension("tmp");
            fs::write(&tmp, elf).map_err(io_err("cannot write", &tmp))?;
            fs::rename(&tmp, &vmlinux).map_err(io_err("cannot rename", &tmp))?;
        }
        let text = fs::read_to_string(&dep).map_err(io_err("cannot read", &dep))?;
        let deps = ModulesDep::parse(&text).map_err(err)?;
        Ok(Kernel {
            version,
            package,
            bzimage,
            vmlinux,
            modules_dir,
            deps,
        })
    }
}

/// A Debian kernel ready to boot.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// `6.1.0-57-amd64`.
    pub version: String,
    /// `linux-image-6.1.0-57-amd64`.
    pub package: String,
    /// The bzImage (`boot/vmlinuz-*`).
    pub bzimage: PathBuf,
    /// The ELF kernel with its PVH note, for `-kernel` (faster under TCG).
    pub vmlinux: PathBuf,
    /// `.../lib/modules/<version>`.
    pub modules_dir: PathBuf,
    /// Its modules.dep.
    pub deps: ModulesDep,
}

impl Kernel {
    /// The module files for `names` with their dependencies, in load order.
    pub fn resolve(&self, names: &[&str]) -> Result<Vec<PathBuf>> {
        Ok(self
            .deps
            .resolve(names)
            .map_err(err)?
            .into_iter()
            .map(|p| self.modules_dir.join(p))
            .collect())
    }
}

/// An initramfs under construction (see the crate docs for what goes in).
///
/// The `/init` script written by [`init_script`](Initramfs::init_script) starts with a
/// prologue that mounts proc, sysfs and devtmpfs and loads `/mods/order` with `insmod`; the
/// caller's body follows, and `poweroff -f` ends it (with `panic=-1 -no-reboot`, QEMU exits).
#[derive(Clone, Debug, Default)]
pub struct Initramfs {
    archive: cpio::Archive,
    mods: Vec<String>,
}

/// What the `/init` prologue does before the caller's body.
pub const INIT_PROLOGUE: &str = "#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
if [ -f /mods/order ]; then
  for m in $(cat /mods/order); do
    insmod /mods/$m || echo \"guest-kit: insmod $m failed\"
  done
fi
";

impl Initramfs {
    /// An archive with `/dev/console`, `/dev/null` and the mount points.
    pub fn new() -> Initramfs {
        let mut a = cpio::Archive::new();
        for d in ["proc", "sys", "dev", "tmp", "mods", "etc", "root"] {
            a.dir(d);
        }
        a.char_dev("dev/console", 0o600, 5, 1);
        a.char_dev("dev/null", 0o666, 1, 3);
        Initramfs {
            archive: a,
            mods: Vec::new(),
        }
    }

    /// The archive so far.
    pub fn archive(&self) -> &cpio::Archive {
        &self.archive
    }

    /// Adds busybox as `/bin/busybox` and a symlink for each of its applets (from
    /// `busybox --list-full`, which this runs: the static binary runs on the host).
    pub fn busybox(&mut self, busybox: &Path) -> Result<&mut Self> {
        let data = fs::read(busybox).map_err(io_err("cannot read", busybox))?;
        self.archive.file("bin/busybox", 0o755, data);
        let list = run(Command::new(busybox).arg("--list-full"))?;
        for applet in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if applet == "bin/busybox" || self.archive.contains(applet) {
                continue;
            }
            self.archive.symlink(applet, "/bin/busybox");
        }
        Ok(self)
    }

    /// Adds modules `names` with their dependencies to `/mods/` and appends them to
    /// `/mods/order`, which the init prologue loads in order.
    pub fn modules(&mut self, kernel: &Kernel, names: &[&str]) -> Result<&mut Self> {
        for p in kernel.resolve(names)? {
            let file = p
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| err(format!("bad module path {}", p.display())))?
                .to_string();
            if self.mods.contains(&file) {
                continue;
            }
            let data = fs::read(&p).map_err(io_err("cannot read", &p))?;
            self.archive.file(&format!("mods/{file}"), 0o644, data);
            self.mods.push(file);
        }
        let order = self.mods.join("\n") + "\n";
        self.archive.file("mods/order", 0o644, order.into_bytes());
        Ok(self)
    }

    /// Adds the host file `src` as `dst` (mode taken from `src`).
    pub fn file(&mut self, src: &Path, dst: &str) -> Result<&mut Self> {
        let data = fs::read(src).map_err(io_err("cannot read", src))?;
        let perm = fs::metadata(src)
            .map_err(io_err("cannot stat", src))?
            .permissions()
            .mode()
            & 0o7777;
        self.archive.file(dst, perm, data);
        Ok(self)
    }

    /// Adds `data` as `dst` with permissions `perm`.
    pub fn bytes(&mut self, dst: &str, perm: u32, data: Vec<u8>) -> &mut Self {
        self.archive.file(dst, perm, data);
        self
    }

    /// Adds the tree under host directory `src` at `dst` (files, directories, symlinks kept
    /// as symlinks), for example an extracted package's `usr/lib/x86_64-linux-gnu`.
    pub fn tree(&mut self, src: &Path, dst: &str) -> Result<&mut Self> {
        let rd = fs::read_dir(src).map_err(io_err("cannot read directory", src))?;
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        self.archive.dir(dst);
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let to = format!("{}/{name}", dst.trim_end_matches('/'));
            let meta = fs::symlink_metadata(&path).map_err(io_err("cannot stat", &path))?;
            if meta.file_type().is_symlink() {
                let t = fs::read_link(&path).map_err(io_err("cannot read link", &path))?;
                self.archive.symlink(&to, &t.to_string_lossy());
            } else if meta.is_dir() {
                self.tree(&path, &to)?;
            } else if meta.is_file() {
                self.file(&path, &to)?;
            }
        }
        Ok(self)
    }

    /// Adds the files of Debian package `package` (fetched and extracted by `kit`) at the
    /// same paths in the guest: the given `paths` inside the package (files or directories,
    /// such as `usr/lib/x86_64-linux-gnu` or `usr/bin/rping`), or, with `paths` empty,
    /// everything but `usr/share` (documentation, manuals). For a dynamically linked program
    /// add its libraries' packages too, and `libc6` (for the loader,
    /// `lib64/ld-linux-x86-64.so.2`, and libc). A path the package does not have is an error.
    pub fn package(&mut self, kit: &Kit, package: &str, paths: &[&str]) -> Result<&mut Self> {
        let root = kit.extract(package)?;
        let mut wanted: Vec<String> = paths
            .iter()
            .map(|p| p.trim_matches('/').to_string())
            .collect();
        if wanted.is_empty() {
            let rd = fs::read_dir(&root).map_err(io_err("cannot read directory", &root))?;
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name == ".done" {
                    continue;
                }
                if name == "usr" {
                    let usr = root.join("usr");
                    let rd = fs::read_dir(&usr).map_err(io_err("cannot read directory", &usr))?;
                    for u in rd.flatten() {
                        let n = u.file_name().to_string_lossy().into_owned();
                        if n != "share" {
                            wanted.push(format!("usr/{n}"));
                        }
                    }
                } else {
                    wanted.push(name);
                }
            }
            wanted.sort();
        }
        for w in wanted {
            let src = root.join(&w);
            let meta = fs::symlink_metadata(&src)
                .map_err(|e| err(format!("package {package} has no {w}: {e}")))?;
            if meta.file_type().is_symlink() {
                let t = fs::read_link(&src).map_err(io_err("cannot read link", &src))?;
                self.archive.symlink(&w, &t.to_string_lossy());
            } else if meta.is_dir() {
                self.tree(&src, &w)?;
            } else {
                self.file(&src, &w)?;
            }
        }
        Ok(self)
    }

    /// Writes `/init`: [`INIT_PROLOGUE`], then `body`, then `poweroff -f`.
    pub fn init_script(&mut self, body: &str) -> &mut Self {
        let script = format!("{INIT_PROLOGUE}{body}\npoweroff -f\n");
        self.archive.file("init", 0o755, script.into_bytes());
        self
    }

    /// Writes the archive (uncompressed newc; the kernel takes it as it is) to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        fs::write(&tmp, self.archive.to_bytes()).map_err(io_err("cannot write", &tmp))?;
        fs::rename(&tmp, path).map_err(io_err("cannot rename", &tmp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initramfs_layout() {
        let mut i = Initramfs::new();
        i.init_script("echo hi");
        i.bytes("bin/tool", 0o755, vec![1, 2]);
        let p = cpio::parse(&i.archive().to_bytes()).unwrap();
        let get = |n: &str| p.iter().find(|e| e.name == n).unwrap();
        assert_eq!(get("dev/console").rdev, (5, 1));
        assert_eq!(get("dev/null").rdev, (1, 3));
        let init = String::from_utf8(get("init").data.clone()).unwrap();
        assert!(init.starts_with("#!/bin/sh\n"));
        assert!(init.contains("mount -t devtmpfs"));
        assert!(init.contains("echo hi\npoweroff -f\n"));
        assert_eq!(get("init").mode & 0o777, 0o755);
        assert_eq!(get("bin/tool").data, vec![1, 2]);
    }

    #[test]
    fn tree_keeps_symlinks_and_modes() {
        let d = std::env::temp_dir().join(format!("guest-kit-tree-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(d.join("lib/sub")).unwrap();
        fs::write(d.join("lib/libx.so.1.2"), b"elf").unwrap();
        fs::set_permissions(d.join("lib/libx.so.1.2"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("libx.so.1.2", d.join("lib/libx.so.1")).unwrap();
        fs::write(d.join("lib/sub/a.conf"), b"conf").unwrap();
        let mut i = Initramfs::new();
        i.tree(&d, "/usr").unwrap();
        let p = cpio::parse(&i.archive().to_bytes()).unwrap();
        let get = |n: &str| p.iter().find(|e| e.name == n).unwrap();
        assert_eq!(get("usr/lib/libx.so.1").data, b"libx.so.1.2");
        assert_eq!(get("usr/lib/libx.so.1").mode & cpio::S_IFLNK, cpio::S_IFLNK);
        assert_eq!(get("usr/lib/libx.so.1.2").mode, cpio::S_IFREG | 0o755);
        assert_eq!(get("usr/lib/sub/a.conf").data, b"conf");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn missing_files_are_clear_errors() {
        let mut i = Initramfs::new();
        let e = i.file(Path::new("/nonexistent/x"), "x").unwrap_err();
        assert!(e.0.contains("/nonexistent/x"), "{e}");
    }
}
