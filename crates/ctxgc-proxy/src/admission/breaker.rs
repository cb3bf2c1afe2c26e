//! A circuit breaker in front of the store: when a store call fails (a stalled Redis, a locked
//! SQLite file past its deadline), the calls after it fail at once for a short rest instead of
//! each waiting out its own deadline, and one call then tries again.
//!
//! Without it a paused Redis cost every request three store calls of 2 s each: throughput fell
//! from ~280 to ~13 requests/s and readiness took 4 s to answer. A request whose store call is
//! refused is forwarded unchanged (fail open), which is what a timeout led to anyway.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the store rests after a failure before one call tries it again.
pub(crate) const REST: Duration = Duration::from_secs(1);

/// The breaker's state.
#[derive(Debug)]
enum State {
    /// Calls go through.
    Closed,
    /// Calls are refused until `until`; then the next one probes.
    Open { until: Instant, why: String },
    /// One call is probing; the others are refused.
    Probing { why: String },
}

/// The breaker.
#[derive(Debug)]
pub(crate) struct Breaker {
    state: Mutex<State>,
}

/// Why a call was refused: how long until the store is tried again, and its last failure.
#[derive(Debug, Clone)]
pub(crate) struct Resting {
    pub(crate) left: Duration,
    pub(crate) why: String,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            state: Mutex::new(State::Closed),
        }
    }
}

impl Breaker {
    /// Whether a call may go to the store now (a call let through after a rest is the probe,
    /// and must report with [`Breaker::succeeded`] or [`Breaker::failed`]).
    pub(crate) fn admit(&self) -> Result<(), Resting> {
        let Ok(mut state) = self.state.lock() else {
            return Ok(());
        };
        match &*state {
            State::Closed => Ok(()),
            State::Open { until, why } => {
                let now = Instant::now();
                if now < *until {
                    return Err(Resting {
                        left: *until - now,
                        why: why.clone(),
                    });
                }
                *state = State::Probing { why: why.clone() };
                Ok(())
            }
            State::Probing { why } => Err(Resting {
                left: Duration::ZERO,
                why: why.clone(),
            }),
        }
    }

    /// A call answered: the store is back.
    pub(crate) fn succeeded(&self) {
        if let Ok(mut state) = self.state.lock()
            && !matches!(*state, State::Closed)
        {
            tracing::info!("the store answers again");
            *state = State::Closed;
        }
    }

    /// A call failed: the store rests.
    pub(crate) fn failed(&self, why: &str) {
        if let Ok(mut state) = self.state.lock() {
            if matches!(*state, State::Closed) {
                tracing::warn!(
                    rest_ms = REST.as_millis() as u64,
                    error = why,
                    "store failed: its calls fail open at once while it rests"
                );
            }
            *state = State::Open {
                until: Instant::now() + REST,
                why: why.to_owned(),
            };
        }
    }

    /// Whether calls are refused now (readiness says so at once).
    pub(crate) fn resting(&self) -> Option<Resting> {
        let state = self.state.lock().ok()?;
        match &*state {
            State::Closed => None,
            State::Open { until, why } => Some(Resting {
                left: until.saturating_duration_since(Instant::now()),
                why: why.clone(),
            }),
            State::Probing { why } => Some(Resting {
                left: Duration::ZERO,
                why: why.clone(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_refuses_calls_until_one_probe_answers() {
        let breaker = Breaker::default();
        assert!(breaker.admit().is_ok());
        breaker.failed("timed out");
        let resting = breaker.admit().unwrap_err();
        assert!(resting.left <= REST && resting.why == "timed out");
        assert!(breaker.resting().is_some());
        // After the rest, one call probes and the others are still refused.
        *breaker.state.lock().unwrap() = State::Open {
            until: Instant::now(),
            why: "timed out".into(),
        };
        assert!(breaker.admit().is_ok());
        assert!(breaker.admit().is_err());
        breaker.succeeded();
        assert!(breaker.admit().is_ok() && breaker.resting().is_none());
    }
}
