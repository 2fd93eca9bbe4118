//! Runs the `rping` binary in embedded mode and checks its output and exit status.

use std::process::{Command, Output};

fn rping(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rping"))
        .args(args)
        .output()
        .expect("run rping")
}

#[test]
fn five_verbose_validated_pings() {
    let out = rping(&["-C", "5", "-S", "64", "-v", "-V"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("ping data: "))
        .collect();
    assert_eq!(pings.len(), 5, "{stdout}");
    for (i, l) in pings.iter().enumerate() {
        let prefix = format!("ping data: rdma-ping-{i}: ");
        assert!(l.starts_with(&prefix), "{l}");
        // 64 bytes, the last a NUL: 63 characters after "ping data: "
        assert_eq!(l.len() - "ping data: ".len(), 63, "{l}");
        let first = (b'A' + i as u8) as char;
        assert_eq!(l[prefix.len()..].chars().next(), Some(first), "{l}");
    }
    assert_eq!(
        stdout.lines().last(),
        Some("rping: embedded: 5 pings of 64 bytes, validated")
    );
}

#[test]
fn three_pings_of_4096_bytes() {
    let out = rping(&["-S", "4096", "-C", "3", "-V"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("ping data:"), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("rping: embedded: 3 pings of 4096 bytes, validated")
    );
}

#[test]
fn bad_options_exit_2() {
    for args in [
        &["-x"][..],
        &["-S", "10"],
        &["-C"],
        &["-s"],
        &["-c", "-a", "10.0.0.1"],
    ] {
        let out = rping(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    let out = rping(&["-s"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not yet supported outside embedded mode")
    );
}
