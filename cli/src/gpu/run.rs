//! `accelsql gpu run`: select GPUs, hold their cross-process locks, run a command on them.

use std::ffi::OsString;
use std::process::{Command, ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use accelsql_gpu_scheduler::{
    DeviceFilter, DeviceInfo, DeviceLock, DeviceLockDir, Inventory, SchedulerConfig, SchedulerError,
};
use clap::Args;

use super::args::{FilterArgs, LockDirArg, parse_timeout};
use crate::error::CliError;

/// Options of `accelsql gpu run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// How many GPUs the command gets.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    count: u32,
    #[command(flatten)]
    filter: FilterArgs,
    /// Wait until enough matching GPUs are free instead of failing at once.
    #[arg(long)]
    wait: bool,
    /// With --wait: give up after this long, e.g. 30s, 10min.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, requires = "wait")]
    timeout: Option<Duration>,
    #[command(flatten)]
    lock_dir: LockDirArg,
    /// The command and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<OsString>,
}

/// Pause between tries while waiting for busy GPUs (plus a per-process jitter).
const POLL: Duration = Duration::from_millis(100);

/// Selects and locks GPUs, runs the command, and returns its exit code.
pub(crate) fn run(config: &SchedulerConfig, args: RunArgs) -> Result<ExitCode, CliError> {
    let inventory = Inventory::from_config(config)?;
    let filter = args.filter.to_filter()?;
    let locks = DeviceLockDir::open(args.lock_dir.resolve(config))?;
    let program = args.command[0].to_string_lossy().into_owned();
    let tag = format!("accelsql gpu run {program}");
    let held = acquire(
        &inventory,
        &filter,
        &locks,
        args.count as usize,
        &tag,
        args.wait.then_some(args.timeout),
    )?;

    let devices: Vec<&DeviceInfo> = held.iter().map(|(d, _)| d).collect();
    let indices: Vec<String> = devices.iter().map(|d| d.index.to_string()).collect();
    let uuids: Vec<&str> = devices.iter().map(|d| d.uuid.as_str()).collect();
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("CUDA_VISIBLE_DEVICES", indices.join(","))
        .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        .env("ACCELSQL_GPU_UUIDS", uuids.join(","));
    child::die_with_parent(&mut command);
    let mut child = command.spawn().map_err(|source| CliError::Spawn {
        command: program,
        source,
    })?;
    let status = child::wait_forwarding_signals(&mut child).map_err(|source| CliError::Spawn {
        command: args.command[0].to_string_lossy().into_owned(),
        source,
    })?;
    // The locks are held until here: the command's whole life.
    drop(held);
    Ok(ExitCode::from(exit_code(status)))
}

/// `Some(timeout)` waits (for ever when the timeout is `None`); `None` fails at once when busy.
fn acquire(
    inventory: &Inventory,
    filter: &DeviceFilter,
    locks: &DeviceLockDir,
    count: usize,
    tag: &str,
    wait: Option<Option<Duration>>,
) -> Result<Vec<(DeviceInfo, DeviceLock)>, CliError> {
    let started = Instant::now();
    let mut announced = false;
    let jitter = Duration::from_millis(u64::from(std::process::id() % 50));
    loop {
        let devices = inventory.devices()?;
        // Too few matching GPUs is final: waiting cannot help, so say why at once.
        let matching = filter
            .select(&devices, count)
            .map(|_| filter.matching(&devices))?;
        let mut held = Vec::with_capacity(count);
        let mut busy = Vec::new();
        for device in matching {
            if held.len() == count {
                break;
            }
            match locks.try_lock(&device.uuid, tag)? {
                Some(lock) => held.push((device, lock)),
                None => busy.push(device),
            }
        }
        if held.len() == count {
            return Ok(held);
        }
        // Never hold some GPUs while waiting for others: that is how two waiters deadlock.
        drop(held);
        let who = describe_busy(locks, &busy);
        let Some(timeout) = wait else {
            return Err(SchedulerError::DevicesBusy {
                message: format!("{count} GPU(s) requested but the matching ones are in use: {who}. Pass --wait to wait for them"),
            }
            .into());
        };
        if let Some(limit) = timeout
            && started.elapsed() >= limit
        {
            let waited = started.elapsed();
            return Err(SchedulerError::DevicesBusy {
                message: format!(
                    "gave up after waiting {waited:.1?} for {count} free GPU(s); in use: {who}"
                ),
            }
            .into());
        }
        if !announced {
            eprintln!("accelsql: waiting for {count} free GPU(s); in use: {who}");
            announced = true;
        }
        std::thread::sleep(POLL + jitter);
    }
}

fn describe_busy(locks: &DeviceLockDir, busy: &[DeviceInfo]) -> String {
    busy.iter()
        .map(|d| {
            let holder = locks
                .holder_of(&d.uuid)
                .unwrap_or_else(|| "holder unknown".into());
            format!("GPU {} ({holder})", d.index)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The shell's convention: the exit code, or 128 + the signal that killed the command.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

/// The child's life tied to ours, and signals passed on to it.
mod child {
    use std::process::{Child, Command, ExitStatus};
    use std::sync::atomic::{AtomicI32, Ordering};

    /// Pid of the running command, for the signal handler.
    static CHILD: AtomicI32 = AtomicI32::new(0);

    /// The command must not outlive our locks: if this process dies (even by SIGKILL), the
    /// kernel kills the command too (Linux `PR_SET_PDEATHSIG`).
    pub(super) fn die_with_parent(command: &mut Command) {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            let parent = std::process::id();
            let hook = move || {
                // SAFETY: plain syscalls with constant arguments.
                if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                // SAFETY: as above.
                if unsafe { libc::getppid() } as u32 != parent {
                    // SAFETY: as above.
                    unsafe { libc::raise(libc::SIGKILL) };
                }
                Ok(())
            };
            // SAFETY: the hook runs in the forked child before exec and calls only
            // async-signal-safe functions (prctl, getppid, raise); it allocates nothing.
            unsafe { command.pre_exec(hook) };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = command;
    }

    extern "C" fn forward(signal: libc::c_int) {
        let pid = CHILD.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// Waits for the command. Meanwhile SIGINT and SIGQUIT are ignored here (the terminal sends
    /// them to the command too, as `system()` does), and SIGTERM and SIGHUP are passed on, so the
    /// locks stay held until the command has finished.
    pub(super) fn wait_forwarding_signals(child: &mut Child) -> std::io::Result<ExitStatus> {
        CHILD.store(child.id() as i32, Ordering::SeqCst);
        // SAFETY: installing dispositions for this process; `forward` is async-signal-safe.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
            let handler = forward as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::signal(libc::SIGTERM, handler);
            libc::signal(libc::SIGHUP, handler);
        }
        child.wait()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }

    #[test]
    fn busy_devices_fail_at_once_without_wait_and_name_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let locks = DeviceLockDir::open(dir.path()).unwrap();
        let inventory = Inventory::simulated(2);
        let first = acquire(&inventory, &DeviceFilter::new(), &locks, 1, "job-a", None).unwrap();
        assert_eq!(first[0].0.index, 0);
        let second = acquire(&inventory, &DeviceFilter::new(), &locks, 1, "job-b", None).unwrap();
        assert_eq!(
            second[0].0.index, 1,
            "the free GPU is taken, not the busy one"
        );
        let e = acquire(&inventory, &DeviceFilter::new(), &locks, 1, "job-c", None).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("[53G02]") && text.contains("job-a") && text.contains("--wait"),
            "{text}"
        );
        let e = acquire(
            &inventory,
            &DeviceFilter::new(),
            &locks,
            1,
            "job-c",
            Some(Some(Duration::from_millis(150))),
        )
        .unwrap_err();
        assert!(e.to_string().contains("gave up after waiting"), "{e}");
        drop(first);
        let third = acquire(
            &inventory,
            &DeviceFilter::new(),
            &locks,
            1,
            "job-c",
            Some(None),
        )
        .unwrap();
        assert_eq!(third[0].0.index, 0);
    }

    #[test]
    fn too_few_matching_devices_fail_even_with_wait() {
        let dir = tempfile::tempdir().unwrap();
        let locks = DeviceLockDir::open(dir.path()).unwrap();
        let e = acquire(
            &Inventory::simulated(1),
            &DeviceFilter::new(),
            &locks,
            2,
            "x",
            Some(None),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("[53G01] 2 GPU(s) requested but 1 of 1 matched"),
            "{e}"
        );
        assert_eq!(e.exit_code(), crate::error::EXIT_OWN_FAILURE);
    }
}
