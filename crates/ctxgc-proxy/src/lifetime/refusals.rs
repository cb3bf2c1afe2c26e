//! Upstreams that refused a cache field ctxgc set (a gateway that rejects unknown fields, a
//! backend without breakpoints): for [`REMEMBERED_FOR`], that tenant's requests to that upstream
//! and model carry no such field of ctxgc's, so such a gateway costs one resend, not one per
//! request. Kept per tenant, so what one caller's requests provoke never changes another's.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ctxgc_formats::Upstream;

/// How long a refusal is remembered: long enough that a session does not pay a resend per
/// request, short enough that an upstream that learns the field is used again within the hour.
pub(crate) const REMEMBERED_FOR: Duration = Duration::from_secs(60 * 60);

/// Refusals remembered at most (the oldest go first).
const MAX_REMEMBERED: usize = 1_024;

type Key = (String, Upstream, String);

/// Which of ctxgc's cache fields an upstream refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Refused {
    /// The lifetime decisions' (a TTL, a retention, an OpenAI breakpoint).
    pub(crate) lifetime: bool,
    /// The rewrite's (the session's `prompt_cache_key`, Anthropic breakpoints).
    pub(crate) rewrite: bool,
}

/// The refusals seen, by tenant, upstream and model.
#[derive(Default)]
pub(crate) struct CacheFieldRefusals {
    seen: Mutex<HashMap<Key, (Instant, Refused)>>,
}

impl CacheFieldRefusals {
    /// `upstream` refused a cache field ctxgc set on a request of `tenant` for `model`.
    pub(crate) fn note(
        &self,
        (tenant, upstream, model): (&str, Upstream, &str),
        refused: Refused,
        now: Instant,
    ) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.len() >= MAX_REMEMBERED {
            seen.retain(|_, (at, _)| now.saturating_duration_since(*at) < REMEMBERED_FOR);
        }
        if seen.len() >= MAX_REMEMBERED
            && let Some(oldest) = seen
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
        {
            seen.remove(&oldest);
        }
        let key = (tenant.to_owned(), upstream, model.to_owned());
        let before = seen
            .get(&key)
            .filter(|(at, _)| now.saturating_duration_since(*at) < REMEMBERED_FOR)
            .map_or(Refused::default(), |(_, r)| *r);
        let refused = Refused {
            lifetime: before.lifetime || refused.lifetime,
            rewrite: before.rewrite || refused.rewrite,
        };
        seen.insert(key, (now, refused));
    }

    /// Which of ctxgc's cache fields are to be left off this request.
    pub(crate) fn refused(
        &self,
        (tenant, upstream, model): (&str, Upstream, &str),
        now: Instant,
    ) -> Refused {
        let Ok(seen) = self.seen.lock() else {
            return Refused::default();
        };
        if seen.is_empty() {
            return Refused::default();
        }
        seen.get(&(tenant.to_owned(), upstream, model.to_owned()))
            .filter(|(at, _)| now.saturating_duration_since(*at) < REMEMBERED_FOR)
            .map_or(Refused::default(), |(_, r)| *r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIFETIME: Refused = Refused {
        lifetime: true,
        rewrite: false,
    };
    const REWRITE: Refused = Refused {
        lifetime: false,
        rewrite: true,
    };
    const NONE: Refused = Refused {
        lifetime: false,
        rewrite: false,
    };

    #[test]
    fn a_refusal_holds_for_its_tenant_upstream_and_model_for_an_hour() {
        let refusals = CacheFieldRefusals::default();
        let now = Instant::now();
        let key = ("t1", Upstream::OpenAi, "gpt-5");
        refusals.note(key, LIFETIME, now);
        assert_eq!(refusals.refused(key, now), LIFETIME);
        let other_tenant = ("t2", Upstream::OpenAi, "gpt-5");
        assert_eq!(refusals.refused(other_tenant, now), NONE);
        assert_eq!(
            refusals.refused(("t1", Upstream::OpenAi, "gpt-4o"), now),
            NONE
        );
        assert_eq!(
            refusals.refused(("t1", Upstream::Anthropic, "gpt-5"), now),
            NONE
        );
        // A later refusal of the rewrite's field adds to it.
        refusals.note(key, REWRITE, now);
        let both = Refused {
            lifetime: true,
            rewrite: true,
        };
        assert_eq!(refusals.refused(key, now), both);
        let later = now + REMEMBERED_FOR + Duration::from_secs(1);
        assert_eq!(refusals.refused(key, later), NONE, "forgotten");
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let refusals = CacheFieldRefusals::default();
        let now = Instant::now();
        for i in 0..MAX_REMEMBERED + 10 {
            let at = now + Duration::from_millis(i as u64);
            refusals.note((&format!("t{i}"), Upstream::OpenAi, "m"), REWRITE, at);
        }
        assert_eq!(refusals.seen.lock().unwrap().len(), MAX_REMEMBERED);
        let oldest = ("t0", Upstream::OpenAi, "m");
        assert_eq!(refusals.refused(oldest, now), NONE, "the oldest went first");
        let newest = format!("t{}", MAX_REMEMBERED + 9);
        assert_eq!(
            refusals.refused((&newest, Upstream::OpenAi, "m"), now),
            REWRITE
        );
    }
}
