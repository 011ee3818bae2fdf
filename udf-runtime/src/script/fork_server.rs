//! Warm worker starts: a fork server per interpreter and environment that has imported the worker
//! module (and numpy, where the interpreter has it) and forks a fresh worker for each instance.
//!
//! Starting `python3` and importing numpy costs tens to hundreds of milliseconds, paid by every
//! statement, since workers belong to one statement. A fork server pays it once: it is started
//! (in the background) the first time a worker with its interpreter, environment and working
//! directory is wanted — that worker is spawned directly — and from when it is ready, workers
//! with that key are forked from it (a start that comes while it is still starting waits for it,
//! up to [`START_WAIT`] after its start, rather than spawn an interpreter beside it). A ready
//! server keeps one worker forked ahead of requests, the spare, and hands the next request to
//! it; it forks the next spare right after, so that it gets ready (its first writes to the
//! pages it shares with the server done) while that worker starts ([`warm_starts`] lists
//! them). A
//! forked worker is a fresh process like a spawned one — its own process group, the same
//! environment (the server was started with it), the script's module-level code run once in it,
//! its own random state — so statement-scoped semantics are kept; only the start is cheaper.
//!
//! The server is the worker's parent: it kills the worker's process group and reaps it when it
//! exits, and reports the wait status to the engine on a pipe of the worker's own. It dies with
//! the engine and its workers with it (`PR_SET_PDEATHSIG` on both). When a server cannot be
//! started, dies or misbehaves, workers are spawned directly, as without it; a dead server is
//! started again after [`RETRY_AFTER`]. The protocol is described in the Python side
//! (`python/accelsql_worker/fork_server.py`). Linux only; elsewhere workers are always spawned.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::interpreter::worker_args;
use super::process::{
    IoEnd, Process, WorkerParent, die_with_engine, read_full, spawn_from_long_lived_thread,
    wait_ready,
};

/// The argument after the bootstrap's that makes the worker module serve forks.
const FORK_SERVER_ARG: &str = "--accelsql-fork-server";
/// At most this many fork servers per engine process; beyond, the least recently used one is let
/// go (it ends once its last worker has ended). Tests, which run side by side with servers of
/// their own, get more.
const MAX_SERVERS: usize = if cfg!(test) { 64 } else { 4 };
/// A server that failed (never became ready, or died) is not started again for this long.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How long after a server's start a worker start waits for it (once one worker has been spawned
/// meanwhile) before it spawns one too.
const START_WAIT: Duration = Duration::from_secs(2);
/// A server not ready after this long is given up.
const START_LIMIT: Duration = Duration::from_secs(60);
/// How long a ready server may take to answer a fork request before it is given up.
const FORK_REPLY_LIMIT: Duration = Duration::from_secs(5);
/// How long a ready server may take to say which spare it keeps.
const SPARE_REPLY_LIMIT: Duration = Duration::from_millis(500);
/// How long a server that was let go may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// What a fork server serves: workers of this interpreter, environment and working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    interpreter: PathBuf,
    /// Sorted by name.
    env: Vec<(OsString, OsString)>,
    cwd: Option<PathBuf>,
    /// The sandbox policy's generation it was started under (see `sandbox.rs`).
    sandbox: u64,
}

/// A worker forked by a server, or why it could not be: [`fork_worker`]'s answer.
pub(crate) enum Forked {
    /// The worker, started.
    Worker(Process),
    /// No server is ready for this key (one may be starting): spawn the worker directly.
    NoServer,
}

/// Forks a worker of `interpreter` with exactly the environment `env` (sorted by name) from a
/// ready fork server; starts one in the background (and answers [`Forked::NoServer`]) when there
/// is none for this key yet, or when the one there fails.
pub(crate) fn fork_worker(
    interpreter: &Path,
    env: Vec<(OsString, OsString)>,
    deadline: Option<Instant>,
) -> Forked {
    if !cfg!(target_os = "linux") {
        return Forked::NoServer;
    }
    let key = Key {
        interpreter: interpreter.to_path_buf(),
        env,
        cwd: std::env::current_dir().ok(),
        sandbox: crate::script::sandbox::generation(),
    };
    let Some((server, ready)) = server_for(&key) else {
        return Forked::NoServer;
    };
    if !ready {
        // Its start is on its way (a request before this one began it, and was spawned): wait
        // for it a little rather than pay a full interpreter start again — but never more than
        // a quarter of this start's own time limit.
        let mut until = server.started + START_WAIT;
        if let Some(d) = deadline {
            let now = Instant::now();
            until = until.min(now + d.saturating_duration_since(now) / 4);
        }
        match server.wait_ready(until) {
            Readiness::Ready => {}
            Readiness::Starting => return Forked::NoServer,
            Readiness::Failed => {
                forget(&server);
                return Forked::NoServer;
            }
        }
    }
    match server.fork(deadline) {
        Ok(process) => Forked::Worker(process),
        Err(ForkError::Timeout) => Forked::NoServer,
        Err(ForkError::ServerFailed) => {
            forget(&server);
            Forked::NoServer
        }
    }
}

/// A fork server of this process and its spare, as [`warm_starts`] lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmStart {
    /// The interpreter its workers run.
    pub interpreter: PathBuf,
    /// The server's process id (`None` once it ended).
    pub server_pid: Option<u32>,
    /// `starting`, `ready` or `failed`.
    pub state: &'static str,
    /// The spare worker waiting for the next statement's instance, if any: forked ahead, it has
    /// run no script code.
    pub spare_pid: Option<u32>,
}

/// The fork servers of this process (at most a few: one per interpreter, environment and working
/// directory in use) and their spares.
///
/// A ready server keeps one worker forked ahead of requests (a *spare*), so that a statement's
/// instance starts without a `fork()` on its path; the spare has run no script code (each
/// statement's instances still run the script's module-level code), is not a statement's worker,
/// and ends with its server, which ends with the engine's process.
pub fn warm_starts() -> Vec<WarmStart> {
    let servers: Vec<(PathBuf, Arc<ForkServer>)> = {
        let table = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .filter_map(|e| match &e.slot {
                Slot::Server(s) => Some((e.key.interpreter.clone(), Arc::clone(s))),
                Slot::Failed(_) => None,
            })
            .collect()
    };
    servers
        .into_iter()
        .map(|(interpreter, server)| {
            let state = server.readiness();
            WarmStart {
                interpreter,
                server_pid: server.pid(),
                state: match state {
                    Readiness::Starting => "starting",
                    Readiness::Ready => "ready",
                    Readiness::Failed => "failed",
                },
                spare_pid: (state == Readiness::Ready)
                    .then(|| server.spare_pid())
                    .flatten(),
            }
        })
        .collect()
}

/// Marks `server` failed in the table (it is let go once its workers are gone).
fn forget(server: &Arc<ForkServer>) {
    let dropped = {
        let mut table = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
        table
            .iter_mut()
            .find(|e| matches!(&e.slot, Slot::Server(s) if Arc::ptr_eq(s, server)))
            .map(|e| std::mem::replace(&mut e.slot, Slot::Failed(Instant::now())))
    };
    drop(dropped);
}

/// The servers, one entry per key.
static SERVERS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

struct Entry {
    key: Key,
    slot: Slot,
    used: Instant,
}

enum Slot {
    Server(Arc<ForkServer>),
    /// When it failed.
    Failed(Instant),
}

/// The server for `key` and whether it is ready; `None` (after starting one in the background)
/// when there was none, or when the last one failed lately.
fn server_for(key: &Key) -> Option<(Arc<ForkServer>, bool)> {
    let now = Instant::now();
    // Servers let go here are dropped after the lock is released (dropping one waits for it).
    let mut let_go = Vec::new();
    let ready = {
        let mut table = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
        match table.iter().position(|e| &e.key == key) {
            Some(i) => {
                let entry = &mut table[i];
                entry.used = now;
                match &entry.slot {
                    Slot::Server(server) => match server.readiness() {
                        Readiness::Ready => Some((Arc::clone(server), true)),
                        Readiness::Starting => Some((Arc::clone(server), false)),
                        Readiness::Failed => {
                            let_go.push(std::mem::replace(&mut entry.slot, Slot::Failed(now)));
                            None
                        }
                    },
                    Slot::Failed(at) if now.duration_since(*at) < RETRY_AFTER => None,
                    Slot::Failed(_) => {
                        entry.slot = start_slot(key, now);
                        None
                    }
                }
            }
            None => {
                // A server of the same workers under an older sandbox policy is let go.
                while let Some(stale) = table.iter().position(|e| {
                    e.key.interpreter == key.interpreter
                        && e.key.env == key.env
                        && e.key.cwd == key.cwd
                        && e.key.sandbox != key.sandbox
                }) {
                    let_go.push(table.swap_remove(stale).slot);
                }
                if table.len() >= MAX_SERVERS
                    && let Some(oldest) = (0..table.len()).min_by_key(|&i| table[i].used)
                {
                    let_go.push(table.swap_remove(oldest).slot);
                }
                table.push(Entry {
                    key: key.clone(),
                    slot: start_slot(key, now),
                    used: now,
                });
                None
            }
        }
    };
    drop(let_go);
    ready
}

fn start_slot(key: &Key, now: Instant) -> Slot {
    match ForkServer::start(key) {
        Ok(server) => Slot::Server(Arc::new(server)),
        Err(_) => Slot::Failed(now),
    }
}

/// How far a server got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    Starting,
    Ready,
    Failed,
}

/// Why a fork did not give a worker.
#[derive(Debug)]
enum ForkError {
    /// The deadline passed first (the server may be fine).
    Timeout,
    /// The server is gone or broken.
    ServerFailed,
}

/// One fork server process and the engine's end of its control socket.
#[derive(Debug)]
pub(crate) struct ForkServer {
    /// SOCK_SEQPACKET: the engine sends fork and kill requests; the server says READY once.
    control: OwnedFd,
    readiness: Mutex<Readiness>,
    started: Instant,
    /// The server process, reaped when the server is dropped.
    child: Mutex<Option<Child>>,
    /// Held while asking the server about its spare.
    asking: Mutex<()>,
}

impl ForkServer {
    /// Spawns the server for `key` (it becomes ready in the background).
    fn start(key: &Key) -> io::Result<Self> {
        let (ours, theirs) = seqpacket_pair()?;
        let mut cmd = Command::new(&key.interpreter);
        cmd.args(worker_args())
            .arg(FORK_SERVER_ARG)
            .env_clear()
            .envs(key.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // (Run as another OS user, the server keeps the engine's folder without entering it
        // anew: that user may have no right to.)
        if let Some(cwd) = &key.cwd
            && crate::script::sandbox::script_user().is_none()
        {
            cmd.current_dir(cwd);
        }
        die_with_engine(&mut cmd);
        let child = spawn_from_long_lived_thread(cmd)?;
        Ok(Self {
            control: ours,
            readiness: Mutex::new(Readiness::Starting),
            started: Instant::now(),
            child: Mutex::new(Some(child)),
            asking: Mutex::new(()),
        })
    }

    /// Whether the server said READY (checked without waiting), is still starting, or failed.
    fn readiness(&self) -> Readiness {
        let mut state = self.readiness.lock().unwrap_or_else(|e| e.into_inner());
        if *state == Readiness::Starting {
            let mut buf = [0u8; 512];
            // SAFETY: `buf` is a valid, writable buffer of its length and `control` is open.
            let n = unsafe {
                libc::recv(
                    self.control.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            *state = if n > 0 && buf[0] == b'R' {
                Readiness::Ready
            } else if n >= 0 {
                Readiness::Failed
            } else {
                match io::Error::last_os_error().kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        if self.started.elapsed() < START_LIMIT =>
                    {
                        Readiness::Starting
                    }
                    _ => Readiness::Failed,
                }
            };
        }
        *state
    }

    /// The server's process id, while it runs.
    fn pid(&self) -> Option<u32> {
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        child.as_ref().map(Child::id)
    }

    /// The pid of the spare a ready server keeps (`None`: none now, or no answer in time).
    fn spare_pid(&self) -> Option<u32> {
        // One question at a time; the answer is the only thing a ready server sends.
        let _asking = self.asking.lock().unwrap_or_else(|e| e.into_inner());
        let fd = self.control.as_raw_fd();
        let mut reply = [0u8; 16];
        // Answers to questions that timed out earlier are dropped first.
        // SAFETY: `reply` is a valid, writable buffer of its length and `control` is open.
        while unsafe {
            libc::recv(
                fd,
                reply.as_mut_ptr().cast(),
                reply.len(),
                libc::MSG_DONTWAIT,
            )
        } > 0
        {}
        // SAFETY: a one-byte buffer; MSG_NOSIGNAL turns a gone server into EPIPE.
        let sent = unsafe {
            libc::send(
                fd,
                b"Q".as_ptr().cast(),
                1,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if sent != 1 {
            return None;
        }
        let until = Instant::now() + SPARE_REPLY_LIMIT;
        loop {
            // SAFETY: as above.
            let n = unsafe {
                libc::recv(
                    fd,
                    reply.as_mut_ptr().cast(),
                    reply.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n == 5 && reply[0] == b'S' {
                let pid = u32::from_le_bytes([reply[1], reply[2], reply[3], reply[4]]);
                return (pid != 0).then_some(pid);
            }
            if n >= 0 || wait_ready(fd, libc::POLLIN, Some(until)).is_err() {
                return None;
            }
        }
    }

    /// Waits until the server is ready or failed, or `until` passes (then: still starting).
    fn wait_ready(&self, until: Instant) -> Readiness {
        loop {
            let state = self.readiness();
            if state != Readiness::Starting {
                return state;
            }
            // READY (or end of file) makes the socket readable; readiness() then reads it.
            if wait_ready(self.control.as_raw_fd(), libc::POLLIN, Some(until)).is_err() {
                return self.readiness();
            }
        }
    }

    /// Has the server fork a worker: sends it the worker's socket, stderr pipe and status pipe,
    /// and waits (until `deadline`) for the worker's pid.
    fn fork(self: &Arc<Self>, deadline: Option<Instant>) -> Result<Process, ForkError> {
        let broken = |_| ForkError::ServerFailed;
        let (ours, theirs) = UnixStream::pair().map_err(broken)?;
        let (stderr_r, stderr_w) = pipe().map_err(broken)?;
        let (status_r, status_w) = pipe().map_err(broken)?;
        set_nonblocking(&status_r).map_err(broken)?;
        send_with_fds(
            self.control.as_raw_fd(),
            b"F",
            &[
                theirs.as_raw_fd(),
                stderr_w.as_raw_fd(),
                status_w.as_raw_fd(),
            ],
        )
        .map_err(broken)?;
        // The worker's ends now live in the server (and the worker): close ours, so that end of
        // file means they are gone.
        drop((theirs, stderr_w, status_w));
        // A healthy server answers in milliseconds: one that does not within FORK_REPLY_LIMIT
        // is stuck, and given up.
        let limit = Instant::now() + FORK_REPLY_LIMIT;
        let wait_until = deadline.map_or(limit, |d| d.min(limit));
        let mut reply = [0u8; 5];
        match read_full(status_r.as_raw_fd(), &mut reply, Some(wait_until)) {
            Ok(true) if reply[0] == b'P' => {}
            Err(IoEnd::Timeout) if wait_until < limit => return Err(ForkError::Timeout),
            // End of file (the server died), an error from fork() (b"E…"), no answer in time,
            // or garbage.
            _ => return Err(ForkError::ServerFailed),
        }
        let pid = u32::from_le_bytes([reply[1], reply[2], reply[3], reply[4]]);
        Process::forked(Arc::<Self>::clone(self), pid, ours, stderr_r, status_r).map_err(broken)
    }
}

impl WorkerParent for ForkServer {
    /// Asks the server to kill worker `pid`'s process group now (it reports the end as usual). A
    /// server that is gone took its workers with it.
    fn kill(&self, pid: u32) {
        let mut msg = [0u8; 5];
        msg[0] = b'K';
        msg[1..].copy_from_slice(&pid.to_le_bytes());
        // SAFETY: `msg` is a valid buffer of its length and `control` is open; MSG_NOSIGNAL turns
        // a gone server into EPIPE, which needs no handling (see above).
        unsafe {
            libc::send(
                self.control.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            );
        }
    }
}

impl Drop for ForkServer {
    /// Lets the server go: it sees end of file on its control socket, kills what is left of its
    /// workers (none: each worker holds its server) and exits; reaped here.
    fn drop(&mut self) {
        // SAFETY: shutdown on our open socket; it touches no memory.
        unsafe {
            libc::shutdown(self.control.as_raw_fd(), libc::SHUT_RDWR);
        }
        let child = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut child) = child {
            let end = Instant::now() + EXIT_GRACE;
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < end {
                thread::sleep(Duration::from_millis(2));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A close-on-exec `SOCK_SEQPACKET` socket pair.
fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two fds for socketpair to fill.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded: both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two fds for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: fcntl on an open fd with integer arguments only.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0
        || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends one message of `data` with `fds` attached (`SCM_RIGHTS`), without waiting.
fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let fds_len = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fds_len as u32) } as usize;
    // u64 elements keep the buffer aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain data for which all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `control`, which has room for one header with `fds_len` bytes of
    // data (CMSG_SPACE), so CMSG_FIRSTHDR is non-null and CMSG_DATA has room for the fds.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::other("no room for the fds"));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fds_len as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
    }
    loop {
        // SAFETY: `msg` and everything it points at (`iov`, `data`, `control`) live across the
        // call; MSG_NOSIGNAL turns a gone server into EPIPE instead of SIGPIPE.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;

    use super::super::worker::worker_env;
    use super::super::{
        PythonWorker, ScriptConnections, ScriptImports, ScriptInputType, ScriptOutput, ScriptSpec,
        SqlType, WorkerContext, find_python3,
    };
    use super::*;

    /// A SCALAR script with no parameters, with `%env` settings of its own, so that its fork
    /// server is not shared with other tests.
    fn spec(returns: SqlType, body: &str, env: &[(&str, &str)]) -> Arc<ScriptSpec> {
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push(("ACCELSQL_FORK_SERVER_TEST".into(), body.into()));
        Arc::new(ScriptSpec {
            schema: "S".into(),
            name: "F".into(),
            language: "PYTHON3".into(),
            interpreter: find_python3().unwrap(),
            input_type: ScriptInputType::Scalar,
            inputs: Some(vec![]),
            output: ScriptOutput::Returns(returns),
            body: body.into(),
            env,
            imports: ScriptImports::none(),
            connections: ScriptConnections::none(),
        })
    }

    fn key_of(spec: &ScriptSpec) -> Key {
        Key {
            interpreter: spec.interpreter.clone(),
            env: worker_env(spec, &WorkerContext::default()),
            cwd: std::env::current_dir().ok(),
            sandbox: crate::script::sandbox::generation(),
        }
    }

    /// Waits until the fork server of `spec`'s workers is ready.
    fn warm(spec: &ScriptSpec) -> Arc<ForkServer> {
        let key = key_of(spec);
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((s, true)) = server_for(&key) {
                return s;
            }
            assert!(Instant::now() < end, "the fork server did not become ready");
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn forked(spec: &Arc<ScriptSpec>) -> PythonWorker {
        let w = PythonWorker::start(Arc::clone(spec), WorkerContext::default(), &[], None).unwrap();
        assert!(w.is_forked(), "not a forked worker");
        w
    }

    fn one(w: &mut PythonWorker) -> Arc<dyn Array> {
        w.run(1, &[]).unwrap().remove(0)
    }

    fn gone(pid: u32) -> bool {
        !Path::new(&format!("/proc/{pid}")).exists()
    }

    #[test]
    fn a_server_forks_workers_and_kills_them_when_asked() {
        let s = spec(SqlType::BigInt, "def run(ctx):\n    return 1\n", &[]);
        let server = warm(&s);
        let process = server.fork(None).unwrap();
        assert!(process.is_forked());
        let pid = process.pid();
        assert!(!gone(pid));
        // Killed when asked (it waits for INIT), reaped before the report.
        let status = process.terminate(Duration::ZERO);
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(gone(pid));
    }

    #[test]
    fn forked_workers_are_fresh_processes_with_their_own_state() {
        let body = "\
import os, random, sys
try:
    import numpy
    r = float(numpy.random.rand())
except ImportError:
    r = 0.0
x = random.random()

def run(ctx):
    assert os.getpgid(0) == os.getpid(), 'not a process group of its own'
    assert sys.argv == ['-c'], sys.argv
    assert not any('accelsql-' in p and 'worker-' in p for p in sys.path), sys.path
    assert os.environ.get('MY_SETTING') == 'a b=c'
    return '%r %r %d' % (x, r, os.getpid())
";
        let s = spec(SqlType::Varchar(200), body, &[("MY_SETTING", "a b=c")]);
        warm(&s);
        let mut a = forked(&s);
        let mut b = forked(&s);
        let ra = one(&mut a).as_string::<i32>().value(0).to_string();
        let rb = one(&mut b).as_string::<i32>().value(0).to_string();
        let (fa, fb) = (
            ra.rsplit_once(' ').unwrap().0,
            rb.rsplit_once(' ').unwrap().0,
        );
        assert_ne!(
            fa.split(' ').next(),
            fb.split(' ').next(),
            "random: {ra} / {rb}"
        );
        if !fa.ends_with(" 0.0") {
            assert_ne!(
                fa.split(' ').nth(1),
                fb.split(' ').nth(1),
                "numpy: {ra} / {rb}"
            );
        }
        a.finish().unwrap();
        b.finish().unwrap();
    }

    #[test]
    fn forked_workers_that_crash_say_how_and_are_reaped() {
        for (code, how) in [
            ("os._exit(3)", "exited with code 3"),
            (
                "os.kill(os.getpid(), 9)",
                "was killed by signal 9 (SIGKILL)",
            ),
        ] {
            let body = format!(
                "import os, sys\n\ndef run(ctx):\n    sys.stderr.write('about to die\\n')\n    sys.stderr.flush()\n    {code}\n"
            );
            let s = spec(SqlType::Double, &body, &[]);
            warm(&s);
            let mut w = forked(&s);
            let pid = w.pid();
            let e = w.run(1, &[]).unwrap_err();
            assert_eq!(e.code(), "58U11", "{e}");
            let text = e.to_string();
            assert!(
                text.contains(&format!("(pid {pid}) died during run(ctx): {how}")),
                "{text}"
            );
            assert!(text.contains("about to die"), "{text}");
            assert!(gone(pid));
        }
    }

    #[test]
    fn forked_workers_time_out_and_are_killed_with_their_children() {
        let s = spec(
            SqlType::Double,
            "import time\n\ndef run(ctx):\n    time.sleep(30)\n",
            &[],
        );
        warm(&s);
        let mut w = PythonWorker::start(
            Arc::clone(&s),
            WorkerContext::default(),
            &[],
            Some(Duration::from_millis(500)),
        )
        .unwrap();
        assert!(w.is_forked());
        let pid = w.pid();
        let e = w.run(1, &[]).unwrap_err();
        assert_eq!(e.code(), "57U12", "{e}");
        assert!(gone(pid));

        let body = "import subprocess\nchild = subprocess.Popen(['sleep', '60'])\n\ndef run(ctx):\n    return child.pid\n";
        let s = spec(SqlType::BigInt, body, &[]);
        warm(&s);
        let mut w = forked(&s);
        let pid = w.pid();
        let grandchild = one(&mut w).as_primitive::<Int64Type>().value(0);
        drop(w);
        assert!(gone(pid), "worker {pid} left behind");
        let end = Instant::now() + Duration::from_secs(5);
        let stat = format!("/proc/{grandchild}/stat");
        let dead = || {
            std::fs::read_to_string(&stat)
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(true)
        };
        while !dead() && Instant::now() < end {
            thread::sleep(Duration::from_millis(20));
        }
        assert!(dead(), "the script's child {grandchild} survived");
    }

    #[test]
    fn cleanup_runs_in_a_forked_worker() {
        let body = "def run(ctx):\n    return 1.0\n\ndef cleanup():\n    1 / 0\n";
        let s = spec(SqlType::Double, body, &[]);
        warm(&s);
        let mut w = forked(&s);
        let pid = w.pid();
        one(&mut w);
        let e = w.finish().unwrap_err();
        assert!(
            e.to_string().contains("failed in cleanup() at line 5"),
            "{e}"
        );
        assert!(gone(pid));
    }

    /// `pid`'s parent and process group, from `/proc/<pid>/stat`.
    fn parent_and_group(pid: u32) -> Option<(u32, u32)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(1);
        Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
    }

    /// The spare `server` keeps, waiting up to 10 s for one (it is forked after an answer).
    fn spare_of(server: &ForkServer) -> u32 {
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = server.spare_pid() {
                return pid;
            }
            assert!(Instant::now() < end, "the server keeps no spare");
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_ready_server_keeps_a_spare_that_becomes_the_next_worker() {
        // Module-level code runs in each worker, not in the spare: `started` is this process's.
        let body = "import os, time\nstarted = (os.getpid(), time.time())\n\ndef run(ctx):\n    return '%d %d' % (started[0], os.getpid())\n";
        let s = spec(SqlType::Varchar(40), body, &[]);
        let server = warm(&s);
        let server_pid = server.pid().unwrap();
        let spare = spare_of(&server);
        // A child of the server in a process group of its own, running no statement.
        assert_eq!(parent_and_group(spare), Some((server_pid, spare)));
        let listed = warm_starts();
        let me = listed
            .iter()
            .find(|w| w.server_pid == Some(server_pid))
            .expect("the server is listed");
        assert_eq!((me.state, me.spare_pid), ("ready", Some(spare)));

        let mut w = forked(&s);
        assert_eq!(w.pid(), spare, "the spare was not the next worker");
        let text = one(&mut w).as_string::<i32>().value(0).to_string();
        assert_eq!(text, format!("{spare} {spare}"));
        // The next spare is forked while the worker runs.
        let next = spare_of(&server);
        assert_ne!(next, spare);
        assert_eq!(parent_and_group(next), Some((server_pid, next)));
        w.finish().unwrap();
        assert!(gone(spare));
        assert_eq!(spare_of(&server), next, "the spare waiting was replaced");
        let mut w = forked(&s);
        assert_eq!(w.pid(), next);
        one(&mut w);
        drop(w);
        assert!(gone(next));

        // A spare that dies is replaced; the request it would have served is forked.
        let dead = spare_of(&server);
        // SAFETY: kill has no memory-safety preconditions; the pid is the server's child.
        unsafe { libc::kill(dead as libc::pid_t, libc::SIGKILL) };
        let end = Instant::now() + Duration::from_secs(5);
        while parent_and_group(dead).is_some() && Instant::now() < end {
            thread::sleep(Duration::from_millis(10));
        }
        let mut w = forked(&s);
        assert_ne!(w.pid(), dead);
        one(&mut w);
        w.finish().unwrap();

        // The spare dies with its server.
        let last = spare_of(&server);
        drop(server);
        // SAFETY: as above; the server is our unreaped child.
        unsafe { libc::kill(server_pid as libc::pid_t, libc::SIGKILL) };
        let end = Instant::now() + Duration::from_secs(5);
        while parent_and_group(last).is_some() && Instant::now() < end {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            parent_and_group(last).is_none(),
            "spare {last} outlived its server"
        );
    }

    #[test]
    fn a_killed_server_is_replaced_by_spawned_workers() {
        let s = spec(
            SqlType::Double,
            "import time\n\ndef run(ctx):\n    time.sleep(ctx.size() * 30)\n    return 1.0\n",
            &[],
        );
        let server = warm(&s);
        let mut w = forked(&s);
        let pid = w.pid();
        let server_pid = server
            .child
            .lock()
            .unwrap()
            .as_ref()
            .map(Child::id)
            .unwrap();
        drop(server);
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
        unsafe { libc::kill(server_pid as libc::pid_t, libc::SIGKILL) };
        // Its worker dies with it, mid-run, and says so.
        let e = w.run(1, &[]).unwrap_err();
        assert_eq!(e.code(), "58U11", "{e}");
        assert!(e.to_string().contains("killed by signal 9"), "{e}");
        let end = Instant::now() + Duration::from_secs(5);
        while !gone(pid) && Instant::now() < end {
            thread::sleep(Duration::from_millis(20));
        }
        assert!(gone(pid));
        // The next worker is spawned (the dead server is noticed), and works.
        let mut w =
            PythonWorker::start(Arc::clone(&s), WorkerContext::default(), &[], None).unwrap();
        assert!(!w.is_forked());
        assert_eq!(w.run(0, &[]).unwrap()[0].len(), 0);
        w.finish().unwrap();
    }
}
