//! Ctrl-C while a statement runs: a SIGINT handler that raises a flag, and a future that
//! completes when it is raised, so the shell drops (cancels) the statement instead of dying.
//! At the prompt the terminal is in raw mode and rustyline reads Ctrl-C as a key instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT to the flag; returns false if the handler could not be installed (Ctrl-C then
/// ends the process, which releases every device too).
pub(crate) fn install() -> bool {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe, and the function
    // pointer has the `extern "C" fn(c_int)` type `signal` expects.
    let previous = unsafe {
        libc::signal(
            libc::SIGINT,
            on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
        )
    };
    previous != libc::SIG_ERR
}

/// Takes the flag: whether Ctrl-C was pressed since the last call.
pub(crate) fn take() -> bool {
    INTERRUPTED.swap(false, Ordering::SeqCst)
}

/// Completes once Ctrl-C is pressed (polled every 20 ms).
pub(crate) async fn wait() {
    while !take() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
