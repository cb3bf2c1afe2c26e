//! The whole `ctxgc.toml`: one table per concern, every field defaulted.

use serde::{Deserialize, Serialize};

use crate::engine::{Policy, Preset};
use crate::tokens::TokenSettings;
use crate::trim::{ConfigError, TrimConfig};

/// The effective configuration (built-in defaults overlaid with the user's file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Token counting.
    pub tokens: TokenSettings,
    /// Insertion-time trimming.
    pub trim: TrimConfig,
    /// Pruning and compaction.
    pub engine: Policy,
    /// `ctxgc serve`.
    pub proxy: ProxySettings,
    /// `[store]`.
    pub store: StoreSettings,
    /// `[cache]`: the prompt cache's lifetime (TTL, retention, keep-alive).
    pub cache: crate::cache_life::CacheSettings,
}

/// Where originals are kept, and for how long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSettings {
    /// Days an original or a session's state is kept after it was last written (SQLite rows
    /// are deleted at start-up, hourly and by `ctxgc gc`; Redis keys expire by themselves).
    pub retention_days: u64,
    /// Milliseconds one store operation may take (a locked SQLite file, a stalled Redis); past
    /// it the request is forwarded unchanged (fail open).
    pub timeout_ms: u64,
    /// Redis: every key starts with `{prefix}:` (deployments sharing one Redis keep apart).
    pub redis_key_prefix: String,
    /// Redis over TLS (`rediss://`): a PEM file of the CA that signed the server's certificate;
    /// unset: the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_ca_file: Option<std::path::PathBuf>,
    /// Megabytes of originals a `memory` or SQLite store keeps at most (0: no bound); past it
    /// the oldest originals no session refers to any more go first (`ctxgc_store_evicted_total`).
    /// Redis bounds itself (`maxmemory`).
    pub max_mb: u64,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            retention_days: 7,
            timeout_ms: 2_000,
            redis_key_prefix: "ctxgc".into(),
            redis_ca_file: None,
            max_mb: 2_048,
        }
    }
}

impl StoreSettings {
    /// The retention as a duration.
    pub fn retention(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.retention_days * 86_400)
    }

    /// The deadline of one store operation.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.timeout_ms)
    }
}

/// What `ctxgc serve` does to requests beside trimming (its command-line flags override these).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxySettings {
    /// Observe mode: forward every request unchanged, and compute beside it, off the request
    /// path, what ctxgc would have sent (the stats and the dashboard say "would have saved").
    pub observe: bool,
    /// Run the engine's events (prune first, then compaction) across requests.
    pub compact: bool,
    /// With `compact` off, still run an event on a request that comes after the session was
    /// idle past the cache's lifetime (`[engine] cold_cache_secs`): that request rewrites the
    /// whole cached prefix anyway, so the event is free, and it is rare. Between such requests
    /// the proxy does no more than without events.
    pub cold_events: bool,
    /// Add `trim_tool_result` and `recall_tool_result` to requests that carry tools and run the
    /// model's calls to them inside the proxy.
    pub inject_tools: bool,
    /// Add Anthropic cache breakpoints to requests that carry none.
    pub cache_breakpoints: bool,
    /// Set OpenAI's `prompt_cache_key` to the session id when absent.
    pub prompt_cache_key: bool,
    /// Take each request's context window from its `model` (the built-in table of known
    /// models, [`crate::models`]); off: every request gets `[trim] default_window`. The
    /// `--window` flag turns it off.
    pub model_windows: bool,
    /// The secret tenant ids are keyed with (a keyed hash of each caller's API key); unset:
    /// one is made at the first start and kept in the store, so replicas on one store agree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_secret: Option<String>,
    /// Presented as `x-ctxgc-admin-token`, lets `/ctxgc/stats` list every tenant's sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<String>,
    /// Seconds to connect to an upstream.
    pub connect_timeout_secs: u64,
    /// Seconds an upstream may stay silent: before its first byte, and between two chunks of
    /// its answer (reasoning models can think for minutes before the first byte). A stream
    /// cut by it ends with an error event the client sees.
    pub upstream_idle_timeout_secs: u64,
    /// Seconds a client has to send a request's body.
    pub client_body_timeout_secs: u64,
    /// Seconds a client has to send a request's headers.
    pub client_header_timeout_secs: u64,
    /// Seconds the requests and streams in flight have to finish after SIGTERM or Ctrl-C
    /// (no new connection is accepted meanwhile); what is still open then is cut.
    pub shutdown_grace_secs: u64,
    /// Milliseconds the rewrite of one request may take; past it the request goes upstream
    /// unchanged (fail open, cause `deadline`).
    pub rewrite_deadline_ms: u64,
    /// Megabytes of request bodies held for rewriting at once (counting what parsing them
    /// takes); past it a request is streamed upstream as it comes, unbuffered and unchanged
    /// (fail open, cause `memory`).
    pub inflight_memory_mb: u64,
}

impl Default for ProxySettings {
    fn default() -> Self {
        ProxySettings {
            observe: false,
            compact: false,
            cold_events: true,
            inject_tools: false,
            cache_breakpoints: true,
            prompt_cache_key: true,
            model_windows: true,
            tenant_secret: None,
            admin_token: None,
            connect_timeout_secs: 10,
            upstream_idle_timeout_secs: 600,
            client_body_timeout_secs: 60,
            client_header_timeout_secs: 30,
            shutdown_grace_secs: 30,
            rewrite_deadline_ms: 3_000,
            inflight_memory_mb: 128,
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The TOML does not parse or has unknown keys.
    #[error("invalid configuration: {0}")]
    Toml(#[from] toml::de::Error),
    /// A value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(#[from] ConfigError),
    /// A `[store]` value is out of range.
    #[error("invalid configuration: [store] {key} must be {why}")]
    Store {
        /// The key.
        key: &'static str,
        /// What it must be.
        why: &'static str,
    },
    /// A `[proxy]` value is out of range.
    #[error("invalid configuration: [proxy] {key} must be {why}")]
    Proxy {
        /// The key.
        key: &'static str,
        /// What it must be.
        why: &'static str,
    },
    /// A value of another section is out of range.
    #[error("invalid configuration: [{section}] {key} must be {why}")]
    Section {
        /// The section (`engine`, `tokens`).
        section: &'static str,
        /// The key.
        key: &'static str,
        /// What it must be.
        why: &'static str,
    },
}

/// A share: in (0, 1].
fn share(section: &'static str, key: &'static str, value: f64) -> Result<(), LoadError> {
    (value > 0.0 && value <= 1.0)
        .then_some(())
        .ok_or(LoadError::Section {
            section,
            key,
            why: "a share in (0, 1]",
        })
}

/// Checks the `[engine]` values a planner could not work with.
fn validate_engine(e: &crate::engine::Policy) -> Result<(), LoadError> {
    let section = "engine";
    share(section, "trigger_share", e.trigger_share)?;
    if !(0.0..=0.5).contains(&e.answer_reserve_share) {
        return Err(LoadError::Section {
            section,
            key: "answer_reserve_share",
            why: "a share in [0, 0.5]",
        });
    }
    share(section, "tail_share", e.tail_share)?;
    share(section, "runway_share", e.runway_share)?;
    share(section, "runway_max_share", e.runway_max_share)?;
    share(section, "summary_share", e.summary_share)?;
    share(section, "summary_window_share", e.summary_window_share)?;
    if !(0.0..=1.0).contains(&e.min_reclaim_share) {
        return Err(LoadError::Section {
            section,
            key: "min_reclaim_share",
            why: "a share in [0, 1]",
        });
    }
    if !(e.tail_ceiling >= 1.0 && e.tail_ceiling <= 10.0) {
        return Err(LoadError::Section {
            section,
            key: "tail_ceiling",
            why: "between 1 and 10",
        });
    }
    if !(0.0..=1.0).contains(&e.warm_prune_min_share) {
        return Err(LoadError::Section {
            section,
            key: "warm_prune_min_share",
            why: "a share in [0, 1]",
        });
    }
    if e.protected_min > e.protected_max {
        return Err(LoadError::Section {
            section,
            key: "protected_min",
            why: "at most protected_max",
        });
    }
    if e.summary_min_tokens > e.summary_max_tokens {
        return Err(LoadError::Section {
            section,
            key: "summary_min_tokens",
            why: "at most summary_max_tokens",
        });
    }
    if e.max_ineffective_events == 0 {
        return Err(LoadError::Section {
            section,
            key: "max_ineffective_events",
            why: "at least 1",
        });
    }
    Ok(())
}

impl Config {
    /// The built-in defaults with a preset's settings.
    pub fn with_preset(preset: Preset) -> Config {
        let mut config = Config {
            engine: preset.policy(),
            ..Config::default()
        };
        config.trim.limit_scale = preset.limit_scale();
        config.trim.budget_window_cap = preset.budget_window_cap();
        config.proxy.compact = preset.events_at_a_warm_cache();
        config
    }

    /// Applies a preset on top of this configuration (`ctxgc serve --preset`): its engine
    /// settings and its trim scale and window cap replace the file's, and `lean` runs events on
    /// any request.
    pub fn apply_preset(&mut self, preset: Preset) {
        let engine = preset.policy();
        self.engine.economic_margin = engine.economic_margin;
        self.engine.warm_prune_min_share = engine.warm_prune_min_share;
        self.engine.warm_prune_gap_turns = engine.warm_prune_gap_turns;
        self.engine.mask_keep_turns = engine.mask_keep_turns;
        self.engine.keep_likely_use = engine.keep_likely_use;
        self.engine.keep_likely_stale = engine.keep_likely_stale;
        self.trim.limit_scale = preset.limit_scale();
        self.trim.budget_window_cap = preset.budget_window_cap();
        self.proxy.compact |= preset.events_at_a_warm_cache();
    }

    /// Parses a `ctxgc.toml` text; absent keys take their defaults.
    pub fn from_toml(text: &str) -> Result<Config, LoadError> {
        let mut table: toml::Table = toml::from_str(text)?;
        // `[engine] preset` names the base the other `[engine]` keys override.
        if let Some(toml::Value::Table(engine)) = table.get_mut("engine")
            && let Some(preset) = engine.remove("preset")
        {
            let preset = preset
                .as_str()
                .and_then(Preset::parse)
                .ok_or(LoadError::Section {
                    section: "engine",
                    key: "preset",
                    why: "\"safe\" or \"lean\"",
                })?;
            let mut base = toml::Table::try_from(preset.policy()).map_err(|e| {
                LoadError::Toml(<toml::de::Error as serde::de::Error>::custom(e.to_string()))
            })?;
            base.extend(std::mem::take(engine));
            *engine = base;
            let trim = table
                .entry("trim")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(trim) = trim {
                trim.entry("limit_scale")
                    .or_insert(toml::Value::Float(preset.limit_scale()));
                trim.entry("budget_window_cap")
                    .or_insert(toml::Value::Integer(
                        i64::try_from(preset.budget_window_cap()).unwrap_or(i64::MAX),
                    ));
            }
            let proxy = table
                .entry("proxy")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(proxy) = proxy {
                proxy
                    .entry("compact")
                    .or_insert(toml::Value::Boolean(preset.events_at_a_warm_cache()));
            }
        }
        let config: Config = table.try_into()?;
        config.trim.validate()?;
        if !(1..=3_650).contains(&config.store.retention_days) {
            return Err(LoadError::Store {
                key: "retention_days",
                why: "between 1 and 3650",
            });
        }
        if !(10..=60_000).contains(&config.store.timeout_ms) {
            return Err(LoadError::Store {
                key: "timeout_ms",
                why: "between 10 and 60000",
            });
        }
        validate_engine(&config.engine)?;
        let tokens = &config.tokens;
        if !(tokens.claude_correction >= 0.5 && tokens.claude_correction <= 3.0) {
            return Err(LoadError::Section {
                section: "tokens",
                key: "claude_correction",
                why: "between 0.5 and 3",
            });
        }
        if tokens.image_tokens > 100_000 {
            return Err(LoadError::Section {
                section: "tokens",
                key: "image_tokens",
                why: "at most 100000",
            });
        }
        for (key, value) in [
            ("tenant_secret", &config.proxy.tenant_secret),
            ("admin_token", &config.proxy.admin_token),
        ] {
            if value.as_deref().is_some_and(|v| v.len() < 16) {
                return Err(LoadError::Proxy {
                    key,
                    why: "at least 16 characters (or absent)",
                });
            }
        }
        for (key, secs) in [
            (
                "client_header_timeout_secs",
                config.proxy.client_header_timeout_secs,
            ),
            ("connect_timeout_secs", config.proxy.connect_timeout_secs),
            (
                "upstream_idle_timeout_secs",
                config.proxy.upstream_idle_timeout_secs,
            ),
            (
                "client_body_timeout_secs",
                config.proxy.client_body_timeout_secs,
            ),
            ("shutdown_grace_secs", config.proxy.shutdown_grace_secs),
        ] {
            if !(1..=86_400).contains(&secs) {
                return Err(LoadError::Proxy {
                    key,
                    why: "between 1 and 86400 seconds",
                });
            }
        }
        if !(10..=600_000).contains(&config.proxy.rewrite_deadline_ms) {
            return Err(LoadError::Proxy {
                key: "rewrite_deadline_ms",
                why: "between 10 and 600000 milliseconds",
            });
        }
        if !(16..=1 << 20).contains(&config.proxy.inflight_memory_mb) {
            return Err(LoadError::Proxy {
                key: "inflight_memory_mb",
                why: "between 16 and 1048576 megabytes",
            });
        }
        if config.store.max_mb > 0 && config.store.max_mb < 16 {
            return Err(LoadError::Store {
                key: "max_mb",
                why: "0 (no bound) or at least 16 megabytes",
            });
        }
        Ok(config)
    }

    /// The configuration as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_timeouts_are_checked_with_the_key_named() {
        let e = Config::from_toml("[proxy]\nupstream_idle_timeout_secs = 0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid configuration: [proxy] upstream_idle_timeout_secs must be between 1 and 86400 seconds"
        );
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let c = Config::default();
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
        assert_eq!(Config::from_toml("").unwrap(), c);
    }

    #[test]
    fn a_preset_is_the_base_explicit_keys_override() {
        let lean = Config::from_toml("[engine]\npreset = \"lean\"\n").unwrap();
        assert_eq!(lean, Config::with_preset(Preset::Lean));
        assert_eq!(lean.engine.mask_keep_turns, 10);
        assert!((lean.trim.limit_scale - 0.5).abs() < 1e-9 && lean.proxy.compact);
        assert_eq!(
            lean.trim.budget_window_cap, 32_000,
            "lean keeps what it keeps at 32K"
        );
        let tuned = Config::from_toml(
            "[engine]\npreset = \"lean\"\nmask_keep_turns = 5\n[trim]\nlimit_scale = 0.8\n[proxy]\ncompact = false\n",
        )
        .unwrap();
        assert_eq!(tuned.engine.mask_keep_turns, 5);
        assert!((tuned.trim.limit_scale - 0.8).abs() < 1e-9 && !tuned.proxy.compact);
        assert_eq!(tuned.engine.warm_prune_min_share, 0.0, "the rest is lean's");
        let safe = Config::from_toml("[engine]\npreset = \"safe\"\n").unwrap();
        assert_eq!(safe, Config::default());
        let err = Config::from_toml("[engine]\npreset = \"fast\"\n").unwrap_err();
        assert!(err.to_string().contains("[engine] preset"), "{err}");
        let mut served = Config::default();
        served.apply_preset(Preset::Lean);
        assert_eq!(served, Config::with_preset(Preset::Lean));
    }

    #[test]
    fn partial_files_override_only_what_they_name() {
        let c = Config::from_toml("[trim]\nhard_cap_bytes = 50000\n").unwrap();
        assert_eq!(c.trim.hard_cap_bytes, 50_000);
        assert_eq!(c.trim.profiles, TrimConfig::default().profiles);
    }

    /// Defect guarded: a `[[trim.profiles]]` entry had to give every field and replaced every
    /// built-in profile.
    #[test]
    fn a_profile_entry_overrides_only_its_fields_and_its_own_tools() {
        let c = Config::from_toml(
            "[[trim.profiles]]\nname = \"terminal\"\nhead = 0.5\n\n[[trim.profiles]]\nname = \"mine\"\ntools = [\"my_tool\"]\nwindow_share = 0.01\n",
        )
        .unwrap();
        let builtin = TrimConfig::default();
        let terminal = c.trim.profile_for("bash");
        assert_eq!(terminal.head, 0.5);
        let before = builtin.profile_for("bash");
        assert_eq!(
            (terminal.tail, terminal.window_share),
            (before.tail, before.window_share)
        );
        assert_eq!(c.trim.profile_for("my_tool").name, "mine");
        assert_eq!(c.trim.profile_for("my_tool").window_share, 0.01);
        assert_eq!(c.trim.profile_for("Read"), builtin.profile_for("Read"));
        assert_eq!(c.trim.profiles.len(), builtin.profiles.len() + 1);
        let err = Config::from_toml("[[trim.profiles]]\nname = \"other\"\nhead = 0.2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs `tools`"), "{err}");
        // What `ctxgc config` prints reads back as itself.
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = Config::from_toml("[trim]\nhard_cap = 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("hard_cap"), "{err}");
    }

    #[test]
    fn every_section_names_the_key_it_refuses() {
        for (toml, expected) in [
            (
                "[engine]\ntrigger_share = 1.5\n",
                "[engine] trigger_share must be a share in (0, 1]",
            ),
            (
                "[engine]\nmax_ineffective_events = 0\n",
                "[engine] max_ineffective_events must be at least 1",
            ),
            (
                "[engine]\nsummary_min_tokens = 9000\nsummary_max_tokens = 100\n",
                "[engine] summary_min_tokens must be at most summary_max_tokens",
            ),
            (
                "[tokens]\nclaude_correction = 0\n",
                "[tokens] claude_correction must be between 0.5 and 3",
            ),
            (
                "[proxy]\nadmin_token = \"short\"\n",
                "[proxy] admin_token must be at least 16 characters (or absent)",
            ),
            (
                "[proxy]\nclient_header_timeout_secs = 0\n",
                "[proxy] client_header_timeout_secs must be between 1 and 86400 seconds",
            ),
            (
                "[store]\ntimeout_ms = 1\n",
                "[store] timeout_ms must be between 10 and 60000",
            ),
        ] {
            let e = Config::from_toml(toml).unwrap_err().to_string();
            assert!(e.ends_with(expected), "{toml}: {e}");
        }
    }
}
