//! A fixed set of connections lent one at a time, with a deadline on the wait.

use std::ops::{Deref, DerefMut};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Connections of one store.
pub(crate) struct Pool<C> {
    idle: Mutex<Vec<C>>,
    returned: Condvar,
    timeout: Duration,
}

impl<C> Pool<C> {
    /// A pool lending `connections`; a borrower waits `timeout` at most.
    pub(crate) fn new(connections: Vec<C>, timeout: Duration) -> Pool<C> {
        Pool {
            idle: Mutex::new(connections),
            returned: Condvar::new(),
            timeout,
        }
    }

    /// The deadline of one operation.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A free connection, or `None` when none came free within the deadline.
    pub(crate) fn take(&self) -> Option<Lent<'_, C>> {
        let deadline = Instant::now() + self.timeout;
        let mut idle = self.idle.lock().ok()?;
        loop {
            if let Some(conn) = idle.pop() {
                return Some(Lent {
                    pool: self,
                    conn: Some(conn),
                });
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            idle = self.returned.wait_timeout(idle, left).ok()?.0;
        }
    }

    /// An idle connection, if one is.
    pub(crate) fn take_idle(&self) -> Option<Lent<'_, C>> {
        let conn = self.idle.lock().ok()?.pop()?;
        Some(Lent {
            pool: self,
            conn: Some(conn),
        })
    }

    /// Lends a connection the caller just made.
    pub(crate) fn lend(&self, conn: C) -> Lent<'_, C> {
        Lent {
            pool: self,
            conn: Some(conn),
        }
    }

    fn give_back(&self, conn: C, keep: usize) {
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < keep
        {
            idle.push(conn);
        }
        self.returned.notify_one();
    }
}

/// A connection on loan; it goes back to the pool when dropped, unless [`Lent::discard`]ed.
pub(crate) struct Lent<'a, C> {
    pool: &'a Pool<C>,
    conn: Option<C>,
}

impl<C> Lent<'_, C> {
    /// Closes the connection instead of giving it back (its exchange broke: a late reply may
    /// still arrive on it).
    pub(crate) fn discard(mut self) {
        self.conn = None;
        self.pool.returned.notify_one();
    }
}

/// Idle connections a pool keeps at most.
pub(crate) const KEEP_IDLE: usize = 16;

impl<C> Drop for Lent<'_, C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(conn, KEEP_IDLE);
        }
    }
}

impl<C> Deref for Lent<'_, C> {
    type Target = C;

    fn deref(&self) -> &C {
        // Only `discard` takes it, and that consumes the loan.
        match &self.conn {
            Some(conn) => conn,
            None => unreachable!("a discarded connection is not lent"),
        }
    }
}

impl<C> DerefMut for Lent<'_, C> {
    fn deref_mut(&mut self) -> &mut C {
        match &mut self.conn {
            Some(conn) => conn,
            None => unreachable!("a discarded connection is not lent"),
        }
    }
}
