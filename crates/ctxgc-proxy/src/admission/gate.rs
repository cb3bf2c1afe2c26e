//! Who may rewrite now: the rewrite slots, shared fairly, and the memory budget of the
//! requests in flight.
//!
//! Rewriting is CPU work on a blocking thread and holds the parsed body, so the slots bound
//! both. A free-for-all let four heavy requests of one key hold every slot for 20 s while every
//! other key's request waited its 2 s and went upstream untrimmed; now no tenant holds every
//! slot, heavy requests share half of them, and an ordinary request finds one free. Memory is
//! reserved before a body is read: a request that does not fit is streamed upstream as it
//! comes, never buffered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A body this large (bytes) is heavy: it may take long to rewrite.
pub(crate) const HEAVY_BYTES: usize = 4 << 20;

/// What a body is weighed at while it is read, before its objects are counted: as
/// [`weight_of`] weighs its bytes, so that a body of few objects needs nothing more once read
/// (reserving less up front let 32 concurrent 30 MB bodies each take a part of the budget and
/// none find the rest).
pub(crate) const PARSED_FACTOR: usize = 2;

/// Bytes a parsed JSON object holds beside its strings (its map, its entries, the values and
/// the rewrite's notes on it), measured: a 10 MB request of 40,000 small tool results
/// (160,000 objects) peaked 190 MB above an idle proxy, a 30 MB one of 300 outputs of 100 KB
/// (1,500 objects) about three times its bytes.
const BYTES_PER_OBJECT: usize = 1_000;

/// What rewriting a body takes in memory: the body, its parsed strings, the new body spliced
/// from it, and what each object costs parsed.
pub(crate) fn weight_of(body: &[u8]) -> usize {
    let objects = memchr::memchr_iter(b'{', body).count();
    body.len()
        .saturating_mul(3)
        .saturating_add(objects.saturating_mul(BYTES_PER_OBJECT))
}

/// The rewrite slots.
pub(crate) struct Gate {
    all: Arc<Semaphore>,
    heavy: Arc<Semaphore>,
    total: usize,
    per_tenant: usize,
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A slot held: released when dropped.
pub(crate) struct Slot {
    _all: OwnedSemaphorePermit,
    _heavy: Option<OwnedSemaphorePermit>,
    _tenant: TenantPermit,
}

struct TenantPermit {
    permit: Option<OwnedSemaphorePermit>,
    semaphore: Arc<Semaphore>,
    name: String,
    gate: Arc<Gate>,
}

impl Drop for TenantPermit {
    fn drop(&mut self) {
        drop(self.permit.take());
        // The map keeps a tenant only while one of its requests holds or waits for a slot.
        if let Ok(mut tenants) = self.gate.tenants.lock()
            && Arc::strong_count(&self.semaphore) == 2
            && self.semaphore.available_permits() == self.gate.per_tenant
        {
            tenants.remove(&self.name);
        }
    }
}

impl Slot {
    /// The tenant holding it.
    #[cfg(test)]
    fn tenant(&self) -> &str {
        &self._tenant.name
    }
}

impl Gate {
    /// `total` slots; a tenant holds all but one at most, heavy requests half.
    pub(crate) fn new(total: usize) -> Arc<Gate> {
        let total = total.max(2);
        Arc::new(Gate {
            all: Arc::new(Semaphore::new(total)),
            heavy: Arc::new(Semaphore::new(total.div_ceil(2))),
            total,
            per_tenant: total - 1,
            tenants: Mutex::new(HashMap::new()),
        })
    }

    /// Slots in all.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Slots held now.
    pub(crate) fn in_use(&self) -> usize {
        self.total.saturating_sub(self.all.available_permits())
    }

    /// A slot for a request of `tenant` with a body of `bytes`, within `deadline`.
    pub(crate) async fn enter(
        self: &Arc<Self>,
        tenant: &str,
        bytes: usize,
        deadline: Duration,
    ) -> Option<Slot> {
        let semaphore = {
            let mut tenants = self.tenants.lock().ok()?;
            tenants
                .entry(tenant.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
                .clone()
        };
        let mut tenant_permit = TenantPermit {
            permit: None,
            semaphore: semaphore.clone(),
            name: tenant.to_owned(),
            gate: self.clone(),
        };
        tokio::time::timeout(deadline, async {
            tenant_permit.permit = Some(semaphore.acquire_owned().await.ok()?);
            let heavy = if bytes >= HEAVY_BYTES {
                Some(self.heavy.clone().acquire_owned().await.ok()?)
            } else {
                None
            };
            let all = self.all.clone().acquire_owned().await.ok()?;
            Some((all, heavy))
        })
        .await
        .ok()
        .flatten()
        .map(|(all, heavy)| Slot {
            _all: all,
            _heavy: heavy,
            _tenant: tenant_permit,
        })
    }
}

/// The memory the requests in flight may hold for rewriting.
pub(crate) struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
}

/// Memory reserved for one request: given back when dropped.
pub(crate) struct Reserved {
    bytes: usize,
    budget: Arc<MemoryBudget>,
}

impl Reserved {
    /// Whether no other request holds memory now.
    pub(crate) fn alone(&self) -> bool {
        self.budget.used() <= self.bytes
    }

    /// The body size the reservation covers.
    pub(crate) fn body_bytes(&self) -> usize {
        self.bytes / (PARSED_FACTOR + 1)
    }

    /// Grows the reservation to cover a body of `body_bytes`, if that fits; else `Err` with
    /// what it needed and what was left.
    pub(crate) fn grow(&mut self, body_bytes: usize) -> Result<(), (usize, usize)> {
        let more = body_bytes.saturating_sub(self.body_bytes());
        if more == 0 {
            return Ok(());
        }
        let mut extra = self.budget.reserve(more)?;
        // The extra bytes now belong to this reservation.
        self.bytes += std::mem::take(&mut extra.bytes);
        Ok(())
    }

    /// Grows the reservation to `weight` bytes in all (a body read whole, weighed with
    /// [`weight_of`]), if that fits; else `Err` with what it needed and what was left.
    pub(crate) fn settle(&mut self, weight: usize) -> Result<(), (usize, usize)> {
        let more = weight.saturating_sub(self.bytes);
        if more == 0 {
            return Ok(());
        }
        let mut extra = self
            .budget
            .reserve(more.div_ceil(PARSED_FACTOR + 1))
            .map_err(|(_, left)| (weight, left))?;
        self.bytes += std::mem::take(&mut extra.bytes);
        Ok(())
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes reserved now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The budget.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Reserves what a body of `body_bytes` takes to rewrite, if that fits; else `Err` with
    /// what it needed and what was left.
    pub(crate) fn reserve(self: &Arc<Self>, body_bytes: usize) -> Result<Reserved, (usize, usize)> {
        let needed = body_bytes.saturating_mul(PARSED_FACTOR + 1);
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            let left = self.limit.saturating_sub(used);
            if needed > left {
                return Err((needed, left));
            }
            match self.used.compare_exchange_weak(
                used,
                used + needed,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Reserved {
                        bytes: needed,
                        budget: self.clone(),
                    });
                }
                Err(now) => used = now,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_tenant_holds_every_slot_and_heavy_requests_share_half() {
        let gate = Gate::new(4);
        let wait = Duration::from_millis(50);
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(gate.enter("a", 10, wait).await.unwrap());
        }
        assert!(gate.enter("a", 10, wait).await.is_none(), "a's fourth");
        let other = gate.enter("b", 10, wait).await.unwrap();
        assert_eq!(other.tenant(), "b");
        drop((held, other));
        assert_eq!(gate.in_use(), 0);
        assert!(
            gate.tenants.lock().unwrap().is_empty(),
            "idle tenants forgotten"
        );

        let heavy: Vec<Slot> = [("a", 0), ("b", 1)]
            .into_iter()
            .map(|(t, _)| t)
            .map(|t| futures_util::FutureExt::now_or_never(gate.enter(t, HEAVY_BYTES, wait)))
            .map(|s| s.flatten().unwrap())
            .collect();
        assert!(
            gate.enter("c", HEAVY_BYTES, wait).await.is_none(),
            "third heavy"
        );
        assert!(gate.enter("c", 100_000, wait).await.is_some(), "ordinary");
        drop(heavy);
    }

    #[test]
    fn memory_is_reserved_and_given_back() {
        let budget = MemoryBudget::new(90 << 20);
        let mut a = budget.reserve(10 << 20).unwrap();
        assert_eq!(budget.used(), 30 << 20);
        a.settle(45 << 20).unwrap();
        assert_eq!(budget.used(), 45 << 20);
        let b = budget.reserve(10 << 20).unwrap();
        let (needed, left) = budget.reserve(10 << 20).err().unwrap();
        assert_eq!((needed, left), (30 << 20, 15 << 20));
        drop((a, b));
        assert_eq!(budget.used(), 0);
        // Objects weigh more than their bytes.
        let objects = "{\"a\":1},".repeat(1000);
        assert_eq!(
            weight_of(objects.as_bytes()),
            8000 * 3 + 1000 * BYTES_PER_OBJECT
        );
    }
}
