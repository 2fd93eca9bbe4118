//! Runs the `rperf` binary as a user would, in the embedded mode: every test with few
//! iterations, as tables and as JSON, `-a`, `-D`, `--plot`, the default suite, and the command
//! lines that must be refused. (The two-process mode: `tests/two_process.rs`.)
//! Checks the output's shape and that data verified, never the figures' values (benchmarks
//! are benchmarks, not timed assertions).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

mod common;

const LAT_TESTS: [&str; 4] = ["send_lat", "write_lat", "read_lat", "atomic_lat"];
const BW_TESTS: [&str; 3] = ["send_bw", "write_bw", "read_bw"];

const LAT_HEADER: [&str; 9] = [
    "#bytes",
    "#iterations",
    "t_min[usec]",
    "t_max[usec]",
    "t_typical[usec]",
    "t_avg[usec]",
    "t_stdev[usec]",
    "99% percentile[usec]",
    "99.9% percentile[usec]",
];
const BW_HEADER: [&str; 5] = [
    "#bytes",
    "#iterations",
    "BW peak[MB/sec]",
    "BW average[MB/sec]",
    "MsgRate[Mpps]",
];
const LAT_KEYS: [&str; 7] = [
    "t_min_usec",
    "t_max_usec",
    "t_typical_usec",
    "t_avg_usec",
    "t_stdev_usec",
    "p99_usec",
    "p99_9_usec",
];
const BW_KEYS: [&str; 3] = ["bw_peak_mb_s", "bw_avg_mb_s", "msg_rate_mpps"];

fn rperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rperf"))
        .args(args)
        .output()
        .expect("run rperf")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `args`, expects success, returns stdout (stderr is in the panic message otherwise).
fn ok(args: &[&str]) -> (String, String) {
    let out = rperf(args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "rperf {args:?} exited {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status.code()
    );
    (stdout, stderr)
}

/// The rows of every table in `out`: the lines after a header line, up to the rule.
fn table_rows(out: &str, header: &[&str]) -> Vec<Vec<f64>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in out.lines() {
        if header.iter().all(|h| line.contains(h)) {
            in_table = true;
            continue;
        }
        if in_table {
            if line.starts_with("---") {
                in_table = false;
                continue;
            }
            let row: Vec<f64> = line
                .split_whitespace()
                .map(|f| {
                    f.parse()
                        .unwrap_or_else(|_| panic!("not a number {f:?} in {line:?}"))
                })
                .collect();
            rows.push(row);
        }
    }
    rows
}

fn check_row(row: &[f64], columns: usize, size: f64, iters: f64, what: &str) {
    assert_eq!(row.len(), columns, "{what}: {row:?}");
    assert_eq!((row[0], row[1]), (size, iters), "{what}: {row:?}");
    for (i, v) in row.iter().enumerate() {
        // A standard deviation may be 0; everything else is a positive figure.
        let stdev = columns == LAT_HEADER.len() && i == 6;
        assert!(
            v.is_finite() && (*v > 0.0 || (stdev && *v == 0.0)),
            "{what}: column {i} is {v}: {row:?}"
        );
    }
}

fn check_json(v: &Value, test: &str, size: u64, iters: Option<u64>) {
    assert_eq!(v["test"], test, "{v}");
    assert_eq!(v["mode"], "embedded", "{v}");
    assert_eq!(v["bytes"].as_u64(), Some(size), "{v}");
    let n = v["iterations"].as_u64().expect("iterations");
    match iters {
        Some(i) => assert_eq!(n, i, "{v}"),
        None => assert!(n > 0, "{v}"),
    }
    assert_eq!(v["data_verified"], true, "{v}");
    assert!(v["mtu"].as_u64().is_some_and(|m| m >= 256), "{v}");
    assert!(v["inline"].is_boolean(), "{v}");
    let keys: &[&str] = if test.ends_with("_lat") {
        &LAT_KEYS
    } else {
        &BW_KEYS
    };
    for k in keys {
        let x = v[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{test}: {k} missing: {v}"));
        let ok = if *k == "t_stdev_usec" {
            x >= 0.0
        } else {
            x > 0.0
        };
        assert!(ok && x.is_finite(), "{test}: {k} = {x}: {v}");
    }
    if test.ends_with("_bw") {
        assert!(v["tx_depth"].as_u64().is_some_and(|d| d > 0), "{v}");
        // The peak is the best window, never below the whole run's average.
        assert!(
            v["bw_peak_mb_s"].as_f64() >= v["bw_avg_mb_s"].as_f64(),
            "{v}"
        );
    } else {
        let f = |k: &str| v[k].as_f64().unwrap();
        assert!(f("t_min_usec") <= f("t_typical_usec"), "{v}");
        assert!(f("t_typical_usec") <= f("t_max_usec"), "{v}");
        assert!(f("p99_usec") <= f("p99_9_usec"), "{v}");
    }
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

#[test]
fn every_latency_test_prints_a_perftest_table() {
    for t in LAT_TESTS {
        let (out, _) = ok(&[t, "-n", "50"]);
        let rows = table_rows(&out, &LAT_HEADER);
        let size = if t == "atomic_lat" { 8.0 } else { 2.0 };
        assert_eq!(rows.len(), 1, "{t}:\n{out}");
        check_row(&rows[0], 9, size, 50.0, t);
        assert!(out.contains("data verified: yes"), "{t}:\n{out}");
    }
}

#[test]
fn every_bandwidth_test_prints_a_perftest_table() {
    for t in BW_TESTS {
        let (out, _) = ok(&[t, "-n", "50", "-s", "4096", "-t", "16"]);
        let rows = table_rows(&out, &BW_HEADER);
        assert_eq!(rows.len(), 1, "{t}:\n{out}");
        check_row(&rows[0], 5, 4096.0, 50.0, t);
        assert!(out.contains("data verified: yes"), "{t}:\n{out}");
        assert!(out.contains("TX depth        : 16"), "{t}:\n{out}");
    }
}

#[test]
fn every_test_as_json() {
    for t in LAT_TESTS.iter().chain(&BW_TESTS) {
        let size = if *t == "atomic_lat" { "8" } else { "64" };
        let (out, err) = ok(&[t, "-n", "50", "-s", size, "--json"]);
        let objs = json_lines(&out);
        assert_eq!(objs.len(), 1, "{t}:\n{out}");
        check_json(&objs[0], t, size.parse().unwrap(), Some(50));
        assert!(err.contains("data verified: yes"), "{t}: stderr:\n{err}");
    }
}

#[test]
fn inline_and_non_inline_paths() {
    // send_lat and write_lat inline small messages by default; -I 0 turns it off; a bandwidth
    // test inlines when asked.
    for (args, inline) in [
        (&["send_lat", "-s", "32"][..], true),
        (&["send_lat", "-s", "32", "-I", "0"], false),
        (&["write_lat", "-s", "300"], false),
        (&["write_bw", "-s", "100", "-I", "128"], true),
        (&["send_bw", "-s", "100", "-I", "128"], true),
    ] {
        let mut a = args.to_vec();
        a.extend(["-n", "50", "--json"]);
        let (out, _) = ok(&a);
        let v = &json_lines(&out)[0];
        assert_eq!(v["inline"], inline, "{args:?}: {v}");
        assert_eq!(v["data_verified"], true, "{args:?}: {v}");
    }
}

#[test]
fn all_sizes() {
    let want: Vec<u64> = (1..=23).map(|p| 1u64 << p).collect();
    // JSON figures are printed at full precision, so even a 2-byte READ on a loaded machine
    // (a few kB/s) is a positive bandwidth, and the byte and iteration counts are exact.
    for t in ["write_lat", "write_bw", "read_bw"] {
        let (out, _) = ok(&[t, "-a", "-n", "2", "--json"]);
        let objs = json_lines(&out);
        let sizes: Vec<u64> = objs.iter().map(|v| v["bytes"].as_u64().unwrap()).collect();
        assert_eq!(sizes, want, "{t}");
        for (v, s) in objs.iter().zip(&want) {
            check_json(v, t, *s, Some(2));
        }
    }
    // Tables too: one row per size, with the exact size and iteration count; a figure too small
    // for perftest's two decimals is printed with three significant digits, never as 0.00.
    let (out, _) = ok(&["read_bw", "-a", "-n", "2"]);
    let rows = table_rows(&out, &BW_HEADER);
    assert_eq!(rows.len(), 23, "{out}");
    for (r, s) in rows.iter().zip(&want) {
        check_row(r, 5, *s as f64, 2.0, "read_bw -a");
    }
}

#[test]
fn duration_instead_of_iterations() {
    for t in ["send_bw", "read_lat"] {
        let (out, _) = ok(&[t, "-D", "0.2", "-s", "256", "--json"]);
        let v = &json_lines(&out)[0];
        check_json(v, t, 256, None);
    }
}

#[test]
fn default_suite() {
    let (out, _) = ok(&["-n", "20"]);
    let lat = table_rows(&out, &LAT_HEADER);
    let bw = table_rows(&out, &BW_HEADER);
    assert_eq!((lat.len(), bw.len()), (3, 2), "{out}");
    for r in &lat {
        check_row(r, 9, 64.0, 20.0, "suite");
    }
    for r in &bw {
        check_row(r, 5, 65536.0, 20.0, "suite");
    }
    for title in common::SUITE_TITLES {
        assert!(out.contains(title), "{title}:\n{out}");
    }
    assert_eq!(out.matches("data verified: yes").count(), 5, "{out}");
}

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rperf-test-{}-{name}", std::process::id()))
}

#[test]
fn plots() {
    let lat = temp_path("lat.svg");
    let bw = temp_path("bw.svg");
    ok(&["read_lat", "-n", "200", "--plot", lat.to_str().unwrap()]);
    ok(&[
        "write_bw",
        "-a",
        "-n",
        "2",
        "--json",
        "--plot",
        bw.to_str().unwrap(),
    ]);
    for (p, what) in [(&lat, "read_lat latency, 2 B"), (&bw, "write_bw bandwidth")] {
        let svg = std::fs::read_to_string(p).expect("plot written");
        let _ = std::fs::remove_file(p);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(what), "{what}");
    }
    // The suite writes one plot per test.
    let base = temp_path("suite.svg");
    ok(&["-n", "5", "--json", "--plot", base.to_str().unwrap()]);
    for t in ["send_lat", "write_lat", "read_lat", "write_bw", "read_bw"] {
        let p = temp_path(&format!("suite-{t}.svg"));
        assert!(p.exists(), "{}", p.display());
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn modes_that_need_a_second_end_or_a_device_are_usage_errors() {
    for (args, want) in [
        (
            &["send_lat", "--device", "vfio:0000:01:00.0"][..],
            "add --server or a peer",
        ),
        (&["--device=vfio:0000:3b:00.1"], "add --server or a peer"),
        (&["write_bw", "--server", "127.0.0.2"], "exclusive"),
        (&["write_bw", "--server", "-s", "64"], "from the client"),
        (&["write_bw", "10.1.2.3"], "127.0.0.0/8"),
        (&["write_bw", "127.0.0.1"], "own address"),
        (&["write_bw", "--bind", "127.0.0.9"], "apply to --server"),
        (
            &["write_bw", "--server", "--device", "vfio:nope"],
            "not a PCI address",
        ),
    ] {
        let out = rperf(args);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: ran anyway");
    }
}

#[test]
fn bad_command_lines_exit_2() {
    for args in [
        &["nope"][..],
        &["write_bw", "-s"],
        &["write_bw", "-n", "0"],
        &["write_bw", "-n", "5", "-D", "1"],
        &["atomic_lat", "-s", "64"],
        &["-a"],
        &["write_bw", "--frobnicate"],
    ] {
        let out = rperf(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(text(&out.stderr).contains("rperf --help"), "{args:?}");
    }
    let (help, _) = ok(&["--help"]);
    for t in LAT_TESTS.iter().chain(&BW_TESTS) {
        assert!(help.contains(t), "{t} missing from --help");
    }
}

#[test]
fn two_qps_on_two_threads_embedded() {
    // -q 2: two connections between the two NICs, one thread each; the figures are the
    // two QPs' together and each QP's data is verified.
    for t in ["write_bw", "send_lat", "read_bw", "write_lat"] {
        let (stdout, stderr) = ok(&[t, "-q", "2", "-n", "50", "-s", "512", "--json"]);
        let v = json_lines(&stdout);
        assert_eq!(v.len(), 1, "{t}: {stdout}");
        check_json(&v[0], t, 512, Some(100));
        assert_eq!(v[0]["qps"].as_u64(), Some(2), "{}", v[0]);
        assert!(
            stderr.contains(&format!("{t}: data verified: yes")),
            "{stderr}"
        );
    }
    let (stdout, _) = ok(&["write_bw", "-q", "3", "-n", "40", "-s", "4096"]);
    assert!(stdout.contains(" Number of qps   : 3"), "{stdout}");
    let rows = table_rows(&stdout, &BW_HEADER);
    assert_eq!(rows.len(), 1, "{stdout}");
    check_row(&rows[0], BW_HEADER.len(), 4096.0, 120.0, "write_bw -q 3");
    assert!(stdout.ends_with("data verified: yes\n"), "{stdout}");
}

#[test]
fn efa_embedded_runs_send_read_and_write_over_srd() {
    // --device efa: two emulated EFAs, SRD QPs connected by hand with an AH each way; the
    // data of every test verified, as on ConnectX.
    for (t, size) in [
        ("send_lat", "64"),
        ("send_bw", "4096"),
        ("write_bw", "65536"),
        ("read_bw", "65536"),
        ("write_lat", "64"),
        ("read_lat", "64"),
    ] {
        let (out, _) = ok(&[t, "--device", "efa", "-n", "50", "-s", size]);
        assert!(
            out.contains("Device          : emulated EFA"),
            "{t}:\n{out}"
        );
        assert!(out.ends_with("data verified: yes\n"), "{t}:\n{out}");
    }
    // Inline data is clamped to what the device takes (32 bytes).
    let (out, _) = ok(&["send_lat", "--device", "efa", "-n", "20", "-s", "16"]);
    assert!(out.contains("Max inline data : 32[B]"), "{out}");
    // Two lanes share one AH per destination.
    let (stdout, stderr) = ok(&[
        "write_bw", "--device", "efa", "-q", "2", "-n", "40", "-s", "4096", "--json",
    ]);
    let v = json_lines(&stdout);
    assert_eq!(v[0]["qps"].as_u64(), Some(2), "{}", v[0]);
    assert!(stderr.contains("data verified: yes"), "{stderr}");
    // No atomics on EFA; SENDs are at most the MTU.
    for args in [&["atomic_lat"][..], &["send_bw", "-s", "9000"]] {
        let out = rperf(&[args, &["--device", "efa", "-n", "10"]].concat());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(text(&out.stderr).contains("post_send"), "{args:?}");
    }
}
