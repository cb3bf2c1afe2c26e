//! The cache models as data (`data/prices.toml`): per provider, its cache's rules and the
//! calibrated values its documentation leaves open; per model family, its prices and its own
//! rules (minimum prefix, write prices per TTL), each row with its source and date.

use serde::{Deserialize, Serialize};

use crate::cache::{CacheKind, CacheRules, Served};

/// One model family's prices (USD per million tokens) and cache rules.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Model name (dots and dashes alike when matched).
    pub name: String,
    /// Other names of the family priced alike (`gpt-5-codex`).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The provider whose cache serves it (a `[[provider]]` name).
    pub provider: String,
    /// Uncached input.
    pub input: f64,
    /// Cache reads.
    pub cache_read: f64,
    /// Cache writes with the provider's default lifetime (absent: no surcharge, billed as input).
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Cache writes with the long lifetime (Anthropic's 1-hour TTL; absent: as `cache_write`).
    #[serde(default)]
    pub cache_write_1h: Option<f64>,
    /// Output.
    pub output: f64,
    /// Smallest cacheable prompt.
    pub min_cacheable: usize,
    /// The family's own cache lifetime after last use, where it differs from its provider's
    /// (GPT-5.6: at least 30 minutes).
    #[serde(default)]
    pub ttl_secs: Option<u64>,
    /// Where the prices come from.
    pub source: String,
    /// When they were checked.
    pub date: String,
}

/// One provider's cache: documented rules and calibrated values.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// Name (`anthropic`, `openai`, `gemini`, `vllm`).
    pub name: String,
    /// Which cache model simulates it.
    pub cache: String,
    /// Lifetime of an entry after its last use (0: never expires).
    pub ttl_secs: u64,
    /// Where eviction is gradual, the idle time by which every entry is gone (OpenAI's "5 to 10
    /// minutes"); absent: exactly `ttl_secs`.
    #[serde(default)]
    pub ttl_max_secs: Option<u64>,
    /// The long lifetime a request can ask for (Anthropic 1h TTL, OpenAI 24h retention).
    pub long_ttl_secs: u64,
    /// Most breakpoints per request (0: automatic caching, no breakpoints).
    pub max_breakpoints: usize,
    /// How far a read walks back from a breakpoint, in blocks.
    pub lookback_blocks: usize,
    /// Granularity of a hit, in tokens.
    pub step: usize,
    /// Calibrated: the share of requests that find nothing of their session cached although
    /// nothing expired (routing to a machine without the prefix, eviction under load).
    pub routing_miss: f64,
    /// Calibrated: tokens by which a hit falls short of the previous prompt's end, on average.
    pub lag_tokens: usize,
    /// Where the rules come from.
    pub source: String,
}

/// What one client does with a provider's cache that others do not, as calibrated values
/// that replace the provider's for that client's sessions (Codex sends a `prompt_cache_key`,
/// which routes a session's requests to the machines that hold its prefix).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientRules {
    /// The client, as its logs name it (`codex` matches `codex 0.92.0`).
    pub client: String,
    /// The provider whose cache it concerns (a `[[provider]]` name).
    pub provider: String,
    /// Calibrated: the client's routing-miss share.
    #[serde(default)]
    pub routing_miss: Option<f64>,
    /// Calibrated: the client's lag.
    #[serde(default)]
    pub lag_tokens: Option<usize>,
    /// Calibrated: the idle time by which every entry of its sessions is gone.
    #[serde(default)]
    pub ttl_max_secs: Option<u64>,
    /// Where the values come from.
    pub source: String,
}

#[derive(Deserialize)]
struct Table {
    provider: Vec<Provider>,
    model: Vec<ModelPrice>,
    #[serde(default)]
    client: Vec<ClientRules>,
}

/// Everything the table holds.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// Provider caches.
    pub providers: Vec<Provider>,
    /// Model families.
    pub models: Vec<ModelPrice>,
    /// Clients' own calibrated values.
    pub clients: Vec<ClientRules>,
}

/// How a model's name was matched to a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Match {
    /// The row's name or an alias.
    Known,
    /// Not in the table: priced with the provider's default row (the name says which provider).
    Unknown {
        /// The name as the log gave it.
        model: String,
    },
    /// The log names no model: priced with the cache model's default row.
    Unnamed,
}

/// The row a session is priced with, and how it was found.
#[derive(Debug, Clone)]
pub struct Priced {
    /// The row.
    pub price: ModelPrice,
    /// How.
    pub matched: Match,
}

/// Errors reading a table.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Not valid TOML of the table's shape.
    #[error("the cache model table does not parse: {0}")]
    Parse(#[from] toml::de::Error),
    /// A model names a provider the table does not have.
    #[error("model `{model}` names provider `{provider}`, which the table does not define")]
    UnknownProvider {
        /// The model row.
        model: String,
        /// The provider it names.
        provider: String,
    },
    /// A provider names a cache model the lab does not have.
    #[error("provider `{0}` names cache model `{1}`: use anthropic, openai, gemini or vllm")]
    UnknownCache(String, String),
}

/// The built-in table.
// The table is compiled in and parsed by the tests: a failure is a broken build.
#[allow(clippy::expect_used)]
pub fn builtin() -> Catalog {
    Catalog::parse(include_str!("../data/prices.toml")).expect("the bundled table parses")
}

/// The built-in table, parsed once for the process (the proxy prices every session with it).
pub fn builtin_shared() -> &'static Catalog {
    static TABLE: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
    TABLE.get_or_init(builtin)
}

/// A model name as matched: lower case, the last path segment (`openai/gpt-5` is `gpt-5`),
/// dots as dashes.
fn normalize(name: &str) -> String {
    let name = name.trim().to_ascii_lowercase().replace('.', "-");
    name.rsplit('/').next().unwrap_or(&name).to_owned()
}

/// Whether `model` (normalized) is `row` (normalized) or `row` with a suffix that is not
/// another version: a date, a tag (`-preview`, `-codex`), but not `-5` (`gpt-5-5` is GPT-5.5).
fn names(model: &str, row: &str) -> bool {
    let Some(rest) = model.strip_prefix(row) else {
        return false;
    };
    let Some(rest) = rest.strip_prefix('-') else {
        return rest.is_empty();
    };
    let segment = rest.split('-').next().unwrap_or("");
    !(segment.len() <= 2 && !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()))
}

impl Catalog {
    /// Parses a table (the built-in one, or a user's with newer models).
    pub fn parse(text: &str) -> Result<Catalog, TableError> {
        let table: Table = toml::from_str(text)?;
        for p in &table.provider {
            if CacheKind::parse(&p.cache).is_none() {
                return Err(TableError::UnknownCache(p.name.clone(), p.cache.clone()));
            }
        }
        for m in &table.model {
            if !table.provider.iter().any(|p| p.name == m.provider) {
                return Err(TableError::UnknownProvider {
                    model: m.name.clone(),
                    provider: m.provider.clone(),
                });
            }
        }
        for c in &table.client {
            if !table.provider.iter().any(|p| p.name == c.provider) {
                return Err(TableError::UnknownProvider {
                    model: format!("client {}", c.client),
                    provider: c.provider.clone(),
                });
            }
        }
        Ok(Catalog {
            providers: table.provider,
            models: table.model,
            clients: table.client,
        })
    }

    /// The row of a model's name: the longest name or alias it is (see [`names`]).
    pub fn find(&self, model: &str) -> Option<&ModelPrice> {
        let model = normalize(model);
        self.models
            .iter()
            .flat_map(|m| {
                std::iter::once(&m.name)
                    .chain(&m.aliases)
                    .map(move |n| (normalize(n), m))
            })
            .filter(|(n, _)| names(&model, n))
            .max_by_key(|(n, _)| n.len())
            .map(|(_, m)| m)
    }

    /// The row a session of `model` is priced with: its own, or for a name the table does not
    /// have, the default row of the provider its name points to (`claude-*`, `gpt-*`, `o1`...,
    /// `gemini-*`; else `fallback`'s), said in [`Match::Unknown`].
    pub fn price_of(&self, model: Option<&str>, fallback: CacheKind) -> Priced {
        let Some(model) = model else {
            return Priced {
                price: self.default_for(fallback),
                matched: Match::Unnamed,
            };
        };
        if let Some(price) = self.find(model) {
            return Priced {
                price: price.clone(),
                matched: Match::Known,
            };
        }
        let name = normalize(model);
        let kind = if name.starts_with("claude") {
            CacheKind::Anthropic
        } else if name.starts_with("gemini") {
            CacheKind::Gemini
        } else if name.starts_with("gpt") || name.starts_with('o') {
            CacheKind::Openai
        } else {
            fallback
        };
        Priced {
            price: self.default_for(kind),
            matched: Match::Unknown {
                model: model.to_owned(),
            },
        }
    }

    /// The row a cache model is priced with when a session names no model of its provider.
    // Every default is in the built-in table (tested); a user's table must have them too.
    #[allow(clippy::expect_used)]
    pub fn default_for(&self, cache: CacheKind) -> ModelPrice {
        let name = match cache {
            CacheKind::Anthropic => "claude-sonnet-4.5",
            CacheKind::Openai | CacheKind::Vllm => "gpt-5",
            CacheKind::Gemini => "gemini-2.5-pro",
        };
        self.models
            .iter()
            .find(|m| m.name == name)
            .or_else(|| {
                self.models
                    .iter()
                    .find(|m| self.provider(m).is_some_and(|p| p.cache == cache.name()))
            })
            .or_else(|| self.models.first())
            .cloned()
            .expect("a table has at least one model")
    }

    /// A model's provider.
    pub fn provider(&self, model: &ModelPrice) -> Option<&Provider> {
        self.providers.iter().find(|p| p.name == model.provider)
    }

    /// The cache model of a model's provider.
    pub fn cache_of(&self, model: &ModelPrice) -> CacheKind {
        self.provider(model)
            .and_then(|p| CacheKind::parse(&p.cache))
            .unwrap_or(CacheKind::Openai)
    }

    /// The rules a cache model of `kind` runs with for a session priced as `model`: the
    /// provider's (the one of that cache kind), with the model's minimum prefix when it is of
    /// that provider, else the kind's default row's.
    pub fn rules(&self, kind: CacheKind, model: &ModelPrice) -> CacheRules {
        let row = if self.cache_of(model) == kind {
            model.clone()
        } else {
            self.default_for(kind)
        };
        let provider = self
            .providers
            .iter()
            .find(|p| CacheKind::parse(&p.cache) == Some(kind));
        let base = match provider {
            Some(p) => CacheRules {
                min_tokens: row.min_cacheable,
                step: p.step.max(1),
                ttl_ms: (p.ttl_secs > 0).then(|| p.ttl_secs as i64 * 1_000),
                ttl_max_ms: p.ttl_max_secs.map(|s| s as i64 * 1_000),
                long_ttl_ms: (p.long_ttl_secs > 0).then(|| p.long_ttl_secs as i64 * 1_000),
                max_breakpoints: p.max_breakpoints,
                lookback_blocks: p.lookback_blocks,
                routing_miss: p.routing_miss.clamp(0.0, 1.0),
                lag_tokens: p.lag_tokens,
                writes_billed: false,
                matches_at_breakpoints: false,
            },
            None => CacheRules::documented(kind, row.min_cacheable),
        };
        // A family's own lifetime replaces the provider's, gradual eviction included.
        let ttl = row.ttl_secs.map(|s| s as i64 * 1_000);
        CacheRules {
            ttl_ms: ttl.or(base.ttl_ms),
            ttl_max_ms: if ttl.is_some() { None } else { base.ttl_max_ms },
            writes_billed: kind != CacheKind::Anthropic && row.cache_write.is_some(),
            // From GPT-5.6 on, billed writes and matching at breakpoints come together.
            matches_at_breakpoints: kind == CacheKind::Openai && row.cache_write.is_some(),
            ..base
        }
    }
}

impl Catalog {
    /// [`Catalog::rules`] for a session of `client` (its log's name, `codex 0.92.0`): the
    /// provider's, with the client's own calibrated values where the table has them for that
    /// provider's cache.
    pub fn rules_for_client(
        &self,
        kind: CacheKind,
        model: &ModelPrice,
        client: Option<&str>,
    ) -> CacheRules {
        let rules = self.rules(kind, model);
        let Some(client) = client else {
            return rules;
        };
        let own = self.clients.iter().find(|c| {
            client.starts_with(c.client.as_str())
                && self
                    .providers
                    .iter()
                    .any(|p| p.name == c.provider && CacheKind::parse(&p.cache) == Some(kind))
        });
        match own {
            Some(c) => CacheRules {
                routing_miss: c
                    .routing_miss
                    .map_or(rules.routing_miss, |m| m.clamp(0.0, 1.0)),
                lag_tokens: c.lag_tokens.unwrap_or(rules.lag_tokens),
                ttl_max_ms: c
                    .ttl_max_secs
                    .map(|s| s as i64 * 1_000)
                    .or(rules.ttl_max_ms),
                ..rules
            },
            None => rules,
        }
    }
}

/// How every session of a replay is priced and cached.
#[derive(Debug, Clone)]
pub struct Pricing {
    /// Each session's own row (its model's, or its provider's default), and how it was found.
    pub own: Vec<ModelPrice>,
    /// How each session's row was found.
    pub matched: Vec<Match>,
    /// Each session's own provider's cache model.
    pub own_cache: Vec<CacheKind>,
    /// Per cache model asked for (in order): each session's row under it, its own where its
    /// provider's cache is that one, else that cache's default row.
    pub per_cache: Vec<Vec<ModelPrice>>,
    /// Per session: the cache models to simulate with their rules (those asked for, and its own
    /// provider's when it has recorded usage to validate against).
    pub spec: Vec<Vec<(CacheKind, CacheRules)>>,
}

impl Pricing {
    /// Prices `transcripts` for the cache models `caches`; a session that names no model takes
    /// `fallback`'s default row as its own (or the cache its recorded usage shows).
    pub fn of(
        catalog: &Catalog,
        transcripts: &[ctxgc_core::Transcript],
        caches: &[CacheKind],
        fallback: CacheKind,
    ) -> Pricing {
        let mut pricing = Pricing {
            own: Vec::new(),
            matched: Vec::new(),
            own_cache: Vec::new(),
            per_cache: vec![Vec::new(); caches.len()],
            spec: Vec::new(),
        };
        for t in transcripts {
            let recorded = t.messages.iter().any(|m| m.usage.is_some());
            let guess = if recorded {
                recorded_cache(t)
            } else {
                fallback
            };
            let priced = catalog.price_of(t.model.as_deref(), guess);
            let own_cache = catalog.cache_of(&priced.price);
            let client = t.recording.as_ref().map(|r| r.client.as_str());
            let mut spec = Vec::new();
            for (k, &cache) in caches.iter().enumerate() {
                let row = if cache == own_cache {
                    priced.price.clone()
                } else {
                    catalog.default_for(cache)
                };
                spec.push((cache, catalog.rules_for_client(cache, &row, client)));
                pricing.per_cache[k].push(row);
            }
            if recorded && !caches.contains(&own_cache) {
                spec.push((
                    own_cache,
                    catalog.rules_for_client(own_cache, &priced.price, client),
                ));
            }
            pricing.spec.push(spec);
            pricing.own.push(priced.price);
            pricing.matched.push(priced.matched);
            pricing.own_cache.push(own_cache);
        }
        pricing
    }

    /// What priced a table: one row's name, or each row with its count of sessions.
    pub fn label(prices: &[ModelPrice]) -> String {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for p in prices {
            match counts.iter_mut().find(|(n, _)| *n == p.name) {
                Some((_, c)) => *c += 1,
                None => counts.push((&p.name, 1)),
            }
        }
        match counts.as_slice() {
            [(name, _)] => (*name).to_owned(),
            _ => counts
                .iter()
                .map(|(n, c)| format!("{n} x{c}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Warnings for the sessions whose model the table does not have, and a note for those
    /// that name none, each naming the row used.
    pub fn warnings(
        &self,
        catalog: &Catalog,
        transcripts: &[ctxgc_core::Transcript],
    ) -> Vec<String> {
        let mut unknown: Vec<(&str, &str, usize)> = Vec::new();
        let mut unnamed = 0usize;
        for (matched, price) in self.matched.iter().zip(&self.own) {
            match matched {
                Match::Known => {}
                Match::Unnamed => unnamed += 1,
                Match::Unknown { model } => {
                    match unknown.iter_mut().find(|(m, _, _)| *m == model.as_str()) {
                        Some((_, _, n)) => *n += 1,
                        None => unknown.push((model, &price.name, 1)),
                    }
                }
            }
        }
        let mut out: Vec<String> = unknown
            .iter()
            .map(|(model, row, n)| {
                format!(
                    "warning: model `{model}` ({n} sessions) is not in the cache model table: priced as `{row}`, its provider's default row ({}); give its prices with --cache-models FILE",
                    catalog
                        .models
                        .iter()
                        .find(|m| m.name == *row)
                        .map_or_else(String::new, |m| m.source.clone())
                )
            })
            .collect();
        if unnamed > 0 {
            let recorded = transcripts
                .iter()
                .zip(&self.matched)
                .filter(|(t, m)| {
                    **m == Match::Unnamed && t.messages.iter().any(|m| m.usage.is_some())
                })
                .count();
            out.push(format!(
                "note: {unnamed} sessions name no model ({recorded} of them with recorded usage): each table prices them with its cache model's default row"
            ));
        }
        out
    }
}

/// The cache that served a transcript whose model the table does not name, as its recorded
/// usage shows: Anthropic's where it records cache writes, else OpenAI's automatic caching.
fn recorded_cache(t: &ctxgc_core::Transcript) -> CacheKind {
    let writes = t
        .messages
        .iter()
        .filter_map(|m| m.usage)
        .any(|u| u.cache_write_tokens > 0);
    if writes {
        CacheKind::Anthropic
    } else {
        CacheKind::Openai
    }
}

/// The row a cache model is priced with by default, from the built-in table.
pub fn default_for(cache: CacheKind) -> ModelPrice {
    builtin().default_for(cache)
}

impl ModelPrice {
    /// Cost in USD of a request's input as served, plus its output: writes with the long
    /// lifetime at their own price.
    pub fn cost(&self, served: &Served, output_tokens: usize) -> f64 {
        let write = self.cache_write.unwrap_or(self.input);
        let write_long = self.cache_write_1h.unwrap_or(write);
        let long = served.written_long.min(served.written);
        (served.uncached as f64 * self.input
            + served.cached as f64 * self.cache_read
            + (served.written - long) as f64 * write
            + long as f64 * write_long
            + output_tokens as f64 * self.output)
            / 1e6
    }

    /// `name (source, date)`, for the reports.
    pub fn cited(&self) -> String {
        format!("{} ({}, {})", self.name, self.source, self.date)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codex's sessions meet OpenAI's cache with its own calibrated values (it sends a
    /// `prompt_cache_key`); other clients', and Codex's under another provider's cache, keep
    /// the provider's.
    #[test]
    fn a_clients_own_values_replace_its_providers() {
        let table = builtin();
        let gpt5 = table.find("gpt-5").unwrap().clone();
        let provider = table.rules(CacheKind::Openai, &gpt5);
        let codex = table.rules_for_client(CacheKind::Openai, &gpt5, Some("codex 0.92.0"));
        assert_eq!(codex.routing_miss, 0.015);
        assert_eq!(codex.ttl_max_ms, Some(3_000_000));
        assert_eq!(codex.step, provider.step, "documented rules stay");
        let other = table.rules_for_client(CacheKind::Openai, &gpt5, Some("hermes"));
        assert_eq!(other, provider);
        let claude = table.find("claude-opus-4.5").unwrap().clone();
        assert_eq!(
            table.rules_for_client(CacheKind::Anthropic, &claude, Some("codex 0.92.0")),
            table.rules(CacheKind::Anthropic, &claude)
        );
        let bad = "[[provider]]\nname = \"openai\"\ncache = \"openai\"\nttl_secs = 300\nlong_ttl_secs = 0\nmax_breakpoints = 0\nlookback_blocks = 0\nstep = 128\nrouting_miss = 0.0\nlag_tokens = 0\nsource = \"x\"\n[[model]]\nname = \"gpt-5\"\nprovider = \"openai\"\ninput = 1.0\ncache_read = 0.1\noutput = 8.0\nmin_cacheable = 1024\nsource = \"x\"\ndate = \"x\"\n[[client]]\nclient = \"codex\"\nprovider = \"nobody\"\nsource = \"x\"\n";
        let err = Catalog::parse(bad).err().unwrap().to_string();
        assert!(err.contains("nobody"), "{err}");
    }

    #[test]
    fn table_parses_and_prices_a_request() {
        let table = builtin();
        assert!(
            table
                .models
                .iter()
                .all(|m| !m.source.is_empty() && !m.date.is_empty())
        );
        for kind in [
            CacheKind::Anthropic,
            CacheKind::Openai,
            CacheKind::Gemini,
            CacheKind::Vllm,
        ] {
            let row = table.default_for(kind);
            assert!(table.models.iter().any(|m| m.name == row.name));
        }
        let sonnet = default_for(CacheKind::Anthropic);
        let served = Served {
            cached: 1_000_000,
            written: 2_000_000,
            written_long: 1_000_000,
            uncached: 1_000_000,
        };
        // 5-minute writes at 1.25x, 1-hour writes at 2x the input price.
        assert!(
            (sonnet.cost(&served, 1_000_000) - (0.30 + 3.75 + 6.00 + 3.00 + 15.00)).abs() < 1e-9
        );
        let gpt5 = default_for(CacheKind::Openai);
        let read_only = Served {
            cached: 2_000_000,
            ..Served::default()
        };
        assert!((gpt5.cost(&read_only, 0) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn model_names_find_their_family_and_no_other() {
        let table = builtin();
        let row = |name: &str| table.find(name).map(|m| m.name.as_str());
        assert_eq!(row("claude-opus-4-5-20251101"), Some("claude-opus-4.5"));
        assert_eq!(row("claude-opus-4-6"), Some("claude-opus-4.5"));
        assert_eq!(row("claude-sonnet-4-5-20250929"), Some("claude-sonnet-4.5"));
        assert_eq!(row("claude-sonnet-4-20250514"), Some("claude-sonnet-4.5"));
        assert_eq!(row("claude-sonnet-4-6"), Some("claude-sonnet-4.6"));
        assert_eq!(row("claude-haiku-4-5-20251001"), Some("claude-haiku-4.5"));
        assert_eq!(row("gpt-5-mini-2025-08-07"), Some("gpt-5-mini"));
        assert_eq!(row("gpt-5.1-codex-max"), Some("gpt-5"));
        assert_eq!(row("gpt-5.5"), Some("gpt-5.5"));
        assert_eq!(row("openai/gpt-5.2-codex"), Some("gpt-5.2"));
        assert_eq!(row("google/gemini-3-pro-preview"), Some("gemini-3-pro"));
        assert_eq!(row("gpt-5.6-terra-2026-10-01"), Some("gpt-5.6-terra"));
        assert_eq!(row("gpt-5.6"), Some("gpt-5.6-terra"));
        // A newer version is not its predecessor.
        assert_eq!(row("gpt-5.7"), None);
        // GPT-5.6 bills writes and keeps entries 30 minutes; GPT-5 does neither.
        let rules = |name: &str| table.rules(CacheKind::Openai, table.find(name).unwrap());
        assert!(rules("gpt-5.6-luna").writes_billed && !rules("gpt-5").writes_billed);
        assert_eq!(rules("gpt-5.6-luna").ttl_ms, Some(1_800_000));
        assert_eq!(rules("gpt-5").ttl_max_ms, Some(600_000));
        assert_eq!(row("claude-opus-5"), None);
    }

    /// The engine weighs an event's cache write with the core's ratios; the lab prices it with
    /// this table: for every model both know, they agree.
    #[test]
    fn the_engines_cache_ratios_are_the_tables() {
        for m in builtin().models {
            for name in std::iter::once(&m.name).chain(&m.aliases) {
                let Some(core) = ctxgc_core::models::cache_prices(name) else {
                    continue;
                };
                let write = m.cache_write.unwrap_or(m.input) / m.input;
                assert!(
                    (core.read - m.cache_read / m.input).abs() < 1e-9
                        && (core.write - write).abs() < 1e-9,
                    "{name}: the engine takes read {} and write {}, the table {} and {write}",
                    core.read,
                    core.write,
                    m.cache_read / m.input
                );
            }
        }
    }

    #[test]
    fn unknown_models_say_so_and_take_their_providers_default() {
        let table = builtin();
        let priced = table.price_of(Some("claude-opus-5-20270101"), CacheKind::Openai);
        assert_eq!(
            priced.matched,
            Match::Unknown {
                model: "claude-opus-5-20270101".into()
            }
        );
        assert_eq!(priced.price.name, "claude-sonnet-4.5");
        let priced = table.price_of(Some("gpt-5.7"), CacheKind::Anthropic);
        assert_eq!(priced.price.name, "gpt-5");
        let priced = table.price_of(None, CacheKind::Gemini);
        assert_eq!(
            (priced.matched, priced.price.name.as_str()),
            (Match::Unnamed, "gemini-2.5-pro")
        );
    }

    #[test]
    fn a_table_that_names_a_missing_provider_is_refused() {
        let text = r#"
[[provider]]
name = "openai"
cache = "openai"
ttl_secs = 300
long_ttl_secs = 0
max_breakpoints = 0
lookback_blocks = 0
step = 128
routing_miss = 0.0
lag_tokens = 0
source = "s"

[[model]]
name = "m"
provider = "nobody"
input = 1.0
cache_read = 0.1
output = 2.0
min_cacheable = 1024
source = "s"
date = "d"
"#;
        let err = Catalog::parse(text).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("model `m` names provider `nobody`, which the table does not define")
        );
    }
}
