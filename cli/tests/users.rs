//! Catalog users from the command line: `accelsql users import FILE` moving a server's users
//! file into a data directory's catalog, and the shell's `--user NAME` opening a session with
//! that user's privileges.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic: that is a failed test

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const ACCELSQL: &str = env!("CARGO_BIN_EXE_accelsql");

/// `accelsql ARGS` with `stdin` piped in, on zero simulated GPUs.
fn accelsql_with_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(ACCELSQL)
        .env("ACCELSQL_DATA_DIR", ":memory:")
        .args(args)
        .env("ACCELSQL_SIMULATED_GPUS", "0")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("ACCELSQL_DEVICE_LOCK_DIR")
        .env_remove("ACCELSQL_GPU_WAIT_TIMEOUT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start accelsql");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn accelsql(args: &[&str]) -> Output {
    accelsql_with_stdin(args, "")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Adds `name` with `password` to the users file at `users` as the server's operator would
/// (few PBKDF2 rounds, to keep the test fast).
fn add_user(users: &Path, name: &str, password: &str) {
    let users = users.to_str().unwrap();
    let out = accelsql_with_stdin(
        &[
            "serve", "add-user", "--users", users, name, "--rounds", "1000",
        ],
        &format!("{password}\n"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

fn import(users: &Path, data_dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "users",
        "import",
        users.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    accelsql(&args)
}

/// `accelsql --data-dir DIR --user USER --format csv -c SQL`.
fn shell_as(data_dir: &Path, user: &str, sql: &str) -> Output {
    accelsql(&[
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--user",
        user,
        "--format",
        "csv",
        "-c",
        sql,
    ])
}

#[test]
fn imported_users_get_sessions_with_their_own_privileges() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    let data = dir.path().join("data");
    add_user(&users, "alice", "alice-pw");
    add_user(&users, "bob", "bob-pw");

    let out = import(&users, &data, &["--admin-user", "bob"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("imported alice (new)\n"), "{text}");
    assert!(text.contains("imported bob (new)\n"), "{text}");
    // Names have one form (upper case), quoted or not.
    assert!(text.contains("granted DBA to BOB\n"), "{text}");
    assert!(
        text.contains("2 user(s) imported into") && text.contains("(2 new, 0 updated)"),
        "{text}"
    );

    // The user's session: its name, and nothing beyond its privileges.
    let out = shell_as(&data, "alice", "SELECT CURRENT_USER AS u");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "u\nALICE\n");
    let out = shell_as(&data, "alice", "CREATE USER x IDENTIFIED BY \"y\"");
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).starts_with("ERROR [42501]"),
        "{}",
        stderr(&out)
    );
    // The admin user holds DBA: it may grant what it likes.
    let out = shell_as(&data, "bob", "GRANT USE GPU TO \"alice\"");
    assert!(out.status.success(), "{}", stderr(&out));

    // Importing again updates the hashes and keeps the privileges.
    add_user(&users, "alice", "new-pw");
    let out = import(&users, &data, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("updated alice\n"), "{text}");
    assert!(text.contains("(0 new, 2 updated)"), "{text}");
    let out = shell_as(&data, "bob", "GRANT USE GPU TO \"alice\"");
    assert!(out.status.success(), "{}", stderr(&out));

    // An admin user that does not exist changes nothing.
    let out = import(&users, &data, &["--admin-user", "nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("accelsql: [42704]"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));

    // No such user; a user without CREATE SESSION.
    let out = shell_as(&data, "nobody", "SELECT 1");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("[42704]"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let out = accelsql(&[
        "--data-dir",
        data.to_str().unwrap(),
        "-c",
        "REVOKE CREATE SESSION FROM \"alice\"",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = shell_as(&data, "alice", "SELECT 1");
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("[42501]"), "{}", stderr(&out));
    // Without --user the shell is SYS's.
    let out = accelsql(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--format",
        "csv",
        "-c",
        "SELECT CURRENT_USER AS u",
    ]);
    assert_eq!(stdout(&out), "u\nSYS\n", "{}", stderr(&out));
}

#[test]
fn restricted_still_bounds_a_users_session() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    let data = dir.path().join("data");
    add_user(&users, "carol", "pw");
    let out = import(&users, &data, &["--admin-user", "carol"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = accelsql(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--user",
        "carol",
        "--restricted",
        "-c",
        "COPY (SELECT 1) TO 'x.csv'",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("ERROR [42501]"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_users_file_others_may_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    let data = dir.path().join("data");
    add_user(&users, "alice", "pw");
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o640)).unwrap();
    let out = import(&users, &data, &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.starts_with("accelsql: [F0000]") && err.contains("chmod 600"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
}

#[test]
fn a_malformed_line_is_refused_by_number_and_nothing_is_imported() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    let data = dir.path().join("data");
    add_user(&users, "alice", "pw");
    let mut text = std::fs::read_to_string(&users).unwrap();
    text.push_str("# a comment\n\nbob:md5:x\n");
    std::fs::write(&users, text).unwrap();
    let out = import(&users, &data, &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("line 4") && err.contains("bob"), "{err}");
    let out = shell_as(&data, "alice", "SELECT 1");
    assert!(stderr(&out).contains("[42704]"), "{}", stderr(&out));
}
