//! Fitting what a prefix cache's documentation leaves open (the share of requests routed to a
//! machine without the prefix, and how far short of the cached prefix's end a hit falls) on the
//! usage providers billed, and checking the fit on sessions left out of it.
//!
//! One replay of `none` with the rules' calibrated values at zero and no rounding gives, per
//! request, the prefix the cache could serve; the served reads under any values are a function
//! of it (see [`Observation::cached`]), so the fit searches a grid without replaying again.

use serde::Serialize;

use crate::cache::{CacheRules, Served};
use crate::prices::ModelPrice;

/// One request with recorded usage, as replayed without the calibrated values.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The group it belongs to (a set, or a fold of sessions), for leaving groups out.
    pub group: usize,
    /// The session it belongs to (for the median session).
    pub session: usize,
    /// Prompt tokens as the replay counts them.
    pub prompt: usize,
    /// Tokens the cache could serve had nothing expired: the prefix shared with what the
    /// session sent before.
    pub reachable: usize,
    /// Time since the session's previous request (None: not recorded), for the share of that
    /// prefix still alive under the rules' lifetime.
    pub idle_ms: Option<i64>,
    /// What the provider billed.
    pub recorded: Served,
    /// Output tokens billed.
    pub output: usize,
}

impl Observation {
    /// Tokens read under `rules` (its step, minimum, lag, lifetime and routing misses), in
    /// expectation.
    pub fn cached(&self, rules: &CacheRules) -> usize {
        if self.prompt < rules.min_tokens {
            return 0;
        }
        let reach = self.reachable.saturating_sub(rules.lag_tokens);
        if reach < rules.min_tokens.max(1) {
            return 0;
        }
        let step = rules.step.max(1);
        let alive = self
            .idle_ms
            .map_or(1.0, |idle| rules.alive_share(idle, false));
        ((reach / step * step) as f64 * alive * (1.0 - rules.routing_miss)).round() as usize
    }
}

/// Simulated over recorded for a set of observations.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Errors {
    /// Cache reads, in aggregate.
    pub reads: f64,
    /// Uncached input, in aggregate.
    pub uncached: f64,
    /// Cost, in aggregate.
    pub cost: f64,
    /// Cost of the median session.
    pub median_cost: f64,
    /// The mean over requests of the squared difference between the reads served in
    /// expectation and those billed, relative to the mean prompt squared: least where the
    /// expected reads are each request's, which tells a lifetime (the requests after a pause)
    /// apart from routing misses and lag (the others), where an error on sums lets one stand
    /// in for another.
    #[serde(skip)]
    pub request_loss: f64,
}

impl Errors {
    /// How far from the bill, the measure the fit of routing misses and lag minimises: the
    /// largest error relative to its tolerance (cost ±3% in aggregate and at the median
    /// session, reads and uncached input ±5% in aggregate, the validation's targets), ties
    /// broken by the sum of squared log errors.
    fn loss(&self) -> f64 {
        let log = |r: f64| if r > 0.0 { r.ln().abs() } else { 1e3 };
        let worst = [
            log(self.cost) / 0.03,
            log(self.median_cost) / 0.03,
            log(self.reads) / 0.05,
            log(self.uncached) / 0.05,
        ]
        .into_iter()
        .fold(0.0, f64::max);
        let sum: f64 = [self.reads, self.uncached, self.cost, self.median_cost]
            .iter()
            .map(|r| log(*r).powi(2))
            .sum();
        worst + sum * 1e-3
    }
}

/// Simulated over recorded for the observations `keep` selects, under `rules`, priced with
/// `price`.
pub fn errors(
    obs: &[Observation],
    keep: impl Fn(&Observation) -> bool,
    rules: &CacheRules,
    price: &ModelPrice,
) -> Option<Errors> {
    errors_each(obs, keep, |_| *rules, price)
}

/// As [`errors`], each observation under the rules `rules_of` gives it.
fn errors_each(
    obs: &[Observation],
    keep: impl Fn(&Observation) -> bool,
    rules_of: impl Fn(&Observation) -> CacheRules,
    price: &ModelPrice,
) -> Option<Errors> {
    let (mut sim, mut rec) = ([0f64; 3], [0f64; 3]);
    let (mut squared, mut prompts, mut n) = (0f64, 0f64, 0usize);
    let mut sessions: std::collections::BTreeMap<usize, (f64, f64)> = Default::default();
    for o in obs.iter().filter(|o| keep(o)) {
        let cached = o.cached(&rules_of(o)).min(o.prompt);
        squared += (cached as f64 - o.recorded.cached as f64).powi(2);
        prompts += o.prompt as f64;
        n += 1;
        let served = Served {
            cached,
            uncached: o.prompt - cached,
            ..Served::default()
        };
        let (sim_cost, rec_cost) = (
            price.cost(&served, o.output),
            price.cost(&o.recorded, o.output),
        );
        for (slot, v) in sim
            .iter_mut()
            .zip([cached as f64, served.uncached as f64, sim_cost])
        {
            *slot += v;
        }
        let recorded_uncached = (o.recorded.uncached + o.recorded.written) as f64;
        for (slot, v) in rec
            .iter_mut()
            .zip([o.recorded.cached as f64, recorded_uncached, rec_cost])
        {
            *slot += v;
        }
        let s = sessions.entry(o.session).or_default();
        s.0 += sim_cost;
        s.1 += rec_cost;
    }
    if rec.iter().any(|v| *v <= 0.0) {
        return None;
    }
    let ratios: Vec<f64> = sessions
        .values()
        .filter(|(_, r)| *r > 0.0)
        .map(|(s, r)| s / r)
        .collect();
    Some(Errors {
        reads: sim[0] / rec[0],
        uncached: sim[1] / rec[1],
        cost: sim[2] / rec[2],
        median_cost: crate::validate::spread(ratios)?.0,
        request_loss: squared / n.max(1) as f64 / (prompts / n.max(1) as f64).max(1.0).powi(2),
    })
}

/// The fitted values and the errors they leave.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Fit {
    /// Share of requests that read nothing although nothing expired.
    pub routing_miss: f64,
    /// Tokens a hit falls short of the prefix's end.
    pub lag_tokens: usize,
    /// Where eviction is gradual, the idle time by which every entry is gone (ms).
    pub ttl_max_ms: Option<i64>,
    /// On the observations fitted.
    pub errors: Errors,
}

/// The routing-miss share (0 to 25% in steps of 0.5%) and lag (0 to 2,048 tokens in steps of
/// 16) that bring the observations `keep` selects closest to the bill (the validation's
/// tolerances, [`Errors::loss`]); where the cache evicts gradually and the requests say when
/// they were sent, first the idle time by which it has evicted everything (from its documented
/// lifetime to an hour): the one whose best values serve each request's reads closest to what
/// was billed ([`Errors::request_loss`]).
pub fn fit(
    obs: &[Observation],
    keep: impl Fn(&Observation) -> bool + Copy,
    base: &CacheRules,
    price: &ModelPrice,
) -> Option<Fit> {
    let timed = obs.iter().any(|o| keep(o) && o.idle_ms.is_some());
    let lifetimes: Vec<Option<i64>> = match (base.ttl_ms, base.ttl_max_ms) {
        (Some(ttl), Some(_)) if timed => TTL_MAX_CANDIDATES_SECS
            .iter()
            .map(|s| s * 1_000)
            .filter(|&ms| ms >= ttl)
            .map(Some)
            .collect(),
        _ => vec![base.ttl_max_ms],
    };
    let best_of = |ttl_max_ms: Option<i64>, measure: &dyn Fn(&Errors) -> f64| {
        let mut best: Option<(f64, Fit)> = None;
        for miss in (0..=50).map(|i| i as f64 * 0.005) {
            for lag in (0..=128).map(|i| i * 16) {
                let rules = CacheRules {
                    routing_miss: miss,
                    lag_tokens: lag,
                    ttl_max_ms,
                    ..*base
                };
                let Some(errors) = errors(obs, keep, &rules, price) else {
                    continue;
                };
                let loss = measure(&errors);
                if best.as_ref().is_none_or(|(b, _)| loss < *b) {
                    best = Some((
                        loss,
                        Fit {
                            routing_miss: miss,
                            lag_tokens: lag,
                            ttl_max_ms,
                            errors,
                        },
                    ));
                }
            }
        }
        best
    };
    let lifetime = if lifetimes.len() > 1 {
        lifetimes
            .iter()
            .filter_map(|&l| best_of(l, &|e| e.request_loss))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, f)| f.ttl_max_ms)?
    } else {
        lifetimes.first().copied().flatten()
    };
    best_of(lifetime, &Errors::loss).map(|(_, f)| f)
}

/// The idle times (seconds) by which a gradually evicting cache may have evicted everything:
/// from OpenAI's documented "5 to 10 minutes" to the hour its guide allows off-peak.
const TTL_MAX_CANDIDATES_SECS: [i64; 8] = [300, 600, 900, 1_200, 1_800, 2_400, 3_000, 3_600];

/// `base` with a fit's values.
pub fn with_fit(base: &CacheRules, fit: &Fit) -> CacheRules {
    CacheRules {
        routing_miss: fit.routing_miss,
        lag_tokens: fit.lag_tokens,
        ttl_max_ms: fit.ttl_max_ms,
        ..*base
    }
}

/// One group left out: the values fitted without it, and the errors they leave on it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HeldOut {
    /// The group left out.
    pub group: usize,
    /// Fitted on the others.
    pub fit: Fit,
    /// On the group left out.
    pub errors: Errors,
}

/// Leaves each group out in turn: fits on the rest, measures on it.
pub fn leave_one_out(obs: &[Observation], base: &CacheRules, price: &ModelPrice) -> Vec<HeldOut> {
    let mut groups: Vec<usize> = obs.iter().map(|o| o.group).collect();
    groups.sort_unstable();
    groups.dedup();
    groups
        .into_iter()
        .filter_map(|g| {
            let fit = fit(obs, |o| o.group != g, base, price)?;
            let rules = with_fit(base, &fit);
            let errors = errors(obs, |o| o.group == g, &rules, price)?;
            Some(HeldOut {
                group: g,
                fit,
                errors,
            })
        })
        .collect()
}

/// Every group predicted by the values fitted without it, pooled: the cross-validated error
/// over all the sessions (each measured only by a fit that never saw it).
pub fn pooled(
    obs: &[Observation],
    held: &[HeldOut],
    base: &CacheRules,
    price: &ModelPrice,
) -> Option<Errors> {
    let rules_of = |o: &Observation| {
        held.iter()
            .find(|h| h.group == o.group)
            .map_or(*base, |h| with_fit(base, &h.fit))
    };
    errors_each(
        obs,
        |o| held.iter().any(|h| h.group == o.group),
        rules_of,
        price,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheKind;

    /// `o` as a provider whose cache runs by `truth` would have billed it.
    fn billed_as(mut o: Observation, truth: &CacheRules) -> Observation {
        let cached = o.cached(truth);
        o.recorded = Served {
            cached,
            uncached: o.prompt - cached,
            ..Served::default()
        };
        o
    }

    /// Sessions whose bill shows a known miss share and lag: the fit finds them again, and a
    /// group left out is predicted as well as the rest.
    #[test]
    fn the_fit_finds_the_values_that_made_the_bill() {
        let base = CacheRules::documented(CacheKind::Openai, 1_024);
        let truth = CacheRules {
            routing_miss: 0.05,
            lag_tokens: 320,
            ..base
        };
        let price = crate::prices::default_for(CacheKind::Openai);
        let obs: Vec<Observation> = (0..400)
            .map(|i| {
                let prompt = 3_000 + (i % 40) * 700;
                let reachable = prompt - 400 - (i % 7) * 50;
                let o = Observation {
                    group: i % 4,
                    session: i / 10,
                    prompt,
                    reachable,
                    idle_ms: None,
                    recorded: Served::default(),
                    output: 100,
                };
                billed_as(o, &truth)
            })
            .collect();
        let fit = fit(&obs, |_| true, &base, &price).unwrap();
        assert!((fit.routing_miss - 0.05).abs() < 0.011, "{fit:?}");
        assert!(fit.lag_tokens.abs_diff(320) <= 64, "{fit:?}");
        assert!((fit.errors.cost - 1.0).abs() < 0.005, "{fit:?}");
        let held = leave_one_out(&obs, &base, &price);
        assert_eq!(held.len(), 4);
        assert!(
            held.iter().all(|h| (h.errors.cost - 1.0).abs() < 0.01),
            "{held:?}"
        );
    }

    /// Where requests say when they were sent, the lifetime is fitted too: requests after
    /// pauses that read in proportion to a 30-minute eviction give that lifetime back, with no
    /// routing misses standing in for it.
    #[test]
    fn the_fit_finds_how_long_a_gradually_evicting_cache_keeps_a_prefix() {
        let base = CacheRules {
            ttl_ms: Some(300_000),
            ttl_max_ms: Some(600_000),
            ..CacheRules::documented(CacheKind::Openai, 1_024)
        };
        let truth = CacheRules {
            ttl_max_ms: Some(1_800_000),
            ..base
        };
        let price = crate::prices::default_for(CacheKind::Openai);
        let obs: Vec<Observation> = (0..240)
            .map(|i| {
                let prompt = 5_000 + (i % 50) * 900;
                // Most requests follow quickly; one in six after a pause of up to 40 minutes.
                let idle_s = if i % 6 == 0 {
                    120 + (i / 6 % 20) * 120
                } else {
                    20
                };
                let o = Observation {
                    group: i % 3,
                    session: i / 20,
                    prompt,
                    reachable: prompt - 500,
                    idle_ms: Some(idle_s as i64 * 1_000),
                    recorded: Served::default(),
                    output: 100,
                };
                billed_as(o, &truth)
            })
            .collect();
        let fit = fit(&obs, |_| true, &base, &price).unwrap();
        assert_eq!(fit.ttl_max_ms, Some(1_800_000), "{fit:?}");
        assert!(fit.routing_miss < 0.011, "{fit:?}");
        assert!((fit.errors.cost - 1.0).abs() < 0.01, "{fit:?}");
    }
}
