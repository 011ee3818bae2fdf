//! The gpu-scheduler error type, its stable codes, and the `*_err!` constructor macros.

use std::time::Duration;

/// Result type of this crate.
pub type Result<T, E = SchedulerError> = std::result::Result<T, E>;

/// Everything that can go wrong while finding, selecting, leasing or locking devices.
///
/// Each variant carries a stable, SQLSTATE-style code (see [`SchedulerError::code`]) that
/// users and tests match on; the message says what happened and what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// A user-supplied value (environment variable, filter, size, duration) could not be parsed.
    #[error("[{}] invalid {what}: {message}", Self::INVALID_VALUE)]
    InvalidValue {
        /// What was being parsed, e.g. `CUDA_VISIBLE_DEVICES`.
        what: String,
        /// Why the value is wrong and which forms are accepted.
        message: String,
    },

    /// Fewer devices passed the selection filters than were requested.
    #[error(
        "[{}] {requested} GPU(s) requested but {matched} of {present} matched the filters{}",
        Self::NOT_ENOUGH_DEVICES,
        if report.is_empty() { String::new() } else { format!(":\n{report}") }
    )]
    NotEnoughDevices {
        /// How many devices were asked for.
        requested: usize,
        /// How many passed every filter.
        matched: usize,
        /// How many devices the inventory showed.
        present: usize,
        /// One line per device: selected, or the filter that rejected it.
        report: String,
    },

    /// Matching devices exist but are held by other leases or processes, and the caller chose not to wait.
    #[error("[{}] {message}", Self::DEVICES_BUSY)]
    DevicesBusy {
        /// Which devices are busy and who holds them.
        message: String,
    },

    /// Waiting for the node lease took longer than the configured timeout.
    #[error(
        "[{}] statement '{statement}' waited {waited:.1?} for the GPU lease and gave up (timeout {timeout:.1?}); {holder}. \
         Raise the timeout (e.g. SET accelsql.gpu_wait_timeout = '5min') or retry later",
        Self::LEASE_TIMEOUT
    )]
    LeaseTimeout {
        /// The statement that waited.
        statement: String,
        /// How long it waited.
        waited: Duration,
        /// The configured limit.
        timeout: Duration,
        /// Who held the lease (or the device lock) when the wait ended.
        holder: String,
    },

    /// A consumer group already has as many statements waiting for the node lease as it may
    /// (`max_group_waiters`); one more is refused at once instead of queued.
    #[error(
        "[{}] statement '{statement}' was not queued for the GPU lease: {max} statement(s) of {} \
         already wait, the most it may have waiting. Retry later, or raise the group's limit \
         (ALTER CONSUMER GROUP … SET MAX_GPU_WAITERS = …)",
        Self::TOO_MANY_WAITERS,
        if group.is_empty() {
            "the statements without a consumer group".to_string()
        } else {
            format!("consumer group '{group}'")
        }
    )]
    TooManyWaiters {
        /// The consumer group (empty for statements without one).
        group: String,
        /// Its limit on waiting statements.
        max: usize,
        /// The statement that was refused.
        statement: String,
    },

    /// A statement declared more device memory than the node's devices could ever reserve for
    /// it, so waiting would never end.
    #[error(
        "[{}] statement '{statement}' declares more GPU memory than this node can reserve: \
         {detail}. Declare less (%perInstanceRequiredAcceleratorMemory), lower the instance \
         limit, or lower gpu_memory_headroom",
        Self::DEMAND_TOO_LARGE
    )]
    DemandTooLarge {
        /// The statement.
        statement: String,
        /// What it asked for and what the largest device can reserve.
        detail: String,
    },

    /// The lease queue was closed (the engine is shutting down).
    #[error(
        "[{}] the GPU lease queue is closed: the engine is shutting down",
        Self::QUEUE_CLOSED
    )]
    QueueClosed,

    /// A device lock file could not be created, opened or locked.
    #[error(
        "[{}] device lock {path}: {source}. Check that ACCELSQL_DEVICE_LOCK_DIR is a directory every GPU user can write",
        Self::DEVICE_LOCK
    )]
    DeviceLock {
        /// The lock file or directory.
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// The device inventory (NVML) failed after it had started.
    #[error("[{}] GPU inventory: {message}", Self::INVENTORY)]
    Inventory {
        /// What failed.
        message: String,
    },
}

impl SchedulerError {
    /// Code of [`SchedulerError::InvalidValue`].
    pub const INVALID_VALUE: &'static str = "22G01";
    /// Code of [`SchedulerError::NotEnoughDevices`].
    pub const NOT_ENOUGH_DEVICES: &'static str = "53G01";
    /// Code of [`SchedulerError::DevicesBusy`].
    pub const DEVICES_BUSY: &'static str = "53G02";
    /// Code of [`SchedulerError::DemandTooLarge`].
    pub const DEMAND_TOO_LARGE: &'static str = "53G03";
    /// Code of [`SchedulerError::LeaseTimeout`].
    pub const LEASE_TIMEOUT: &'static str = "57G01";
    /// Code of [`SchedulerError::QueueClosed`].
    pub const QUEUE_CLOSED: &'static str = "57G02";
    /// Code of [`SchedulerError::TooManyWaiters`] (57G03 is the engine's lease-held-too-long).
    pub const TOO_MANY_WAITERS: &'static str = "57G04";
    /// Code of [`SchedulerError::DeviceLock`].
    pub const DEVICE_LOCK: &'static str = "58G01";
    /// Code of [`SchedulerError::Inventory`].
    pub const INVENTORY: &'static str = "58G02";

    /// The stable code of this error, e.g. `"57G01"` for a lease timeout.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidValue { .. } => Self::INVALID_VALUE,
            Self::NotEnoughDevices { .. } => Self::NOT_ENOUGH_DEVICES,
            Self::DevicesBusy { .. } => Self::DEVICES_BUSY,
            Self::DemandTooLarge { .. } => Self::DEMAND_TOO_LARGE,
            Self::LeaseTimeout { .. } => Self::LEASE_TIMEOUT,
            Self::QueueClosed => Self::QUEUE_CLOSED,
            Self::TooManyWaiters { .. } => Self::TOO_MANY_WAITERS,
            Self::DeviceLock { .. } => Self::DEVICE_LOCK,
            Self::Inventory { .. } => Self::INVENTORY,
        }
    }
}

/// Builds a [`SchedulerError::InvalidValue`]: `invalid_value_err!("CUDA_VISIBLE_DEVICES", "bad entry {e:?}")`.
#[macro_export]
macro_rules! invalid_value_err {
    ($what:expr, $($arg:tt)*) => {
        $crate::SchedulerError::InvalidValue { what: ($what).to_string(), message: format!($($arg)*) }
    };
}

/// Builds a [`SchedulerError::DeviceLock`] from a path and an `io::Error`.
#[macro_export]
macro_rules! device_lock_err {
    ($path:expr, $source:expr) => {
        $crate::SchedulerError::DeviceLock {
            path: ($path).display().to_string(),
            source: $source,
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_start_with_their_code() {
        let errors = [
            invalid_value_err!("x", "bad"),
            SchedulerError::QueueClosed,
            SchedulerError::TooManyWaiters {
                group: "ETL".into(),
                max: 2,
                statement: "s1".into(),
            },
            SchedulerError::DevicesBusy {
                message: "busy".into(),
            },
            device_lock_err!(std::path::Path::new("/x"), std::io::Error::other("boom")),
        ];
        for e in errors {
            assert!(e.to_string().starts_with(&format!("[{}]", e.code())), "{e}");
        }
    }

    #[test]
    fn too_many_waiters_names_the_group_and_the_limit() {
        let e = SchedulerError::TooManyWaiters {
            group: "ETL".into(),
            max: 2,
            statement: "s7".into(),
        };
        assert_eq!(e.code(), "57G04");
        let text = e.to_string();
        assert!(
            text.starts_with("[57G04] statement 's7' was not queued"),
            "{text}"
        );
        assert!(
            text.contains("2 statement(s) of consumer group 'ETL' already wait"),
            "{text}"
        );
        assert!(text.contains("MAX_GPU_WAITERS"), "{text}");
        let e = SchedulerError::TooManyWaiters {
            group: String::new(),
            max: 1,
            statement: "s8".into(),
        };
        assert!(
            e.to_string()
                .contains("of the statements without a consumer group"),
            "{e}"
        );
    }

    #[test]
    fn not_enough_devices_lists_the_report() {
        let e = SchedulerError::NotEnoughDevices {
            requested: 2,
            matched: 1,
            present: 2,
            report: "  GPU 1: rejected".into(),
        };
        assert_eq!(
            e.to_string(),
            "[53G01] 2 GPU(s) requested but 1 of 2 matched the filters:\n  GPU 1: rejected"
        );
    }
}
