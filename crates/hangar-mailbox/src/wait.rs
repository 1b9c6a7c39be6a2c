//! Waiting for the driver's signed ack: one deadline and one schedule of pauses, for every
//! waiter. A blocking caller ([`crate::Mailbox::wait`]) sleeps the pauses on its thread; the
//! control plane sleeps them on its async runtime (whose timer rounds them up to its 1 ms tick,
//! so no thread is held per waiting command). Either way the wait itself, the ack's checks and
//! the timeout are this one loop's.

use std::time::{Duration, Instant};

use crate::outbox::{Mailbox, MailboxError, Outcome, Sent};

/// The first pause of [`next_pause`]'s schedule.
pub const FIRST_PAUSE: Duration = Duration::from_micros(50);

/// The polling schedule for an ack: start at [`FIRST_PAUSE`] and double, at most 250 us while an
/// answer is due (an idle driver answers in well under a millisecond), at most 5 ms once the
/// driver is clearly busy (after 100 ms), so a long wait costs little CPU.
pub fn next_pause(pause: Duration, waited: Duration) -> Duration {
    let cap = if waited < Duration::from_millis(100) {
        Duration::from_micros(250)
    } else {
        Duration::from_millis(5)
    };
    (pause * 2).min(cap)
}

/// What one look for the ack found.
#[derive(Clone, Debug, PartialEq)]
pub enum Poll {
    /// The driver's signed answer.
    Answered(Outcome),
    /// Not there yet: look again after this pause.
    Again(Duration),
}

/// One wait for one command's ack.
#[derive(Clone, Debug)]
pub struct AckWait {
    started: Instant,
    timeout: Duration,
    pause: Duration,
}

impl AckWait {
    /// A wait that gives up after `timeout`.
    pub fn new(timeout: Duration) -> AckWait {
        AckWait {
            started: Instant::now(),
            timeout,
            pause: FIRST_PAUSE,
        }
    }

    /// Looks for the ack once: the answer, the pause before the next look, or
    /// [`MailboxError::Timeout`] once the wait is over.
    pub fn poll(&mut self, mailbox: &Mailbox, sent: &Sent) -> Result<Poll, MailboxError> {
        if let Some(outcome) = mailbox.poll_ack(sent) {
            return Ok(Poll::Answered(outcome));
        }
        let waited = self.started.elapsed();
        if waited >= self.timeout {
            return Err(MailboxError::Timeout(self.timeout));
        }
        let pause = self.pause;
        self.pause = next_pause(pause, waited);
        Ok(Poll::Again(pause))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_starts_fine_and_slows_once_the_driver_is_busy() {
        let mut p = FIRST_PAUSE;
        let mut early = vec![p];
        for _ in 0..4 {
            p = next_pause(p, Duration::from_millis(1));
            early.push(p);
        }
        let us = |n| Duration::from_micros(n);
        assert_eq!(early, vec![us(50), us(100), us(200), us(250), us(250)]);
        let mut late = p;
        for _ in 0..10 {
            late = next_pause(late, Duration::from_millis(150));
        }
        assert_eq!(late, Duration::from_millis(5));
    }
}
