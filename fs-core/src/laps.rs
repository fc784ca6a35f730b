//! [`Laps`]: the split times of a long operation (opening a store), each
//! part named, for its log line. Owns nothing else.

use std::fmt;
use std::time::{Duration, Instant};

/// Named parts of an operation, each the time since the previous mark.
pub(crate) struct Laps {
    last: Instant,
    parts: Vec<(&'static str, Duration)>,
}

impl Default for Laps {
    fn default() -> Self {
        Laps {
            last: Instant::now(),
            parts: Vec::new(),
        }
    }
}

impl Laps {
    /// Ends the current part, naming it `name` (parts of one name add up).
    pub(crate) fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        let d = now - self.last;
        self.last = now;
        match self.parts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, t)) => *t += d,
            None => self.parts.push((name, d)),
        }
    }
}

impl fmt::Display for Laps {
    /// "a 1.2, b 0.3" (milliseconds).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, d)) in self.parts.iter().enumerate() {
            write!(
                f,
                "{}{n} {:.1}",
                if i > 0 { ", " } else { "" },
                d.as_secs_f64() * 1e3
            )?;
        }
        Ok(())
    }
}
