//! Per-tool trimming profiles and the `[trim]` configuration.
//!
//! A profile says how a tool's output is trimmed: its soft limit (a share of the model's context
//! window, so a 32K model gets less than a 1M model), how the kept bytes are split between head,
//! tail and salient middle lines, and which structure-aware mode applies. Tools are matched by
//! name or glob, first matching profile wins. A hard cap applies to every tool, including those
//! whose profile says never to trim.

use serde::{Deserialize, Serialize};

use crate::trim::lines::{LineBudget, MARKER_RESERVE};

/// How a profile trims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Detect: JSON is trimmed structurally, grep-like output as search results, the rest as lines.
    Auto,
    /// Head + salient middle + tail, by lines.
    Lines,
    /// Grep-like `path:line:text` output: matches spread across files.
    Search,
    /// Structural JSON trimming (falls back to lines when the text is not JSON).
    Json,
    /// Never trimmed below the hard cap (memory, todo lists, questions to the user).
    Never,
}

/// One tool profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Profile name; also the label in markers ("trimmed from terminal output").
    pub name: String,
    /// Tool names or globs (`*`, `?`), matched case-insensitively.
    pub tools: Vec<String>,
    /// How to trim.
    pub mode: Mode,
    /// Soft limit as a share of the context window (in tokens; converted to bytes).
    pub window_share: f64,
    /// The soft limit never exceeds this many tokens, whatever the window: a kept token is
    /// billed on every later request, and a larger window is room, not a reason to keep more.
    /// 0: the window share alone decides.
    #[serde(default)]
    pub max_tokens: u64,
    /// In `auto` mode, output shaped like search results (a `grep -rn` in a shell) gets at most
    /// this many tokens: the agent uses where the matches are, and it greps again or opens the
    /// file for more. 0: the profile's limit alone.
    #[serde(default)]
    pub search_max_tokens: u64,
    /// Share of the kept bytes for the head.
    pub head: f64,
    /// Share of the kept bytes for the tail.
    pub tail: f64,
    /// Share of the kept bytes for salient middle lines (0 disables them: in code, "error" is a word).
    pub salient: f64,
    /// An output keeps at most this share of itself (never below the `[trim]`
    /// `kept_share_floor_bytes`): a long output is then cut in proportion to its size, not
    /// only to the profile's limit. 1 (the default): no such bound. On the shared sessions at
    /// 200K, 0.25 on the terminal profile took GPT-5-mini from 0.877x to 0.845x of `none`
    /// but recall from 100% to 99.2%, and Claude Code's logs from 95.1% to 94.6% of what the
    /// client kept in view at the same cost.
    #[serde(default = "no_share_bound")]
    pub kept_share_max: f64,
}

fn no_share_bound() -> f64 {
    1.0
}

/// The `[trim]` table of `ctxgc.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrimConfig {
    /// Context window (tokens) assumed when the caller does not give one.
    pub default_window: u64,
    /// Bytes per token used to turn window shares into byte limits (4 is typical of English
    /// text and code with o200k; logs and JSON run a little lower).
    pub bytes_per_token: f64,
    /// Smallest soft limit, in bytes.
    pub min_limit_bytes: usize,
    /// Limits scale with the window up to this many tokens, no further: a kept token is
    /// billed on every later request whatever the window, so a larger window is room, not a
    /// reason to keep more. The shares were tuned at 200K; 0: no cap. (`lean`: 32K.)
    pub budget_window_cap: u64,
    /// No tool output is ever longer than this, in bytes, whatever its profile.
    pub hard_cap_bytes: usize,
    /// All results of one assistant turn (parallel calls) together get at most this share of
    /// the window; the largest are trimmed first. Not more: at a 16K window one turn must add
    /// less than an event's runway, or events run on consecutive turns (the proxy's lineage
    /// property test); at 20% Claude Code's parallel reads of files it then used were cut less
    /// (one user's logs, judged with the relevance table fitted without them: 98.8% of what
    /// the client kept in view at 0.886x of `none`, against 98.6% at 0.884x).
    pub turn_window_share: f64,
    /// Longest salient or search line shown, in bytes.
    pub line_max_bytes: usize,
    /// JSON and search output up to this size is parsed in memory; larger input (a streamed
    /// `ctxgc trim`) is trimmed as lines so memory stays bounded.
    pub structured_max_bytes: usize,
    /// Every profile's soft limit is multiplied by this (1: the profiles' own limits; the
    /// `lean` preset uses 0.5, keeping half as much of each output at insertion).
    pub limit_scale: f64,
    /// A profile's `kept_share_max` never takes an output below this many bytes.
    pub kept_share_floor_bytes: usize,
    /// An output the client already cut itself (Codex's `Warning: truncated output`, Gemini
    /// CLI's `Output too large`, mini-swe-agent's `<elided_chars>`, opencode's `...output
    /// truncated...`) is kept as the client cut it, up to this share of the window: the agent
    /// was shown that much, and cutting it again hides what the client chose to show. 0: such
    /// outputs are trimmed like any other.
    pub client_cut_window_share: f64,
    /// An echo of the agent's own edit (Claude Code's `Edit` and `Write` of an existing file:
    /// "The file … has been updated. Here's the result of running `cat -n` on a snippet of the
    /// edited file:"; the text editor tool's "has been edited"), shows back lines the agent
    /// just wrote: it keeps at most this many bytes, its head and tail with the recall id. 0:
    /// trimmed like any other output. On the shared Claude Code logs, each user judged by a
    /// relevance table fitted without them: 4 KB / 2 KB / 1 KB / 512 bytes took procrypto from
    /// 0.907x of `none` at 99.5% of what the client kept to 0.904x / 0.901x / 0.897x at 99.5%
    /// and 0.885x at 99.4%, Smartagent from 0.856x to 0.852x / 0.848x / 0.843x / 0.838x at
    /// 100%: 1 KB is the least that costs no user what the client kept.
    pub edit_echo_max_bytes: usize,
    /// Profiles, first match wins; a profile matching `*` should come last. In a file, each
    /// `[[trim.profiles]]` entry changes only what it names: one with a built-in profile's
    /// `name` overrides that profile's fields it gives, a new name adds a profile (its
    /// unnamed fields the catch-all profile's) ahead of the built-in ones, for its own tools.
    #[serde(deserialize_with = "merged_profiles")]
    pub profiles: Vec<Profile>,
}

/// A `[[trim.profiles]]` entry: the fields it names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileEntry {
    name: String,
    tools: Option<Vec<String>>,
    mode: Option<Mode>,
    window_share: Option<f64>,
    max_tokens: Option<u64>,
    search_max_tokens: Option<u64>,
    head: Option<f64>,
    tail: Option<f64>,
    salient: Option<f64>,
    kept_share_max: Option<f64>,
}

impl ProfileEntry {
    fn apply(self, p: &mut Profile) {
        p.name = self.name;
        if let Some(v) = self.tools {
            p.tools = v;
        }
        if let Some(v) = self.mode {
            p.mode = v;
        }
        if let Some(v) = self.window_share {
            p.window_share = v;
        }
        if let Some(v) = self.max_tokens {
            p.max_tokens = v;
        }
        if let Some(v) = self.search_max_tokens {
            p.search_max_tokens = v;
        }
        if let Some(v) = self.head {
            p.head = v;
        }
        if let Some(v) = self.tail {
            p.tail = v;
        }
        if let Some(v) = self.salient {
            p.salient = v;
        }
        if let Some(v) = self.kept_share_max {
            p.kept_share_max = v;
        }
    }
}

/// The built-in profiles with a file's entries merged in (see [`TrimConfig::profiles`]): a
/// user's entry once had to give every field and replaced every built-in profile.
fn merged_profiles<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Profile>, D::Error> {
    let entries = Vec::<ProfileEntry>::deserialize(d)?;
    let mut profiles = default_profiles();
    let mut added = 0;
    for entry in entries {
        match profiles.iter_mut().find(|p| p.name == entry.name) {
            Some(p) => entry.apply(p),
            None => {
                if entry.tools.is_none() {
                    return Err(serde::de::Error::custom(format!(
                        "[[trim.profiles]] `{}` is no built-in profile: a new one needs `tools`",
                        entry.name
                    )));
                }
                let mut p = profiles
                    .last()
                    .cloned()
                    .unwrap_or_else(|| fallback_profile().clone());
                entry.apply(&mut p);
                profiles.insert(added, p);
                added += 1;
            }
        }
    }
    Ok(profiles)
}

impl Default for TrimConfig {
    fn default() -> Self {
        TrimConfig {
            default_window: 200_000,
            bytes_per_token: 4.0,
            min_limit_bytes: 2_048,
            budget_window_cap: 200_000,
            hard_cap_bytes: 128 * 1024,
            turn_window_share: 0.10,
            line_max_bytes: 240,
            structured_max_bytes: 4 * 1024 * 1024,
            limit_scale: 1.0,
            kept_share_floor_bytes: 12_288,
            client_cut_window_share: 0.10,
            edit_echo_max_bytes: 1_024,
            profiles: default_profiles(),
        }
    }
}

/// The terminal's soft limit in tokens at any window of 60K or more (about 24 KB). Logs are the
/// outputs agents use least far from their head, tail and error lines: on the shared GPT-5-mini
/// sessions at a 200K window, 6,000 tokens cost 0.865x of `none` at 99.8% recall where 10% of the
/// window (20,000 tokens) cost 0.896x at 99.6%; 4,000 tokens lose recall (98.1%), and on the
/// Claude Code logs 5,000 tokens cut a 21 KB JSONL dump the agent then quoted.
const TERMINAL_MAX_TOKENS: u64 = 6_000;

/// A search run in a shell (`grep -rn`, `rg`, `find`) keeps at most this many tokens (about
/// 6 KB, matches spread across files). On the shared GPT-5-mini sessions, where such dumps are
/// 17% of input tokens, it took ctxgc from 0.865x to 0.850x of `none` at 200K and 64K (recall
/// 99.8% either way) and from 0.801x at 96.2% recall to 0.799x at 97.7% at 32K (fewer events);
/// 1,000 tokens cost recall (98.3% at 200K), 2,000 saved less. Other sets did not move.
const SHELL_SEARCH_MAX_TOKENS: u64 = 1_500;

impl Profile {
    fn at_most_tokens(mut self, max_tokens: u64) -> Profile {
        self.max_tokens = max_tokens;
        self
    }

    fn searches_at_most_tokens(mut self, max_tokens: u64) -> Profile {
        self.search_max_tokens = max_tokens;
        self
    }
}

fn profile(name: &str, tools: &[&str], mode: Mode, share: f64, split: [f64; 3]) -> Profile {
    Profile {
        name: name.to_owned(),
        tools: tools.iter().map(|t| (*t).to_owned()).collect(),
        mode,
        window_share: share,
        max_tokens: 0,
        search_max_tokens: 0,
        head: split[0],
        tail: split[1],
        salient: split[2],
        kept_share_max: 1.0,
    }
}

/// The built-in profiles. Window shares were tuned with the replay lab on the shared transcripts
/// (see README): terminal 10%, file reads 12% and other tools 6% keep 99%+ of what agents later
/// use in view at a 32K window; 4%/5%/3% saved 4% more but lost 6 points of recall. Names cover the common agents: Claude Code (`Bash`, `Read`, `Grep`),
/// Codex (`exec_command`, `shell`), SWE-agent (`open`, `search_dir`), mini-swe-agent (`bash`),
/// MCP servers (`read_file`, `search_files`, also as `mcp__server__tool`), opencode and Hermes
/// (`terminal`, `web_extract`); sub-agent reports (Claude Code's `Task`/`Agent`) are never cut.
pub fn default_profiles() -> Vec<Profile> {
    vec![
        profile(
            "never",
            &[
                "memory*",
                "*_memory",
                "todo*",
                "*todo*",
                "clarify",
                "update_plan",
                "request_user_input",
                "ask_user*",
                "AskUserQuestion",
                "get_goal",
                "*_goal",
                "recall_tool_result",
                "trim_tool_result",
                // A sub-agent's report is the distilled answer the agent asked for (Claude Code's
                // `TaskOutput` fetches a background agent's or shell's; Claude Code bounds it
                // itself: at most 30,156 characters in the shared logs).
                "Task",
                "TaskOutput",
                "Agent",
                "spawn_agent",
            ],
            Mode::Never,
            1.0,
            [0.5, 0.5, 0.0],
        ),
        profile(
            "search",
            &[
                "grep",
                "rg",
                "ripgrep",
                "search*",
                "*_search",
                "*search_*",
                "glob",
                "find_file*",
                "codebase_search",
                "list_dir*",
                "ls",
            ],
            Mode::Search,
            0.03,
            [0.5, 0.35, 0.15],
        ),
        profile(
            "file read",
            &[
                "read*",
                "*_read*",
                "view",
                "view_file",
                "open",
                "goto",
                "scroll_*",
                "cat",
                "edit",
                "create",
                "get_file*",
                "str_replace_editor",
                "str_replace_based_edit_tool",
                "*_file",
                "notebook*",
            ],
            Mode::Lines,
            0.12,
            [0.85, 0.15, 0.0],
        ),
        profile(
            "web",
            &[
                "web*", "fetch*", "browse*", "browser*", "http*", "curl", "*_url", "scrape*",
            ],
            Mode::Auto,
            0.03,
            [0.8, 0.2, 0.0],
        ),
        profile(
            "terminal",
            &[
                "bash",
                "shell",
                "sh",
                "terminal",
                "exec*",
                "run*",
                "*_command",
                "command",
                "local_shell",
                "container.exec",
                "python",
                "execute*",
                "process",
            ],
            Mode::Auto,
            0.10,
            [0.3, 0.55, 0.15],
        )
        .at_most_tokens(TERMINAL_MAX_TOKENS)
        .searches_at_most_tokens(SHELL_SEARCH_MAX_TOKENS),
        profile("tool", &["*"], Mode::Auto, 0.06, [0.45, 0.4, 0.15]),
    ]
}

/// Matches `name` against a glob of `*` and `?`, ignoring ASCII case.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    // Every output of a request asks which profile is its tool's: ASCII names (all tools'
    // in practice) are matched in place, without collecting characters (30% of a 40,000-result
    // request's time did that).
    if pattern.is_ascii() && name.is_ascii() {
        return wildcard_match(pattern.as_bytes(), name.as_bytes(), b'*', b'?', |b: u8| {
            b.to_ascii_lowercase()
        });
    }
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    wildcard_match(&p, &n, '*', '?', |c: char| c.to_ascii_lowercase())
}

/// `*` and `?` over any symbols, compared after `lower`.
fn wildcard_match<T: Copy + PartialEq>(
    p: &[T],
    n: &[T],
    any_run: T,
    any_one: T,
    lower: impl Fn(T) -> T,
) -> bool {
    // Iterative matcher with one backtrack point for the last `*`.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == any_one || lower(p[pi]) == lower(n[ni])) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == any_run {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == any_run {
        pi += 1;
    }
    pi == p.len()
}

/// Errors in a trim configuration.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// A share is negative, not finite or above 1.
    #[error("profile '{profile}': {field} must be between 0 and 1, got {value}")]
    BadShare {
        /// Profile name.
        profile: String,
        /// Field name.
        field: &'static str,
        /// The value given.
        value: f64,
    },
    /// No profile has a tool pattern.
    #[error("profile '{0}' matches no tool: give it at least one name or glob in `tools`")]
    NoTools(String),
    /// A numeric setting is out of range.
    #[error("trim.{field}: {why}")]
    BadSetting {
        /// Field name.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

impl TrimConfig {
    /// Checks ranges; call after loading a user's file.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.min_limit_bytes < MARKER_RESERVE * 2 {
            return Err(ConfigError::BadSetting {
                field: "min_limit_bytes",
                why: format!("must be at least {} bytes", MARKER_RESERVE * 2),
            });
        }
        if self.hard_cap_bytes < self.min_limit_bytes {
            return Err(ConfigError::BadSetting {
                field: "hard_cap_bytes",
                why: "must not be below min_limit_bytes".into(),
            });
        }
        if !(self.limit_scale > 0.0 && self.limit_scale <= 1.0) {
            return Err(ConfigError::BadSetting {
                field: "limit_scale",
                why: "must be in (0, 1]".into(),
            });
        }
        if !(0.0..=1.0).contains(&self.client_cut_window_share) {
            return Err(ConfigError::BadSetting {
                field: "client_cut_window_share",
                why: "must be in [0, 1]".into(),
            });
        }
        if !(self.bytes_per_token.is_finite() && self.bytes_per_token > 0.0) {
            return Err(ConfigError::BadSetting {
                field: "bytes_per_token",
                why: "must be a positive number".into(),
            });
        }
        for p in &self.profiles {
            if p.tools.is_empty() {
                return Err(ConfigError::NoTools(p.name.clone()));
            }
            for (field, value) in [
                ("window_share", p.window_share),
                ("head", p.head),
                ("tail", p.tail),
                ("salient", p.salient),
                ("kept_share_max", p.kept_share_max),
            ] {
                let zero_ok = field != "kept_share_max";
                if !(0.0..=1.0).contains(&value) || !value.is_finite() || (!zero_ok && value == 0.0)
                {
                    return Err(ConfigError::BadShare {
                        profile: p.name.clone(),
                        field,
                        value,
                    });
                }
            }
        }
        Ok(())
    }

    /// The profile for a tool name (the last profile when none matches, or a built-in default).
    pub fn profile_for(&self, tool: &str) -> &Profile {
        // An MCP tool is named `mcp__<server>__<tool>` by Claude Code and Codex: the tool's
        // own name says what it returns.
        let tool = tool
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
            .map_or(tool, |(_, name)| name);
        self.profiles
            .iter()
            .find(|p| p.tools.iter().any(|g| glob_matches(g, tool)))
            .or(self.profiles.last())
            .unwrap_or_else(|| fallback_profile())
    }

    /// The limit in bytes for the output `text` under `profile` at `window`: [`Self::limit_for`],
    /// at most `edit_echo_max_bytes` for an echo of the agent's own edit, and, for an output
    /// the client already cut, at least what the client kept, up to `client_cut_window_share`
    /// of the window.
    pub fn limit_for_output(&self, profile: &Profile, window: u64, text: &str) -> usize {
        let limit = self.limit_for(profile, window, text.len());
        if self.is_edit_echo(profile, text) {
            return self.echo_capped(limit);
        }
        if profile.mode == Mode::Never || !super::client_cut(text) {
            return limit;
        }
        let cap =
            self.budget_window(window) as f64 * self.client_cut_window_share * self.bytes_per_token;
        limit
            .max(text.len().min(cap as usize))
            .min(self.hard_cap_bytes)
    }

    /// Whether echoes of the agent's own edits are capped under `profile`
    /// (`edit_echo_max_bytes`).
    pub fn caps_edit_echoes(&self, profile: &Profile) -> bool {
        profile.mode != Mode::Never && self.edit_echo_max_bytes > 0
    }

    /// Whether `text` (an output, or its first [`super::EDIT_ECHO_SCAN_BYTES`]) is an echo of the
    /// agent's own edit that `edit_echo_max_bytes` caps under `profile`.
    pub fn is_edit_echo(&self, profile: &Profile, text: &str) -> bool {
        self.caps_edit_echoes(profile) && super::edit_echo(text)
    }

    /// `limit`, capped at `edit_echo_max_bytes` when `text` (an output, or its first
    /// [`super::EDIT_ECHO_SCAN_BYTES`]) is an echo of the agent's own edit.
    pub fn edit_echo_limit(&self, profile: &Profile, limit: usize, text: &str) -> usize {
        if self.is_edit_echo(profile, text) {
            self.echo_capped(limit)
        } else {
            limit
        }
    }

    /// `limit` for an echo of the agent's own edit.
    fn echo_capped(&self, limit: usize) -> usize {
        limit.min(self.edit_echo_max_bytes)
    }

    /// The limit in bytes for an output of `size` bytes under `profile` at `window`: the
    /// profile's soft limit, and at most [`Profile::kept_share_max`] of the output.
    pub fn limit_for(&self, profile: &Profile, window: u64, size: usize) -> usize {
        let limit = self.soft_limit(profile, window);
        if profile.mode == Mode::Never || profile.kept_share_max >= 1.0 {
            return limit;
        }
        let share = (size as f64 * profile.kept_share_max) as usize;
        limit.min(share.max(self.kept_share_floor_bytes.max(self.min_limit_bytes)))
    }

    /// Soft limit in bytes for a profile at a context window (in tokens).
    pub fn soft_limit(&self, profile: &Profile, window: u64) -> usize {
        if profile.mode == Mode::Never {
            return self.hard_cap_bytes;
        }
        let mut tokens = self.budget_window(window) as f64 * profile.window_share;
        if profile.max_tokens > 0 {
            tokens = tokens.min(profile.max_tokens as f64);
        }
        let bytes = tokens * self.limit_scale * self.bytes_per_token;
        (bytes as usize).clamp(self.min_limit_bytes, self.hard_cap_bytes)
    }

    /// The limit in bytes of search-shaped output under `profile` in `auto` mode, if it has one.
    pub fn search_limit(&self, profile: &Profile) -> Option<usize> {
        (profile.mode == Mode::Auto && profile.search_max_tokens > 0).then(|| {
            ((profile.search_max_tokens as f64 * self.bytes_per_token) as usize)
                .max(self.min_limit_bytes)
        })
    }

    /// The window limits are computed for: `window`, capped at `budget_window_cap`.
    pub fn budget_window(&self, window: u64) -> u64 {
        match self.budget_window_cap {
            0 => window,
            cap => window.min(cap),
        }
    }

    /// Bytes all results of one assistant turn may take together.
    pub fn turn_budget(&self, window: u64) -> usize {
        let bytes =
            self.budget_window(window) as f64 * self.turn_window_share * self.bytes_per_token;
        (bytes as usize).max(self.min_limit_bytes)
    }

    /// The line budget for `profile` with a given soft limit.
    pub fn line_budget(&self, profile: &Profile, limit: usize) -> LineBudget {
        let (head, tail, salient) = if profile.mode == Mode::Never {
            (0.5, 0.5, 0.0)
        } else {
            (profile.head, profile.tail, profile.salient)
        };
        LineBudget::from_shares(limit, head, tail, salient, self.line_max_bytes)
    }
}

fn fallback_profile() -> &'static Profile {
    use std::sync::OnceLock;
    static P: OnceLock<Profile> = OnceLock::new();
    P.get_or_init(|| profile("tool", &["*"], Mode::Auto, 0.03, [0.45, 0.4, 0.15]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_matches("read*", "Read"));
        assert!(glob_matches("read*", "read_file"));
        assert!(glob_matches("*_search", "web_search"));
        assert!(glob_matches("scroll_?p", "scroll_up"));
        assert!(glob_matches("*", ""));
        assert!(!glob_matches("read*", "bread"));
        assert!(glob_matches("*todo*", "TodoWrite"));
        assert!(glob_matches("a*b*c", "aXXbYYbZc"));
        assert!(!glob_matches("a*b*c", "aXXbYYbZ"));
    }

    #[test]
    fn tools_of_common_agents_get_the_expected_profile() {
        let c = TrimConfig::default();
        for (tool, profile) in [
            ("Bash", "terminal"),
            ("exec_command", "terminal"),
            ("bash", "terminal"),
            ("Read", "file read"),
            ("read_file", "file read"),
            ("open", "file read"),
            ("Grep", "search"),
            ("search_dir", "search"),
            ("web_search", "search"),
            ("WebFetch", "web"),
            ("TodoWrite", "never"),
            ("memory", "never"),
            ("frobnicate", "tool"),
            ("Glob", "search"),
            ("Edit", "file read"),
            ("Write", "tool"),
            ("WebSearch", "web"),
            ("apply_patch", "tool"),
            ("Task", "never"),
            ("Agent", "never"),
            ("TaskOutput", "never"),
            ("shell", "terminal"),
            ("mcp__filesystem__read_text_file", "file read"),
            ("mcp__github__search_code", "search"),
            ("mcp__fetch__fetch", "web"),
            ("mcp__db__query", "tool"),
        ] {
            assert_eq!(c.profile_for(tool).name, profile, "{tool}");
        }
    }

    #[test]
    fn a_budget_window_cap_stops_limits_growing_with_the_window() {
        let c = TrimConfig {
            budget_window_cap: 64_000,
            ..TrimConfig::default()
        };
        let terminal = c.profile_for("bash").clone();
        assert_eq!(
            c.soft_limit(&terminal, 200_000),
            c.soft_limit(&terminal, 64_000)
        );
        assert!(c.soft_limit(&terminal, 32_000) < c.soft_limit(&terminal, 64_000));
        assert_eq!(c.turn_budget(1_000_000), c.turn_budget(64_000));
        assert_eq!(TrimConfig::default().budget_window(200_000), 200_000);
        assert_eq!(TrimConfig::default().budget_window(1_000_000), 200_000);
    }

    #[test]
    fn the_terminal_limit_is_tokens_at_large_windows_and_a_share_at_small_ones() {
        let c = TrimConfig::default();
        let terminal = c.profile_for("bash").clone();
        let at = |window| c.soft_limit(&terminal, window);
        assert_eq!(at(32_000), 12_800, "10% of a 32K window, 4 bytes a token");
        assert_eq!(at(200_000), 24_000);
        assert_eq!(at(272_000), at(1_000_000));
        let mut uncapped = terminal.clone();
        uncapped.max_tokens = 0;
        assert_eq!(c.soft_limit(&uncapped, 200_000), 80_000);
    }

    #[test]
    fn limits_scale_with_the_window_and_respect_the_caps() {
        let c = TrimConfig::default();
        let read = c.profile_for("read_file").clone();
        let small = c.soft_limit(&read, 32_000);
        let large = c.soft_limit(&read, 200_000);
        assert!(small < large, "{small} < {large}");
        let no_cap = TrimConfig {
            budget_window_cap: 0,
            ..TrimConfig::default()
        };
        assert_eq!(no_cap.soft_limit(&read, 10_000_000), c.hard_cap_bytes);
        assert_eq!(c.soft_limit(&read, 1), c.min_limit_bytes);
        let never = c.profile_for("memory").clone();
        assert_eq!(c.soft_limit(&never, 32_000), c.hard_cap_bytes);
    }

    #[test]
    fn default_config_is_valid_and_bad_values_are_named() {
        TrimConfig::default().validate().unwrap();
        let mut c = TrimConfig::default();
        c.profiles[1].head = 1.5;
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "profile 'search': head must be between 0 and 1, got 1.5"
        );
    }
}
