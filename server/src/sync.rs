//! Locking the server's shared maps.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking over a poisoned lock (the data stay consistent: every critical section
/// here is a map insert or removal).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
