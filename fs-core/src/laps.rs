//! [`Laps`]: the split times of a long operation (opening a store), each
//! part named, for its log line: wall time and the process's CPU time
//! (all its threads: what a busy machine does not inflate as it does wall
//! time, D68). Also [`process_cpu`]. Owns nothing else.

use std::fmt;
use std::time::{Duration, Instant};

/// CPU time used so far by all threads of this process, ended ones
/// included (CLOCK_PROCESS_CPUTIME_ID; zero if the clock cannot be read).
pub fn process_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Named parts of an operation, each the time since the previous mark:
/// (name, wall, process CPU).
pub(crate) struct Laps {
    last: Instant,
    last_cpu: Duration,
    parts: Vec<(&'static str, Duration, Duration)>,
}

impl Default for Laps {
    fn default() -> Self {
        Laps {
            last: Instant::now(),
            last_cpu: process_cpu(),
            parts: Vec::new(),
        }
    }
}

impl Laps {
    /// Ends the current part, naming it `name` (parts of one name add up).
    pub(crate) fn lap(&mut self, name: &'static str) {
        let (now, cpu) = (Instant::now(), process_cpu());
        let (d, c) = (now - self.last, cpu.saturating_sub(self.last_cpu));
        (self.last, self.last_cpu) = (now, cpu);
        match self.parts.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, t, tc)) => {
                *t += d;
                *tc += c;
            }
            None => self.parts.push((name, d, c)),
        }
    }
}

impl fmt::Display for Laps {
    /// "a 1.2, b 0.3; cpu a 0.9, b 0.3" (milliseconds: wall, then the
    /// process's CPU time in each part).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: &Duration| d.as_secs_f64() * 1e3;
        for (i, (n, d, _)) in self.parts.iter().enumerate() {
            write!(f, "{}{n} {:.1}", if i > 0 { ", " } else { "" }, ms(d))?;
        }
        write!(f, "; cpu")?;
        for (i, (n, _, c)) in self.parts.iter().enumerate() {
            write!(f, "{} {n} {:.1}", if i > 0 { "," } else { "" }, ms(c))?;
        }
        Ok(())
    }
}
