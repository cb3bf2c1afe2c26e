//! Checking the simulator against what providers recorded.
//!
//! Recorded transcripts carry the provider's usage for every call: the GPT-5-mini and Gemini
//! sets `prompt_tokens` and `cached_tokens`, Claude Code logs also the cache writes, Codex
//! rollouts the cached input. Under the `none` policy the replay's requests are exactly what the
//! agent sent, so simulated prompt, cache-read, cache-write and uncached tokens can be compared
//! with the recorded ones, session by session, under the cache model of the session's provider.

use ctxgc_core::{Role, Transcript};
use serde::Serialize;

use crate::cache::Served;
use crate::prices::ModelPrice;
use crate::report::recorded_served;
use crate::run::SessionRun;

/// The quantities compared, in the order of [`SessionCheck::simulated`].
pub const QUANTITIES: [&str; 5] = [
    "prompt tokens",
    "cache reads",
    "cache writes",
    "uncached input",
    "cost",
];

/// Simulated over recorded, for one session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionCheck {
    /// Session id.
    pub session: String,
    /// The set it came from (the path it was found under).
    pub set: String,
    /// Whose session it is ([`crate::users::user_of`]).
    pub user: String,
    /// The cache model compared.
    pub cache: &'static str,
    /// The price row both sides were priced with.
    pub model: String,
    /// Requests compared.
    pub requests: usize,
    /// Simulated prompt tokens / recorded prompt tokens.
    pub prompt_ratio: f64,
    /// Simulated cache reads / recorded (None when nothing was recorded read).
    pub cached_ratio: Option<f64>,
    /// Simulated cache writes / recorded (None when nothing was recorded written).
    pub written_ratio: Option<f64>,
    /// Simulated uncached input / recorded (None when nothing was recorded uncached).
    pub uncached_ratio: Option<f64>,
    /// Simulated cost / recorded cost, both at the session's prices.
    pub cost_ratio: Option<f64>,
    /// Recorded cached share.
    pub recorded_cached_share: f64,
    /// Simulated cached share.
    pub simulated_cached_share: f64,
    /// Simulated: prompt, cache reads, cache writes, uncached input (tokens) and cost (USD),
    /// summed over the session's requests, for the aggregate over sessions.
    pub simulated: [f64; 5],
    /// The same, recorded.
    pub recorded: [f64; 5],
    /// Prompt tokens of the simulated requests that were sized from the bill rather than
    /// counted from the log ([`crate::run::ClientModel::attached_tokens`]): the part of the
    /// prompt comparison that holds by construction.
    #[serde(default)]
    pub from_bill: f64,
}

impl SessionCheck {
    /// Simulated / recorded of quantity `i` (see [`QUANTITIES`]).
    pub fn ratio(&self, i: usize) -> Option<f64> {
        (self.recorded[i] > 0.0).then(|| self.simulated[i] / self.recorded[i])
    }
}

/// Simulated / recorded over all `checks` summed (see [`QUANTITIES`]): big sessions weigh as
/// much as they cost, where the per-session spread weighs each alike.
pub fn aggregate(checks: &[&SessionCheck]) -> [Option<f64>; 5] {
    let mut sim = [0f64; 5];
    let mut rec = [0f64; 5];
    for c in checks {
        for i in 0..5 {
            sim[i] += c.simulated[i];
            rec[i] += c.recorded[i];
        }
    }
    std::array::from_fn(|i| (rec[i] > 0.0).then(|| sim[i] / rec[i]))
}

/// Compares a `none` run with the usage recorded in its transcript, under `cache`, both sides
/// priced with `price`: request by request, or over the whole session where the client
/// recorded only its total ([`ctxgc_core::Recording::billed_total`]).
pub fn check(
    t: &Transcript,
    (set, user): (&str, &str),
    run: &SessionRun,
    cache: &'static str,
    price: &ModelPrice,
) -> Option<SessionCheck> {
    let mut sim = [0f64; 5];
    let mut rec = [0f64; 5];
    let mut n = 0usize;
    for r in run.requests.iter().filter(|r| r.is_agent()) {
        let m = &t.messages[r.source_index];
        let Some(usage) = m.usage.filter(|_| m.role == Role::Assistant) else {
            continue;
        };
        let served = r.served.get(cache)?;
        let output = usage.completion_tokens as usize;
        add(&mut sim, quantities(r.tokens as u64, served, output, price));
        add(
            &mut rec,
            quantities(usage.prompt_tokens, &recorded_served(&usage), output, price),
        );
        n += 1;
    }
    if n == 0
        && let Some(bill) = t.recording.as_ref().and_then(|r| r.billed_total)
    {
        // A client that records only the session's total (Hermes): every request of the run
        // against it, output at the total's average per request.
        let requests: Vec<_> = run.requests.iter().filter(|r| r.is_agent()).collect();
        let output = bill.usage.completion_tokens as usize / requests.len().max(1);
        for r in &requests {
            add(
                &mut sim,
                quantities(r.tokens as u64, r.served.get(cache)?, output, price),
            );
        }
        rec = quantities(
            bill.usage.prompt_tokens,
            &recorded_served(&bill.usage),
            bill.usage.completion_tokens as usize,
            price,
        );
        n = requests.len();
    }
    let ratio = |i: usize| (rec[i] > 0.0).then(|| sim[i] / rec[i]);
    (n > 0 && rec[0] > 0.0).then(|| SessionCheck {
        session: t.id.clone(),
        set: set.to_owned(),
        user: user.to_owned(),
        cache,
        model: price.name.clone(),
        requests: n,
        prompt_ratio: sim[0] / rec[0],
        cached_ratio: ratio(1),
        written_ratio: if cache == "anthropic" { ratio(2) } else { None },
        uncached_ratio: ratio(3),
        cost_ratio: ratio(4),
        recorded_cached_share: rec[1] / rec[0],
        simulated_cached_share: sim[1] / sim[0].max(1.0),
        simulated: sim,
        recorded: rec,
        from_bill: 0.0,
    })
}

/// One user's sessions, simulated over recorded in aggregate.
#[derive(Debug, Clone, Serialize)]
pub struct UserCheck {
    /// The user.
    pub user: String,
    /// Sessions compared.
    pub sessions: usize,
    /// Requests compared.
    pub requests: usize,
    /// Simulated / recorded of each of [`QUANTITIES`] over the user's sessions summed.
    pub ratios: [Option<f64>; 5],
}

/// Each user's aggregate, in the order users first appear in `checks`.
pub fn by_user(checks: &[&SessionCheck]) -> Vec<UserCheck> {
    let mut users: Vec<&str> = Vec::new();
    for c in checks {
        if !users.contains(&c.user.as_str()) {
            users.push(&c.user);
        }
    }
    users
        .into_iter()
        .map(|user| {
            let mine: Vec<&SessionCheck> =
                checks.iter().copied().filter(|c| c.user == user).collect();
            UserCheck {
                user: user.to_owned(),
                sessions: mine.len(),
                requests: mine.iter().map(|c| c.requests).sum(),
                ratios: aggregate(&mine),
            }
        })
        .collect()
}

/// The median user's ratio of quantity `i` and the worst user's (the farthest from 1, by the
/// ratio's logarithm: 0.8 is as far as 1.25), with the worst user's name.
pub fn median_and_worst_user(users: &[UserCheck], i: usize) -> Option<(f64, f64, &str)> {
    let values: Vec<(f64, &str)> = users
        .iter()
        .filter_map(|u| Some((u.ratios[i]?, u.user.as_str())))
        .collect();
    median_and_worst(&values)
}

/// The median of named simulated-over-recorded ratios and the worst of them (the farthest
/// from 1 by its logarithm), with its name.
pub fn median_and_worst<'a>(values: &[(f64, &'a str)]) -> Option<(f64, f64, &'a str)> {
    let (median, _, _) = spread(values.iter().map(|v| v.0).collect())?;
    let &(worst, name) = values
        .iter()
        .max_by(|a, b| a.0.ln().abs().total_cmp(&b.0.ln().abs()))?;
    Some((median, worst, name))
}

/// One request's (or a session's) [`QUANTITIES`]: its prompt, how the cache served it, and
/// its cost with `output` tokens out.
fn quantities(prompt: u64, served: &Served, output: usize, price: &ModelPrice) -> [f64; 5] {
    [
        prompt as f64,
        served.cached as f64,
        served.written as f64,
        served.uncached as f64,
        price.cost(served, output),
    ]
}

fn add(total: &mut [f64; 5], one: [f64; 5]) {
    for (slot, value) in total.iter_mut().zip(one) {
        *slot += value;
    }
}

/// Median, 10th and 90th percentiles (linear interpolation between the nearest values).
pub fn spread(mut values: Vec<f64>) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let x = (values.len() - 1) as f64 * q;
        let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
        values[lo] + (values[hi] - values[lo]) * (x - lo as f64)
    };
    Some((at(0.5), at(0.1), at(0.9)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        let (median, p10, p90) = spread(vec![4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(median, 2.5);
        assert!((p10 - 1.3).abs() < 1e-9 && (p90 - 3.7).abs() < 1e-9);
        assert_eq!(spread(vec![]), None);
    }

    fn session(user: &str, simulated_cost: f64) -> SessionCheck {
        SessionCheck {
            session: format!("{user}-s"),
            set: "set".into(),
            user: user.into(),
            cache: "openai",
            model: "gpt-5".into(),
            requests: 1,
            prompt_ratio: 1.0,
            cached_ratio: None,
            written_ratio: None,
            uncached_ratio: None,
            cost_ratio: Some(simulated_cost),
            recorded_cached_share: 0.0,
            simulated_cached_share: 0.0,
            simulated: [1.0, 0.0, 0.0, 0.0, simulated_cost],
            recorded: [1.0, 0.0, 0.0, 0.0, 1.0],
            from_bill: 0.0,
        }
    }

    /// A user with many sessions weighs as one user: the median user and the worst user are
    /// over users, each user's figure over their own sessions summed.
    #[test]
    fn users_are_judged_each_on_their_own_sessions() {
        let checks = [
            session("a", 1.0),
            session("a", 1.02),
            session("a", 0.98),
            session("b", 0.8),
            session("c", 1.1),
        ];
        let refs: Vec<&SessionCheck> = checks.iter().collect();
        let users = by_user(&refs);
        assert_eq!(users.len(), 3);
        assert_eq!((users[0].user.as_str(), users[0].sessions), ("a", 3));
        let (median, worst, name) = median_and_worst_user(&users, 4).unwrap();
        assert!((median - 1.0).abs() < 1e-9, "{median}");
        assert_eq!((worst, name), (0.8, "b"));
    }
}
