//! Scratch directories named after the process that made them, and the removal of those whose
//! process is gone (a killed process, or a test binary, has no chance to remove its own).

use std::path::Path;

/// Whether process `pid` exists (one owned by another user counts).
pub fn process_is_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Removes the entries of `dir` named `{prefix}{pid}` or `{prefix}{pid}-…` whose process no
/// longer runs; others are left alone.
pub fn remove_abandoned_dirs(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .map(|rest| rest.split_once('-').map_or(rest, |(pid, _)| pid))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !process_is_alive(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_dirs_of_dead_processes_go() {
        let base =
            std::env::temp_dir().join(format!("accelsql-scratch-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        // A child that has exited and been reaped: its pid names no process (until reused).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let mine = std::process::id();
        for name in [
            format!("x-{dead}"),
            format!("x-{dead}-node-1"),
            format!("x-{mine}"),
            format!("x-{mine}-node-0"),
            "x-node-2".to_string(),
            format!("y-{dead}"),
        ] {
            std::fs::create_dir(base.join(name)).unwrap();
        }
        remove_abandoned_dirs(&base, "x-");
        let mut left: Vec<String> = std::fs::read_dir(&base)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want = vec![
            format!("x-{mine}"),
            format!("x-{mine}-node-0"),
            "x-node-2".to_string(),
            format!("y-{dead}"),
        ];
        want.sort();
        assert_eq!(left, want);
        assert!(process_is_alive(mine));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
