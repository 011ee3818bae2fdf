//! Worker processes: spawning them (or having a fork server fork them) so that they die with the
//! engine, framed I/O over their socket with deadlines, their stderr, and killing and reaping them.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use super::wire::{FRAME_HEADER_LEN, MAX_FRAME_LEN};

/// How much of a worker's stderr is kept for error messages.
const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// Why a frame could not be exchanged.
#[derive(Debug)]
pub(crate) enum IoEnd {
    /// The worker closed its end: it exited or was killed.
    Closed,
    /// The deadline passed.
    Timeout,
    /// Anything else (a bad frame length, an unexpected socket error).
    Broken(String),
    /// The worker's resident memory passed its limit (bytes: what it had, the limit).
    OverMemory { resident: u64, limit: u64 },
    /// The worker's device memory passed its call's declaration (bytes: what it used, the
    /// declaration; the device's label).
    OverDeviceMemory {
        used: u64,
        declared: u64,
        device: String,
    },
}

/// Limits on a worker's resident memory and on its device memory, checked while the engine
/// waits for it.
#[derive(Debug, Clone)]
pub(crate) struct MemoryWatch {
    pid: u32,
    /// Resident memory, bytes.
    limit: Option<u64>,
    device: Option<DeviceWatch>,
}

/// A worker's device and its call's declaration (`%perInstanceRequiredAcceleratorMemory`).
#[derive(Debug, Clone)]
pub(crate) struct DeviceWatch {
    pub(crate) uuid: String,
    pub(crate) label: String,
    pub(crate) declared: u64,
    pub(crate) probe: std::sync::Arc<dyn crate::DeviceMemoryProbe>,
}

/// How often a watched worker's resident memory is read while the engine waits for it.
const MEMORY_CHECK_EVERY: Duration = Duration::from_millis(50);

impl MemoryWatch {
    /// How the worker is past a limit, if it is: resident memory (Linux: `/proc/PID/statm`;
    /// elsewhere never), then device memory (as the probe reads it).
    fn over(&self) -> Option<IoEnd> {
        if let Some(limit) = self.limit
            && let Some(resident) = tree_resident_bytes(self.pid)
            && resident > limit
        {
            return Some(IoEnd::OverMemory { resident, limit });
        }
        let device = self.device.as_ref()?;
        let used = device.probe.used(&device.uuid, self.pid)?;
        (used > device.declared).then(|| IoEnd::OverDeviceMemory {
            used,
            declared: device.declared,
            device: device.label.clone(),
        })
    }
}

/// The resident memory of process `pid`, in bytes (`None` where it cannot be read).
pub(crate) fn resident_bytes(pid: u32) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages.saturating_mul(u64::try_from(page).ok().filter(|&p| p > 0)?))
}

/// The resident memory of process `pid` and of every process it started (Linux; children
/// that left its process group included): what counts against a worker's memory limit.
fn tree_resident_bytes(pid: u32) -> Option<u64> {
    let own = resident_bytes(pid)?;
    Some(
        descendants(pid)
            .into_iter()
            .filter_map(resident_bytes)
            .fold(own, u64::saturating_add),
    )
}

/// Every process below `pid` (its children, theirs, …), from `/proc/PID/task/TID/children`;
/// empty where that cannot be read. A worker is its children's orphans' subreaper, so a
/// process it started stays below it even after a double fork.
pub(crate) fn descendants(pid: u32) -> Vec<u32> {
    /// Far more than a worker may start: a bound on a malicious fork bomb's cost here.
    const MOST: usize = 4096;
    let mut found = Vec::new();
    let mut todo = vec![pid];
    while let Some(next) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{next}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Ok(children) = std::fs::read_to_string(task.path().join("children")) else {
                continue;
            };
            for child in children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok())
            {
                if found.len() >= MOST {
                    return found;
                }
                if !found.contains(&child) {
                    found.push(child);
                    todo.push(child);
                }
            }
        }
    }
    found
}

/// Kills `pids` (a worker's descendants, found while it lived).
fn kill_all(pids: &[u32]) {
    for &pid in pids {
        if let Ok(pid) = libc::pid_t::try_from(pid) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Script workers this process started, ended, and ended by a signal (a kill or a crash),
/// since it started: for metrics ([`worker_counts`]).
static WORKERS: [std::sync::atomic::AtomicU64; 3] =
    [const { std::sync::atomic::AtomicU64::new(0) }; 3];

/// How many script workers this process has started, ended and seen end by a signal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerCounts {
    /// Started, by the engine or a fork server.
    pub started: u64,
    /// Ended (their process reaped).
    pub ended: u64,
    /// Of those, ended by a signal: killed (a statement stopped, a limit passed) or crashed.
    pub killed: u64,
}

impl WorkerCounts {
    /// Workers alive now.
    pub fn alive(&self) -> u64 {
        self.started.saturating_sub(self.ended)
    }
}

/// This process's [`WorkerCounts`].
pub fn worker_counts() -> WorkerCounts {
    let [started, ended, killed] = &WORKERS;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    WorkerCounts {
        started: load(started),
        ended: load(ended),
        killed: load(killed),
    }
}

/// Counts one worker started.
fn count_started() {
    WORKERS[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How long a worker whose fork server was asked to kill it may take to be reported dead.
const KILL_REPORT_WAIT: Duration = Duration::from_secs(10);

/// A started worker: the process (and who reaps it), the engine's end of its socket, and its
/// stderr.
#[derive(Debug)]
pub(crate) struct Process {
    owner: Owner,
    sock: UnixStream,
    stderr: Arc<StderrTail>,
    pid: u32,
    /// The worker's resident memory limit, checked while the engine waits on it.
    watch: Option<MemoryWatch>,
}

/// Who reaps a worker.
#[derive(Debug)]
enum Owner {
    /// The engine: it spawned the worker.
    Engine(Child),
    /// A fork server forked it, and reports its end on `status` (see `fork_server.rs`).
    ForkServer {
        server: Arc<dyn WorkerParent>,
        status: OwnedFd,
    },
}

/// The parent of a worker that the engine did not spawn: the fork server that forked it (see
/// `fork_server.rs`), which reaps it and kills it when asked.
pub(crate) trait WorkerParent: Send + Sync + std::fmt::Debug {
    /// Kills worker `pid`'s process group now (its end is reported as usual). A parent that is
    /// gone took its workers with it.
    fn kill(&self, pid: u32);
}

/// Makes `cmd` start its process in a process group of its own, (on Linux) killed when the
/// engine dies, and in the workers' sandbox (see `sandbox.rs`).
pub(crate) fn die_with_engine(cmd: &mut Command) {
    cmd.process_group(0);
    // Another OS user (a server run as root): the standard library drops the groups, sets the
    // group and the user after fork and before the closure below (so the parent-death signal,
    // which a change of user clears, is set after it).
    if let Some(user) = super::sandbox::script_user() {
        cmd.gid(user.gid).uid(user.uid);
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // Built here, entered in the child: entering is two system calls.
        let ruleset = super::sandbox::ruleset();
        // SAFETY: the closure runs in the forked child before exec and calls only
        // async-signal-safe functions (prctl, getppid) and allocates nothing (the errors are
        // built from raw OS codes).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                // The engine may have died between fork and prctl: then nobody would kill us.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                // Orphans of the worker's children are reparented to it, not to init, so that
                // they stay its descendants: counted, and killed with it.
                if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(ruleset) = &ruleset {
                    super::sandbox::enter(std::os::fd::AsRawFd::as_raw_fd(ruleset.as_ref()))?;
                }
                Ok(())
            });
        }
    }
}

impl Process {
    /// Ends every later exchange with [`IoEnd::OverMemory`] once the worker's resident memory
    /// passes `limit` bytes (checked every 50 ms while the engine waits on the worker).
    pub(crate) fn limit_memory(&mut self, limit: u64) {
        let watch = self.watch.get_or_insert(MemoryWatch {
            pid: self.pid,
            limit: None,
            device: None,
        });
        watch.limit = Some(limit);
    }

    /// Ends every later exchange with [`IoEnd::OverDeviceMemory`] once the worker uses more of
    /// its device's memory than `device` declares (read every 50 ms while the engine waits).
    pub(crate) fn limit_device_memory(&mut self, device: DeviceWatch) {
        let watch = self.watch.get_or_insert(MemoryWatch {
            pid: self.pid,
            limit: None,
            device: None,
        });
        watch.device = Some(device);
    }

    /// Starts `cmd` with the child's end of a new socket pair as its stdin and stdout, its stderr
    /// captured, in its own process group, and (on Linux) killed when the engine dies.
    pub(crate) fn spawn(mut cmd: Command) -> io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        let theirs_out = theirs.try_clone()?;
        cmd.stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::from(OwnedFd::from(theirs_out)))
            .stderr(Stdio::piped());
        die_with_engine(&mut cmd);
        let mut child = spawn_from_long_lived_thread(cmd)?;
        let pid = child.id();
        count_started();
        let stderr = match child.stderr.take() {
            Some(pipe) => StderrTail::drained(pid, pipe),
            None => StderrTail::closed(),
        };
        ours.set_nonblocking(true)?;
        Ok(Self {
            owner: Owner::Engine(child),
            sock: ours,
            stderr,
            pid,
            watch: None,
        })
    }

    /// A worker that `server` forked: `sock` is the engine's end of its socket, `stderr` the read
    /// end of its stderr pipe, `status` the read end of the pipe on which the server reports its
    /// end.
    pub(crate) fn forked(
        server: Arc<dyn WorkerParent>,
        pid: u32,
        sock: UnixStream,
        stderr: OwnedFd,
        status: OwnedFd,
    ) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        count_started();
        Ok(Self {
            owner: Owner::ForkServer { server, status },
            sock,
            stderr: StderrTail::drained(pid, std::fs::File::from(stderr)),
            pid,
            watch: None,
        })
    }

    /// Whether a fork server started this worker.
    pub(crate) fn is_forked(&self) -> bool {
        matches!(self.owner, Owner::ForkServer { .. })
    }

    /// The worker's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The last lines of the worker's stderr; waits up to `settle` for the pipe to close first,
    /// so that what a dying worker printed last is included.
    pub(crate) fn stderr_tail(&self, settle: Duration) -> String {
        self.stderr.text(settle)
    }

    /// A shared handle on the stderr tail (it outlives the process).
    pub(crate) fn stderr_handle(&self) -> Arc<StderrTail> {
        Arc::clone(&self.stderr)
    }

    /// Sends one frame.
    pub(crate) fn send(
        &mut self,
        kind: u8,
        payload: &[u8],
        deadline: Option<Instant>,
    ) -> Result<(), IoEnd> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        header[..8].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        header[8] = kind;
        send_all(
            self.sock.as_raw_fd(),
            &header,
            deadline,
            self.watch.as_ref(),
        )?;
        send_all(
            self.sock.as_raw_fd(),
            payload,
            deadline,
            self.watch.as_ref(),
        )
    }

    /// Receives one frame: `(kind, payload)`.
    pub(crate) fn recv(&mut self, deadline: Option<Instant>) -> Result<(u8, Vec<u8>), IoEnd> {
        let mut header = [0u8; FRAME_HEADER_LEN];
        let watch = self.watch.clone();
        let watch = watch.as_ref();
        recv_exact(&mut self.sock, &mut header, deadline, watch)?;
        let mut len_bytes = [0u8; 8];
        len_bytes.copy_from_slice(&header[..8]);
        let len = u64::from_le_bytes(len_bytes);
        if len > MAX_FRAME_LEN {
            return Err(IoEnd::Broken(format!(
                "a frame of {len} bytes (the limit is {MAX_FRAME_LEN})"
            )));
        }
        // The length is the worker's word, and a worker runs user code: memory grows with the
        // bytes that really arrive (a step at a time), never with what the header claims.
        let len =
            usize::try_from(len).map_err(|_| IoEnd::Broken(format!("a frame of {len} bytes")))?;
        let mut payload = Vec::with_capacity(len.min(RECV_STEP));
        while payload.len() < len {
            let filled = payload.len();
            let step = (len - filled).min(RECV_STEP.max(filled));
            // Fallibly: a frame the process has no memory for breaks the worker's statement,
            // not the process.
            payload
                .try_reserve_exact(step)
                .map_err(|e| IoEnd::Broken(format!("no memory for a frame of {len} bytes: {e}")))?;
            payload.resize(filled + step, 0);
            recv_exact(&mut self.sock, &mut payload[filled..], deadline, watch)?;
        }
        Ok((header[8], payload))
    }

    /// Waits up to `grace` for the worker to exit on its own, then kills its whole process group
    /// (the worker and anything it started) and reaps it. Returns how it ended.
    pub(crate) fn terminate(self, grace: Duration) -> ExitStatus {
        // Whatever the worker started ends with it, even a double-forked grandchild in a
        // session of its own (the worker is its subreaper, so it is still below it now; once
        // the worker is gone it would not be).
        let below = descendants(self.pid);
        let status = self.end(grace);
        kill_all(&below);
        WORKERS[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if status.signal().is_some() {
            WORKERS[2].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        status
    }

    /// [`Process::terminate`] of the worker itself.
    fn end(self, grace: Duration) -> ExitStatus {
        match self.owner {
            Owner::Engine(child) => terminate_child(child, self.pid, grace),
            Owner::ForkServer { server, status } => {
                // The server kills the group and reaps the worker as soon as it exits, then
                // reports; it kills it now when asked to.
                if let Some(s) = read_exit_report(&status, Some(Instant::now() + grace)) {
                    return s;
                }
                server.kill(self.pid);
                read_exit_report(&status, Some(Instant::now() + KILL_REPORT_WAIT))
                    .unwrap_or_else(|| ExitStatus::from_raw(libc::SIGKILL))
            }
        }
    }
}

/// How much of a frame's payload is allocated before its bytes arrive (then doubling as they
/// do): a forged length costs at most this.
const RECV_STEP: usize = 1 << 20;

/// The fork server's report that a worker ended (`b"X"` and its wait status), waiting until
/// `deadline`; `None` if none came by then. If the server itself is gone (end of file), so is the
/// worker: its parent-death signal killed it.
fn read_exit_report(status: &OwnedFd, deadline: Option<Instant>) -> Option<ExitStatus> {
    let mut report = [0u8; 5];
    match read_full(status.as_raw_fd(), &mut report, deadline) {
        Ok(true) if report[0] == b'X' => Some(ExitStatus::from_raw(i32::from_le_bytes([
            report[1], report[2], report[3], report[4],
        ]))),
        Ok(_) => Some(ExitStatus::from_raw(libc::SIGKILL)),
        Err(IoEnd::Timeout) => None,
        Err(_) => Some(ExitStatus::from_raw(libc::SIGKILL)),
    }
}

/// Fills `buf` from the non-blocking `fd`; `Ok(false)` at end of file before it is full.
pub(crate) fn read_full(
    fd: RawFd,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> Result<bool, IoEnd> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: `rest` is a valid, writable buffer of `rest.len()` bytes and `fd` is open.
        let n = unsafe { libc::read(fd, rest.as_mut_ptr().cast(), rest.len()) };
        if n > 0 {
            filled += n as usize;
            continue;
        }
        if n == 0 {
            return Ok(false);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => wait_ready(fd, libc::POLLIN, deadline)?,
            io::ErrorKind::Interrupted => {}
            _ => return Err(IoEnd::Broken(format!("reading a pipe: {e}"))),
        }
    }
    Ok(true)
}

/// [`Process::terminate`] of a worker the engine spawned.
fn terminate_child(mut child: Child, pid: u32, grace: Duration) -> ExitStatus {
    let end = Instant::now() + grace;
    let mut pause = Duration::from_micros(200);
    while !exited_unreaped(pid) && Instant::now() < end {
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
    // The worker is not reaped yet (at worst a zombie), so its pid, which is also its process
    // group id, cannot have been reused: the signal reaches only its group.
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(-(pid as libc::pid_t), libc::SIGKILL);
    }
    let _ = child.kill();
    loop {
        match child.wait() {
            Ok(status) => return status,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // Only if someone else reaped it; report it as killed.
            Err(_) => return ExitStatus::from_raw(libc::SIGKILL),
        }
    }
}

/// Whether the engine's child `pid` has exited (without reaping it, so its pid stays reserved).
fn exited_unreaped(pid: u32) -> bool {
    // SAFETY: siginfo_t is plain data for which all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the child waitable.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: waitid succeeded, so `info` is initialised; si_pid is 0 when nothing exited.
    r == 0 && unsafe { info.si_pid() } != 0
}

/// `exited with code 3`, `was killed by signal 9 (SIGKILL)`.
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exited with code {code}");
    }
    if let Some(sig) = status.signal() {
        let core = if status.core_dumped() {
            ", core dumped"
        } else {
            ""
        };
        return format!("was killed by signal {sig} ({}{core})", signal_name(sig));
    }
    format!("ended ({status})")
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "unknown signal",
    }
}

/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process; the
/// engine starts workers from short-lived (e.g. tokio blocking-pool) threads, so every worker is
/// forked by one thread that lives as long as the process.
pub(crate) fn spawn_from_long_lived_thread(cmd: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::SyncSender<io::Result<Child>>);
    static SPAWNER: OnceLock<Option<Mutex<Sender<Request>>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        thread::Builder::new()
            .name("accelsql-worker-spawner".to_string())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let result = cmd.spawn();
                    // Close the child's ends of its pipes here, before anyone waits for EOF.
                    drop(cmd);
                    let _ = reply.send(result);
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let Some(spawner) = spawner else {
        let mut cmd = cmd;
        return cmd.spawn();
    };
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the worker spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the worker spawner thread is gone"))?
}

fn send_all(
    fd: RawFd,
    mut data: &[u8],
    deadline: Option<Instant>,
    watch: Option<&MemoryWatch>,
) -> Result<(), IoEnd> {
    while !data.is_empty() {
        // SAFETY: `data` is a valid, initialised buffer of `data.len()` bytes and `fd` is our open
        // socket; MSG_NOSIGNAL turns a closed peer into EPIPE instead of SIGPIPE.
        let n = unsafe {
            libc::send(
                fd,
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 {
            data = &data[n as usize..];
            continue;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => wait_watched(fd, libc::POLLOUT, deadline, watch)?,
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => {
                return Err(IoEnd::Closed);
            }
            _ => return Err(IoEnd::Broken(format!("writing to the worker: {e}"))),
        }
    }
    Ok(())
}

fn recv_exact(
    sock: &mut UnixStream,
    buf: &mut [u8],
    deadline: Option<Instant>,
    watch: Option<&MemoryWatch>,
) -> Result<(), IoEnd> {
    let mut filled = 0;
    while filled < buf.len() {
        match sock.read(&mut buf[filled..]) {
            Ok(0) => return Err(IoEnd::Closed),
            Ok(n) => filled += n,
            Err(e) => match e.kind() {
                io::ErrorKind::WouldBlock => {
                    wait_watched(sock.as_raw_fd(), libc::POLLIN, deadline, watch)?;
                }
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::ConnectionReset => return Err(IoEnd::Closed),
                _ => return Err(IoEnd::Broken(format!("reading from the worker: {e}"))),
            },
        }
    }
    Ok(())
}

/// Waits until `fd` is ready for `events` (or hung up), or the deadline passes.
pub(crate) fn wait_ready(
    fd: RawFd,
    events: libc::c_short,
    deadline: Option<Instant>,
) -> Result<(), IoEnd> {
    wait_watched(fd, events, deadline, None)
}

/// [`wait_ready`], also ending when the watched worker's resident memory passes its limit.
fn wait_watched(
    fd: RawFd,
    events: libc::c_short,
    deadline: Option<Instant>,
    watch: Option<&MemoryWatch>,
) -> Result<(), IoEnd> {
    loop {
        if let Some(end) = watch.and_then(MemoryWatch::over) {
            return Err(end);
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Err(IoEnd::Timeout);
        }
        let wait = match (left, watch) {
            (Some(left), Some(_)) => Some(left.min(MEMORY_CHECK_EVERY)),
            (None, Some(_)) => Some(MEMORY_CHECK_EVERY),
            (left, None) => left,
        };
        // Round up, so that we never spin on a zero timeout just before the deadline.
        let timeout_ms = wait.map_or(-1, |w| {
            w.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
        });
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: `pfd` is a valid pollfd that lives across the call, and nfds is 1.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(IoEnd::Broken(format!("waiting for the worker: {e}")));
            }
        }
    }
}

/// The last [`STDERR_TAIL_BYTES`] a worker wrote to stderr, filled by a thread per worker.
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    state: Mutex<(VecDeque<u8>, bool)>,
    closed: Condvar,
}

impl StderrTail {
    /// A tail filled from `pipe` by a thread of its own (the stderr of worker `pid`).
    fn drained(pid: u32, pipe: impl Read + Send + 'static) -> Arc<Self> {
        let tail = Arc::new(Self::default());
        let filler = Arc::clone(&tail);
        let spawned = thread::Builder::new()
            .name(format!("accelsql-worker-{pid}-stderr"))
            .spawn(move || filler.drain(pipe));
        if spawned.is_err() {
            tail.mark_closed();
        }
        tail
    }

    /// A tail of a worker whose stderr cannot be read: empty.
    fn closed() -> Arc<Self> {
        let tail = Arc::new(Self::default());
        tail.mark_closed();
        tail
    }

    fn drain(&self, mut pipe: impl Read) {
        let mut buf = [0u8; 4096];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    state.0.extend(&buf[..n]);
                    let excess = state.0.len().saturating_sub(STDERR_TAIL_BYTES);
                    state.0.drain(..excess);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        self.mark_closed();
    }

    fn mark_closed(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.closed.notify_all();
    }

    /// The captured text (lossy UTF-8, starting at a line boundary when it was cut).
    pub(crate) fn text(&self, settle: Duration) -> String {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let end = Instant::now() + settle;
        while !state.1 {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .closed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let bytes: Vec<u8> = state.0.iter().copied().collect();
        drop(state);
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if bytes.len() >= STDERR_TAIL_BYTES
            && let Some(nl) = text.find('\n')
        {
            return format!("…{}", &text[nl..]);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_descriptions() {
        assert_eq!(
            describe_exit(ExitStatus::from_raw(3 << 8)),
            "exited with code 3"
        );
        assert_eq!(
            describe_exit(ExitStatus::from_raw(9)),
            "was killed by signal 9 (SIGKILL)"
        );
        assert_eq!(
            describe_exit(ExitStatus::from_raw(11 | 0x80)),
            "was killed by signal 11 (SIGSEGV, core dumped)"
        );
    }

    #[test]
    fn a_process_is_killed_and_reaped_with_its_group() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("sleep 30 & sleep 30");
        let p = Process::spawn(cmd).unwrap();
        let pid = p.pid();
        thread::sleep(Duration::from_millis(50));
        let status = p.terminate(Duration::ZERO);
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn reads_time_out_and_see_closed_peers() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo oops >&2; sleep 30");
        let mut p = Process::spawn(cmd).unwrap();
        let start = Instant::now();
        let r = p.recv(Some(Instant::now() + Duration::from_millis(100)));
        assert!(matches!(r, Err(IoEnd::Timeout)), "{r:?}");
        assert!(start.elapsed() >= Duration::from_millis(100));
        let status = p.terminate(Duration::ZERO);
        assert!(status.signal().is_some());

        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo bye >&2; exit 3");
        let mut p = Process::spawn(cmd).unwrap();
        assert!(matches!(p.recv(None), Err(IoEnd::Closed)));
        assert!(p.stderr_tail(Duration::from_secs(2)).contains("bye"));
        let status = p.terminate(Duration::from_secs(2));
        assert_eq!(status.code(), Some(3));
    }
}
