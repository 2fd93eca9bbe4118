//! `nvmf-target` and `nvmf-perf` as two processes on the UDP fabric, data verified.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn perf_against_a_target_process_on_the_udp_fabric() {
    // Addresses of their own and a fabric port from the process id: no clash with other
    // tests running at the same time.
    let fabric = (40_000 + std::process::id() % 20_000).to_string();
    let mut target = Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
        .args([
            "--addr",
            "127.0.9.2",
            "--fabric-port",
            &fabric,
            "--ram",
            "8:512",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start nvmf-target");
    let mut err = BufReader::new(target.stderr.take().expect("stderr"));
    let mut line = String::new();
    let ready = loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break false;
        }
        if line.contains("listening on 127.0.9.2:4420") {
            break true;
        }
    };
    // Drain the target's stderr so that it never blocks on a full pipe.
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        while err.read_line(&mut rest).unwrap_or(0) > 0 {}
        rest
    });
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nvmf-perf"))
            .args([
                "--addr",
                "127.0.9.2",
                "--src",
                "127.0.9.1",
                "--fabric-port",
                &fabric,
            ])
            .args(args)
            .output()
            .expect("run nvmf-perf")
    };
    let outs = if ready {
        vec![
            run(&[
                "--rw",
                "randwrite",
                "--bs",
                "4096",
                "--qd",
                "8",
                "--queues",
                "2",
                "--count",
                "300",
                "--json",
            ]),
            run(&[
                "--rw", "read", "--bs", "16384", "--qd", "4", "--queues", "1", "--count", "100",
                "--range", "4096", "--json",
            ]),
            // Keep-alive: KATO 1 s, a Keep Alive every 0.5 s of a 2-second run
            run(&[
                "--rw", "randread", "--bs", "4096", "--qd", "4", "--queues", "1", "--time", "2",
                "--range", "4096", "--kato", "1000", "--json",
            ]),
        ]
    } else {
        Vec::new()
    };
    target.kill().ok();
    target.wait().ok();
    let rest = drain.join().unwrap_or_default();
    assert!(ready, "nvmf-target did not come up: {line}{rest}");
    assert_eq!(outs.len(), 3);
    for (i, out) in outs.iter().enumerate() {
        assert!(
            out.status.success(),
            "nvmf-perf failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("nvmf-perf --json prints JSON");
        match i {
            0 => assert_eq!(j["ios"], 300),
            1 => assert_eq!(j["ios"], 100),
            _ => {
                assert!(j["ios"].as_u64().unwrap() > 0);
                let ka = j["keep_alives"].as_u64().unwrap();
                assert!(ka >= 1, "no Keep Alive during a 2 s run with KATO 1 s");
            }
        }
        assert_eq!(j["errors"], 0);
        assert_eq!(j["mismatches"], 0);
        assert!(j["verified_blocks"].as_u64().unwrap() > 0);
    }
}
