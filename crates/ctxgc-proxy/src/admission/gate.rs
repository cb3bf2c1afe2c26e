//! Who may rewrite now: the rewrite slots, shared fairly.
//!
//! Rewriting is CPU work on a rewrite worker and holds the parsed body, so the slots bound
//! both. A free-for-all let four heavy requests of one key hold every slot for 20 s while every
//! other key's request waited its 2 s and went upstream untrimmed; now no tenant holds every
//! slot, heavy requests share half of them, and an ordinary request finds one free.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A body this large (bytes) is heavy: it may take long to rewrite.
pub(crate) const HEAVY_BYTES: usize = 4 << 20;

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
}
