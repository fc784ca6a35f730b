//! [`LogThrottle`]: a warning that would repeat while a condition lasts (a
//! full disk failing every group commit, a pool failing to make files every
//! second) is logged at most once a minute. Owns nothing else.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When the condition was last logged; `None` while it is not happening.
#[derive(Default)]
pub(crate) struct LogThrottle(Mutex<Option<Instant>>);

impl LogThrottle {
    /// True, and the minute starts again, if nothing was logged in the last one.
    pub(crate) fn due(&self) -> bool {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// The condition is over: true if it had been logged.
    pub(crate) fn reset(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take().is_some()
    }
}
