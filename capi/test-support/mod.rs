//! Shared by the capi crates' integration tests (included with `#[path]`): rdma-core's
//! Debian `-dev` headers (downloaded at test time into the workspace's `target/`), the
//! libraries this workspace built, `cc` and `readelf`.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Debian packages whose headers the tests compile against.
pub const DEV_PACKAGES: [&str; 2] = ["libibverbs-dev", "librdmacm-dev"];

/// `-I` directories holding `infiniband/verbs.h` and `rdma/rdma_cma.h` of rdma-core 44
/// (Debian 12's `libibverbs-dev` and `librdmacm-dev`, fetched with `apt-get download` into
/// `target/guest-cache` on first use and unpacked with `dpkg -x`).
pub fn include_dirs() -> Vec<PathBuf> {
    let kit = guest_kit::Kit::new(guest_kit::Kit::default_cache_dir()).expect("package cache");
    let roots = kit
        .extract_all(&DEV_PACKAGES)
        .expect("download and unpack libibverbs-dev / librdmacm-dev");
    let dirs: Vec<PathBuf> = roots.iter().map(|r| r.join("usr/include")).collect();
    assert!(dirs[0].join("infiniband/verbs.h").exists(), "{dirs:?}");
    assert!(dirs[1].join("rdma/rdma_cma.h").exists(), "{dirs:?}");
    dirs
}

/// The directory cargo put this build's libraries in: `target/<profile>/deps`, where the
/// test binary runs from. (`cargo test` builds the capi libraries there, as the rlib's
/// companions, but copies them up to `target/<profile>` only on `cargo build`.)
pub fn build_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().expect("target/<profile>/deps").to_path_buf()
}

/// The built `lib<name>.so`.
pub fn built(name: &str) -> PathBuf {
    let p = build_dir().join(format!("lib{name}.so"));
    assert!(p.exists(), "{} was not built", p.display());
    p
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capi-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Copies the built `lib<name>.so` into `dir` as `lib<name>.so` (for `-l<name>` at link
/// time) and `lib<name>.so.1` (its SONAME, what the loader looks for); the copy's path.
pub fn install(dir: &Path, name: &str) -> PathBuf {
    let built = built(name);
    std::fs::copy(&built, dir.join(format!("lib{name}.so"))).expect("copy library");
    let so1 = dir.join(format!("lib{name}.so.1"));
    std::fs::copy(&built, &so1).expect("copy library");
    so1
}

/// Runs `cmd`, panicking with its output unless it succeeds; its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Compiles the C program `src` to `out` against rdma-core's headers, with `extra` arguments
/// (libraries, `-L`).
pub fn cc(src: &Path, out: &Path, extra: &[&str]) {
    let mut cmd = Command::new("cc");
    cmd.args(["-std=gnu11", "-Wall", "-Werror", "-O1"]);
    for d in include_dirs() {
        cmd.arg("-I").arg(d);
    }
    cmd.arg("-o").arg(out).arg(src).args(extra);
    run(&mut cmd);
}

/// The SONAME in `so`'s dynamic section (`readelf -d`).
pub fn soname(so: &Path) -> Option<String> {
    let out = run(Command::new("readelf").arg("-d").arg(so));
    out.lines().find_map(|l| {
        let rest = l.split("Library soname: [").nth(1)?;
        Some(rest.trim_end().trim_end_matches(']').to_string())
    })
}

/// The defined dynamic symbols of `so` as `(version, name)`, from `readelf --dyn-syms -W`;
/// an unversioned export has version `"Base"`.
pub fn exports(so: &Path) -> BTreeSet<(String, String)> {
    let out = run(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(so));
    let mut set = BTreeSet::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        // Num: Value Size Type Bind Vis Ndx Name
        if f.len() < 8 || !f[0].ends_with(':') || f[6] == "UND" || f[6] == "Ndx" {
            continue;
        }
        if f[3] == "SECTION" || f[3] == "FILE" || f[4] == "LOCAL" {
            continue;
        }
        let name = f[7];
        let (n, v) = match name.split_once("@@") {
            Some((n, v)) => (n, v),
            None => match name.split_once('@') {
                Some((n, v)) => (n, v),
                None => (name, "Base"),
            },
        };
        set.insert((v.to_string(), n.to_string()));
    }
    set
}

/// `(version, name)` pairs from a list file: one `VERSION name` per line, `#` comments.
pub fn read_list(text: &str) -> BTreeSet<(String, String)> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (v, n) = l.split_once(' ').expect("VERSION name");
            (v.trim().to_string(), n.trim().to_string())
        })
        .collect()
}

/// Checks `so`'s SONAME and that its exports are exactly `expected`, each at its version.
pub fn check_exports(so: &Path, want_soname: &str, expected: &BTreeSet<(String, String)>) {
    assert_eq!(soname(so).as_deref(), Some(want_soname), "{}", so.display());
    let got = exports(so);
    let missing: Vec<_> = expected.difference(&got).collect();
    let extra: Vec<_> = got.difference(expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{}: exports differ\nmissing (or at another version): {missing:?}\nunexpected: {extra:?}",
        so.display()
    );
}

/// This project's own C headers (`capi/include`: `infiniband/verbs.h`, `rdma/rdma_cma.h`).
pub fn our_include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include")
}

/// Compiles the C program `src` to `out` against this project's own headers (not
/// rdma-core's), with `extra` arguments.
pub fn cc_ours(src: &Path, out: &Path, extra: &[&str]) {
    let mut cmd = Command::new("cc");
    cmd.args(["-std=gnu11", "-Wall", "-Werror", "-O1"]);
    cmd.arg("-I").arg(our_include_dir());
    cmd.arg("-o").arg(out).arg(src).args(extra);
    run(&mut cmd);
}

/// Builds the C test program `src` against rdma-core's headers, linked with the built
/// libraries `libs` (installed in a fresh scratch directory `tag`) and pthreads, runs it on
/// the default in-process NIC under a 120 s `timeout`, and asserts that it succeeds and that
/// every line of `want` is among its output lines; its stdout.
pub fn run_c_test(tag: &str, src: &Path, libs: &[&str], want: &[&str]) -> String {
    let dir = scratch(tag);
    let mut link = vec![format!("-L{}", dir.display())];
    for l in libs {
        install(&dir, l);
        link.push(format!("-l{l}"));
    }
    link.push("-lpthread".into());
    let exe = dir.join("test-program");
    let link: Vec<&str> = link.iter().map(String::as_str).collect();
    cc(src, &exe, &link);
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env_remove("RDMA_STACK_DEVICE");
    let out = run(&mut cmd);
    let lines: Vec<&str> = out.lines().collect();
    for w in want {
        assert!(lines.contains(w), "no line {w:?} in:\n{out}");
    }
    out
}
