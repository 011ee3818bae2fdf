//! `accelsql gpu run` across real processes: GPUs are never shared, and a killed holder frees its GPU.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ACCELSQL: &str = env!("CARGO_BIN_EXE_accelsql");

/// `accelsql gpu run --count 1 --wait -- sh -c SCRIPT` on `gpus` simulated devices.
fn gpu_run(gpus: usize, locks: &Path, script: &str) -> Child {
    Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args([
            "gpu", "run", "--count", "1", "--wait", "--", "sh", "-c", script,
        ])
        .env("ACCELSQL_SIMULATED_GPUS", gpus.to_string())
        .env("ACCELSQL_DEVICE_LOCK_DIR", locks)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start accelsql")
}

/// A script that logs `<gpu> <start ns> <end ns>` to `log` around a sleep.
fn timed_task(log: &Path, seconds: f64) -> String {
    format!(
        "s=$(date +%s%N); sleep {seconds}; e=$(date +%s%N); echo \"$CUDA_VISIBLE_DEVICES $s $e\" >> {}",
        log.display()
    )
}

fn intervals(log: &Path) -> Vec<(String, u128, u128)> {
    std::fs::read_to_string(log)
        .expect("read log")
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            (
                parts[0].to_string(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            )
        })
        .collect()
}

fn assert_no_overlap_per_gpu(runs: &[(String, u128, u128)]) {
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            if a.0 == b.0 {
                assert!(
                    a.2 <= b.1 || b.2 <= a.1,
                    "runs on GPU {} overlap: {a:?} {b:?}",
                    a.0
                );
            }
        }
    }
}

fn wait_for(path: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn two_processes_on_one_gpu_serialize() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let children: Vec<Child> = (0..2)
        .map(|_| gpu_run(1, dir.path(), &timed_task(&log, 0.5)))
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let runs = intervals(&log);
    assert_eq!(runs.len(), 2);
    assert!(runs.iter().all(|r| r.0 == "0"));
    assert_no_overlap_per_gpu(&runs);
}

#[test]
fn six_tasks_on_two_gpus_never_share_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runs.log");
    let children: Vec<Child> = (0..6)
        .map(|_| gpu_run(2, dir.path(), &timed_task(&log, 0.3)))
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success());
    }
    let runs = intervals(&log);
    assert_eq!(runs.len(), 6);
    assert_no_overlap_per_gpu(&runs);
    assert!(
        runs.iter().any(|r| r.0 == "0") && runs.iter().any(|r| r.0 == "1"),
        "both GPUs used: {runs:?}"
    );
}

#[test]
fn killing_the_holder_with_sigkill_lets_the_waiter_run_and_takes_its_command_down() {
    let dir = tempfile::tempdir().unwrap();
    let started: PathBuf = dir.path().join("holder-started");
    let pid_file = dir.path().join("holder-command.pid");
    let waiter_ran = dir.path().join("waiter-ran");
    let script = format!(
        "echo $$ > {}; touch {}; exec sleep 30",
        pid_file.display(),
        started.display()
    );
    let mut holder = gpu_run(1, dir.path(), &script);
    assert!(
        wait_for(&started, Duration::from_secs(10)),
        "holder started its command"
    );

    let mut waiter = gpu_run(1, dir.path(), &format!("touch {}", waiter_ran.display()));
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !waiter_ran.exists(),
        "the waiter must not run while the holder has the GPU"
    );

    holder.kill().unwrap(); // SIGKILL: no chance to clean up; the kernel drops the flock.
    holder.wait().unwrap();
    assert!(
        wait_for(&waiter_ran, Duration::from_secs(10)),
        "the waiter got the GPU"
    );
    assert!(waiter.wait().unwrap().success());

    // The holder's command died with it (PR_SET_PDEATHSIG): nothing keeps using the GPU unlocked.
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let start = Instant::now();
    while proc_dir.exists() && start.elapsed() < Duration::from_secs(5) {
        let state = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
        if state.split_whitespace().nth(2) == Some("Z") {
            break; // a zombie waiting for its reaper is dead
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let state = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
    assert!(
        state.is_empty() || state.split_whitespace().nth(2) == Some("Z"),
        "command {pid} still runs: {state}"
    );
}

#[test]
fn the_command_sees_its_devices_and_its_exit_code_is_relayed() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args([
            "gpu",
            "run",
            "--count",
            "2",
            "--",
            "sh",
            "-c",
            "echo $CUDA_VISIBLE_DEVICES $CUDA_DEVICE_ORDER $ACCELSQL_GPU_UUIDS; exit 7",
        ])
        .env("ACCELSQL_SIMULATED_GPUS", "3")
        .env("ACCELSQL_DEVICE_LOCK_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("0,1 PCI_BUS_ID GPU-5131a7ed-"),
        "{stdout}"
    );
}

#[test]
fn nothing_matching_is_explained_and_exits_125() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args(["gpu", "run", "--name", "H100", "--wait", "--", "true"])
        .env("ACCELSQL_SIMULATED_GPUS", "2")
        .env("ACCELSQL_DEVICE_LOCK_DIR", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("[53G01]") && stderr.contains("does not contain \"H100\""),
        "{stderr}"
    );
}

#[test]
fn status_json_lists_simulated_devices() {
    let out = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args(["gpu", "status", "--json"])
        .env("ACCELSQL_SIMULATED_GPUS", "2")
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["devices"].as_array().unwrap().len(), 2);
    assert_eq!(v["backend"], "simulated");
}
