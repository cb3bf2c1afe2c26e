//! What a replay reports, as it is printed and written as JSON: the tables, the costs of each
//! user, the check against the bill, the input by kind.

use ctxgc_replay::causes::CacheWrite;
use ctxgc_replay::misses::ClientMisses;
use ctxgc_replay::prices::Pricing;
use ctxgc_replay::report::{self, Row};
use ctxgc_replay::run::CLIENT_WINDOW;
use ctxgc_replay::run::{ClientModel, SessionRun};
use ctxgc_replay::validate::SessionCheck;
use serde::Serialize;
use std::collections::BTreeMap;

use super::load::{Origin, Skipped};
use crate::table::num;

#[derive(Serialize)]
pub(super) struct Table {
    pub(super) window: u64,
    pub(super) cache: &'static str,
    pub(super) model: String,
    pub(super) rows: Vec<Row>,
    /// `none` against the bill, when the table has a `recorded` row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) bill: Option<BillCheck>,
}

/// One policy against `none` for each user's sessions (first window, each under its own
/// provider's cache and prices): the report's own rows, over that user's runs.
#[derive(Serialize)]
pub(super) struct UserCosts {
    pub(super) policy: String,
    pub(super) window: u64,
    /// (user, cost over none's, share of what the client kept in view that the policy showed),
    /// in the order users first appear.
    pub(super) users: Vec<(String, f64, Option<f64>)>,
}

/// [`UserCosts`] of every policy, when `origins` name more than one user. A user whose
/// sessions ran on more than one provider's cache has no single price table and is left out.
pub(super) fn costs_by_user(
    runs: &[SessionRun],
    origins: &[Origin],
    pricing: &Pricing,
    names: &[String],
    window: u64,
) -> Vec<UserCosts> {
    let mut users: Vec<&str> = Vec::new();
    for o in origins {
        if !users.contains(&o.user.as_str()) {
            users.push(&o.user);
        }
    }
    if users.len() < 2 {
        return Vec::new();
    }
    let per_user: Vec<(&str, Vec<Row>)> = users
        .iter()
        .filter_map(|&user| {
            let mut caches = (0..origins.len())
                .filter(|&i| origins[i].user == user)
                .map(|i| pricing.own_cache[i]);
            let cache = caches.next()?;
            if caches.any(|c| c != cache) {
                return None;
            }
            let keep = |r: &SessionRun| origins[r.source].user == user;
            let rows = report::rows_of(runs, &keep, window, cache, &pricing.own, names, None);
            Some((user, rows))
        })
        .collect();
    names
        .iter()
        .filter(|p| p.as_str() != "none")
        .map(|policy| UserCosts {
            policy: policy.clone(),
            window,
            users: per_user
                .iter()
                .filter_map(|(user, rows)| {
                    let row = rows.iter().find(|r| &r.policy == policy)?;
                    Some(((*user).to_owned(), row.cost_vs_none?, row.recall_of_client))
                })
                .collect(),
        })
        .collect()
}

/// The simulated `none` over the billed cost, over the requests both hold (the validation's
/// aggregate): the one figure a report gives for how far the lab is from the bill.
#[derive(Serialize, Clone, Copy)]
pub(super) struct BillCheck {
    pub(super) none_over_bill: f64,
    pub(super) requests: usize,
}

/// Input tokens by kind at one window: `none`'s, and each policy's as a share of them.
#[derive(Serialize)]
pub(super) struct KindTable {
    pub(super) window: u64,
    pub(super) kinds: Vec<KindRow>,
}

#[derive(Serialize)]
pub(super) struct KindRow {
    pub(super) kind: String,
    pub(super) none_tokens: u64,
    pub(super) share_of_input: f64,
    /// Each policy's tokens of this kind over `none`'s, in table order.
    pub(super) kept: Vec<(String, f64)>,
}

#[derive(Serialize)]
pub(super) struct Output {
    pub(super) sessions: usize,
    pub(super) skipped: Vec<Skipped>,
    pub(super) calibration: Vec<CalibrationRow>,
    pub(super) tables: Vec<Table>,
    pub(super) validation: Vec<SessionCheck>,
    /// Each policy's cost against `none`, user by user, when the sessions are several users'.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) by_user: Vec<UserCosts>,
    pub(super) cache_writes: Vec<CacheWrite>,
    /// Each policy's simulated cache writes by cause, on the client logs (first window, each
    /// session under its own cache model).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) writes_by_policy: Vec<PolicyWrites>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) by_tool: Vec<KindTable>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) client_misses: Vec<ClientMisses>,
}

#[derive(Serialize)]
pub(super) struct PolicyWrites {
    pub(super) policy: String,
    pub(super) window: u64,
    /// Tokens written, by cause (`written::RUN_CAUSES`).
    pub(super) written: BTreeMap<&'static str, u64>,
}

#[derive(Serialize)]
pub(super) struct CalibrationRow {
    pub(super) session: String,
    #[serde(flatten)]
    pub(super) model: ClientModel,
}

/// "at a 200,000-token window", or "at each client's own window".
pub(super) fn at_window(window: u64) -> String {
    if window == CLIENT_WINDOW {
        "at each client's own window".into()
    } else {
        format!("at a {}-token window", num(window))
    }
}

/// A lifetime in whole seconds, `-` where there is none.
pub(super) fn secs(ms: Option<i64>) -> String {
    ms.map_or("-".to_owned(), |ms| (ms / 1_000).to_string())
}
