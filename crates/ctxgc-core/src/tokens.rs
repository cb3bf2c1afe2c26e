//! Real BPE token counts, with per-message overhead and an incremental cache.
//!
//! Counts come from bpe-openai with its embedded `o200k_base` / `cl100k_base` vocabularies
//! (identical to tiktoken's counts): nothing is downloaded at run time. Claude models (3 and later) have no public tokenizer, so
//! for them the o200k count is multiplied by a documented, configurable correction factor.
//!
//! A conversation is counted message by message and each message's count is cached under a hash
//! of its content, so recounting a long conversation after one new message costs one message of
//! BPE work plus a hash pass (the proxy recounts whole histories on every request).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use crate::bounded::BoundedMemo;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::transcript::{Block, Message, Role};

/// The BPE vocabulary used for counting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// GPT-4o / GPT-5 family (default; also the base for Claude estimates).
    #[default]
    O200kBase,
    /// GPT-4 / GPT-3.5 family.
    Cl100kBase,
}

impl Encoding {
    /// The tokenizer: bpe-openai's, whose vocabularies are built into the crate. It counts
    /// exactly as tiktoken does (a property test holds them equal, and so did every text of the
    /// shared transcripts and logs), 1.6x (o200k) to 2.5x (cl100k) faster.
    fn bpe(self) -> &'static bpe_openai::Tokenizer {
        match self {
            Encoding::O200kBase => bpe_openai::o200k_base(),
            Encoding::Cl100kBase => bpe_openai::cl100k_base(),
        }
    }

    /// The number of BPE tokens in `text`, special-token strings counted as plain text (that is
    /// how user content reaches the model).
    pub fn count(self, text: &str) -> usize {
        if text.is_empty() {
            return 0;
        }
        self.bpe().count(text)
    }
}

/// How a provider frames messages, which decides the per-message overhead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderFamily {
    /// OpenAI (Chat Completions and Responses) and OpenAI-compatible servers.
    #[default]
    Openai,
    /// Anthropic Messages (Claude): counted with o200k times the Claude correction factor.
    Anthropic,
}

/// Token counting settings (the `[tokens]` table of `ctxgc.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TokenSettings {
    /// Vocabulary for OpenAI-family counts.
    pub encoding: Encoding,
    /// Multiplier applied to o200k counts for Claude models. Anthropic publishes no tokenizer
    /// for Claude 3+; its tokenizer yields more tokens than o200k for the same English and code
    /// text. 1.20 is a conservative middle of what users report; calibrate it from the
    /// `input_tokens` the API returns (the proxy does this per session).
    pub claude_correction: f64,
    /// Tokens charged per image when its size is unknown (OpenAI high detail 1024x1024 is 765,
    /// Anthropic about 1,600 for a 1.15 MP image).
    pub image_tokens: usize,
}

impl Default for TokenSettings {
    fn default() -> Self {
        TokenSettings {
            encoding: Encoding::O200kBase,
            claude_correction: 1.20,
            image_tokens: 1_000,
        }
    }
}

/// How the provider counts a session's prompts against ctxgc's own counts: its tokenizer (Gemini's
/// counts ~1.3x o200k on the shared sessions, Claude's more than o200k), and the framing, tool
/// definitions and system text it renders that ctxgc does not see. Learned from the prompt tokens
/// the provider reports for each request (reported / estimated, an exponential moving average,
/// clamped so one odd report cannot derail the thresholds). It never goes below 1: a prompt past
/// the window fails outright, an early event only costs a little, so it may only make the engine
/// more careful. The proxy keeps one per session, the session engine its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Calibration(Option<f64>);

impl Calibration {
    /// Weight of the newest report in the average.
    const NEWEST: f64 = 0.3;
    /// The ratio's bounds.
    const RANGE: (f64, f64) = (1.0, 2.5);

    /// Folds one request: ctxgc `estimated` its prompt, the provider `reported` it. Either
    /// being 0 teaches nothing.
    pub fn observe(&mut self, estimated: usize, reported: usize) {
        if estimated == 0 || reported == 0 {
            return;
        }
        let ratio = (reported as f64 / estimated as f64).clamp(Self::RANGE.0, Self::RANGE.1);
        self.0 = Some(match self.0 {
            Some(previous) => (1.0 - Self::NEWEST) * previous + Self::NEWEST * ratio,
            None => ratio,
        });
    }

    /// The learned ratio, when any report was folded.
    pub fn known(self) -> Option<f64> {
        self.0
    }

    /// The ratio (1 before any report).
    pub fn ratio(self) -> f64 {
        self.0.unwrap_or(1.0)
    }

    /// `tokens` of ctxgc's count in the provider's, rounded up.
    pub fn scale(self, tokens: usize) -> usize {
        match self.0 {
            Some(ratio) if ratio != 1.0 => (tokens as f64 * ratio).ceil() as usize,
            _ => tokens,
        }
    }
}

/// Per-message framing tokens. OpenAI's published rule for chat models: every message costs 3
/// tokens of framing (`<|start|>role ... <|end|>`), a name 1 more, and the reply is primed with
/// 3. Tool calls are framed like a small message of their own. Anthropic does not publish its
/// framing; the same figures are used and absorbed by the calibration factor.
const TOKENS_PER_MESSAGE: usize = 3;
const TOKENS_PER_TOOL_CALL: usize = 3;
const REPLY_PRIMING: usize = 3;

/// Token counts memoised by content, shared by every counter given it: a replay counts the
/// same messages under many policies and windows, a proxy the same history on every request;
/// with one memo each distinct text costs one BPE pass. Keyed by content hash and by what
/// decides the count (vocabulary, family, correction); bounded by bytes, what is in use stays
/// ([`BoundedMemo`]). Its owner (a replay run, a server) decides its life.
#[derive(Debug)]
pub struct CountMemo {
    counts: Mutex<BoundedMemo<(u64, u64), usize>>,
}

/// Bytes one memoised count takes, map overhead included.
const COUNT_ENTRY_BYTES: usize = 48;

impl CountMemo {
    /// A memo of at most `max_bytes`.
    pub fn new(max_bytes: usize) -> CountMemo {
        CountMemo {
            counts: Mutex::new(BoundedMemo::new(max_bytes, |_, _| COUNT_ENTRY_BYTES)),
        }
    }

    /// Counts it holds.
    pub fn len(&self) -> usize {
        self.counts.lock().map_or(0, |m| m.len())
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes it holds, at most the budget it was made with.
    pub fn bytes(&self) -> usize {
        self.counts.lock().map_or(0, |m| m.bytes())
    }

    fn get(&self, key: (u64, u64)) -> Option<usize> {
        self.counts.lock().ok()?.get(&key).copied()
    }

    fn insert(&self, key: (u64, u64), n: usize) {
        if let Ok(mut m) = self.counts.lock() {
            m.insert(key, n);
        }
    }
}

impl Default for CountMemo {
    /// 32 MiB at most.
    fn default() -> Self {
        CountMemo::new(32 << 20)
    }
}

/// Counts one counter's own memo holds at most.
const OWN_MAX_ENTRIES: usize = 1 << 18;

/// Texts shorter than this are counted directly (memoising them costs more than it saves).
const MEMO_MIN_BYTES: usize = 256;

/// Counts tokens of messages, caching each message's count under a hash of its content.
pub struct TokenCounter {
    settings: TokenSettings,
    family: ProviderFamily,
    cache: HashMap<u64, usize>,
    shared: Option<Arc<CountMemo>>,
}

impl TokenCounter {
    /// A counter for `family` with the given settings.
    pub fn new(family: ProviderFamily, settings: TokenSettings) -> TokenCounter {
        TokenCounter {
            settings,
            family,
            cache: HashMap::new(),
            shared: None,
        }
    }

    /// The same counter, memoising its counts in `memo` too (shared with other counters).
    pub fn sharing(mut self, memo: Arc<CountMemo>) -> TokenCounter {
        self.shared = Some(memo);
        self
    }

    /// A counter for OpenAI models with default settings (o200k_base).
    pub fn openai() -> TokenCounter {
        TokenCounter::new(ProviderFamily::Openai, TokenSettings::default())
    }

    fn encoding(&self) -> Encoding {
        match self.family {
            ProviderFamily::Openai => self.settings.encoding,
            ProviderFamily::Anthropic => Encoding::O200kBase,
        }
    }

    fn corrected(&self, raw: usize) -> usize {
        match self.family {
            ProviderFamily::Openai => raw,
            ProviderFamily::Anthropic => {
                (raw as f64 * self.settings.claude_correction).ceil() as usize
            }
        }
    }

    /// What, besides the content, decides a count: vocabulary, family and correction.
    fn flavour(&self) -> u64 {
        let encoding = self.encoding() as u64;
        let family = self.family as u64;
        encoding | family << 8 | self.settings.claude_correction.to_bits() << 16
    }

    fn memoised(&self, key: u64, compute: impl FnOnce() -> usize) -> usize {
        let Some(shared) = &self.shared else {
            return compute();
        };
        let full = (key, self.flavour());
        if let Some(n) = shared.get(full) {
            return n;
        }
        let n = compute();
        shared.insert(full, n);
        n
    }

    /// The most tokens a text of `bytes` bytes can count as, corrected for the provider family:
    /// no vocabulary makes a token of less than a byte.
    pub fn most_tokens_in(&self, bytes: usize) -> usize {
        self.corrected(bytes)
    }

    /// Tokens in a bare text, corrected for the provider family.
    pub fn count_text(&self, text: &str) -> usize {
        if text.len() < MEMO_MIN_BYTES {
            return self.corrected(self.encoding().count(text));
        }
        let key = xxhash_rust::xxh3::xxh3_64(text.as_bytes()) ^ 0x7465_7874; // "text"
        self.memoised(key, || self.corrected(self.encoding().count(text)))
    }

    /// Tokens of one message, framing included. Cached by content hash.
    pub fn count_message(&mut self, message: &Message) -> usize {
        self.count_message_hashed(message).1
    }

    /// The content hash of a message and its tokens (replays need both).
    pub fn count_message_hashed(&mut self, message: &Message) -> (u64, usize) {
        let key = message_hash(message);
        if let Some(&n) = self.cache.get(&key) {
            return (key, n);
        }
        let n = self.memoised(key, || self.corrected(self.raw_message_tokens(message)));
        if self.cache.len() >= OWN_MAX_ENTRIES {
            self.cache.clear();
        }
        self.cache.insert(key, n);
        (key, n)
    }

    /// Tokens of a whole prompt: every message plus the reply priming.
    pub fn count_messages<'a>(&mut self, messages: impl IntoIterator<Item = &'a Message>) -> usize {
        messages
            .into_iter()
            .map(|m| self.count_message(m))
            .sum::<usize>()
            + REPLY_PRIMING
    }

    /// Tokens of tool definitions (their JSON text, as the provider renders them into the
    /// prompt on every request).
    pub fn count_tools(&self, tools: &[serde_json::Value]) -> usize {
        tools
            .iter()
            .map(|tool| self.count_text(&tool.to_string()) + TOKENS_PER_TOOL_CALL)
            .sum()
    }

    /// Number of distinct messages in the cache.
    pub fn cached_messages(&self) -> usize {
        self.cache.len()
    }

    fn raw_message_tokens(&self, message: &Message) -> usize {
        let enc = self.encoding();
        let mut n = TOKENS_PER_MESSAGE;
        for block in &message.content {
            n += self.raw_block_tokens(enc, block);
        }
        n
    }

    fn raw_block_tokens(&self, enc: Encoding, block: &Block) -> usize {
        match block {
            Block::Text { text } => enc.count(text),
            Block::ToolCall(call) if call.implicit => 0,
            Block::ToolCall(call) => {
                TOKENS_PER_TOOL_CALL + enc.count(&call.name) + enc.count(&call.arguments)
            }
            Block::ToolResult(result) => result
                .content
                .iter()
                .map(|b| self.raw_block_tokens(enc, b))
                .sum(),
            Block::Image { .. } => self.settings.image_tokens,
            // Encrypted or signed reasoning is not re-tokenised as text by providers; only
            // visible reasoning text is counted.
            Block::Thinking { text, .. } => text.as_deref().map_or(0, |t| enc.count(t)),
        }
    }
}

/// A hash of everything in a message that affects its token count.
pub fn message_hash(message: &Message) -> u64 {
    let mut h = Xxh3::new();
    h.update(&[role_tag(message.role)]);
    for block in &message.content {
        hash_block(&mut h, block);
    }
    h.digest()
}

fn role_tag(role: Role) -> u8 {
    match role {
        Role::System => 1,
        Role::User => 2,
        Role::Assistant => 3,
        Role::Tool => 4,
    }
}

fn hash_block(h: &mut Xxh3, block: &Block) {
    // Each field is length-prefixed so that moving bytes between fields changes the hash.
    fn field(h: &mut Xxh3, bytes: &[u8]) {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    match block {
        Block::Text { text } => {
            h.update(b"T");
            field(h, text.as_bytes());
        }
        Block::ToolCall(call) => {
            h.update(if call.implicit { b"c" } else { b"C" });
            field(h, call.id.as_bytes());
            field(h, call.name.as_bytes());
            field(h, call.arguments.as_bytes());
        }
        Block::ToolResult(result) => {
            h.update(if result.is_error { b"E" } else { b"R" });
            field(h, result.call_id.as_bytes());
            h.update(&(result.content.len() as u64).to_le_bytes());
            for part in &result.content {
                hash_block(h, part);
            }
        }
        Block::Image { source } => {
            h.update(b"I");
            hash_json(h, source);
        }
        Block::Thinking { text, raw } => {
            h.update(b"K");
            field(h, text.as_deref().unwrap_or("").as_bytes());
            hash_json(h, raw);
        }
    }
}

fn hash_json(h: &mut Xxh3, value: &serde_json::Value) {
    struct HashWriter<'a>(&'a mut Xxh3);
    impl io::Write for HashWriter<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    // Writing into a hasher cannot fail.
    let _ = serde_json::to_writer(HashWriter(h), value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::ToolCall;

    #[test]
    fn calibration_follows_reported_usage_smoothly_and_within_bounds() {
        let mut c = Calibration::default();
        assert_eq!(
            (c.known(), c.scale(1_000)),
            (None, 1_000),
            "unknown: as counted"
        );
        c.observe(10_000, 12_000);
        assert_eq!(c.known(), Some(1.2), "the first report sets it");
        assert_eq!(serde_json::to_string(&c).unwrap(), "1.2", "the bare ratio");
        c.observe(10_000, 13_000);
        assert!(
            (c.ratio() - (0.7 * 1.2 + 0.3 * 1.3)).abs() < 1e-9,
            "then an average"
        );
        assert!((1_230..=1_231).contains(&c.scale(1_000)));
        let mut odd = Calibration::default();
        odd.observe(10_000, 90_000);
        assert_eq!(odd.known(), Some(2.5), "clamped");
        let mut low = Calibration::default();
        low.observe(10_000, 5_000);
        assert_eq!(low.known(), Some(1.0), "never below 1");
        let mut none = Calibration::default();
        none.observe(0, 5_000);
        none.observe(5_000, 0);
        assert_eq!(none.known(), None, "nothing to learn");
    }

    #[test]
    fn counts_match_known_tiktoken_values() {
        // Reference values from OpenAI's tiktoken for the same strings.
        assert_eq!(Encoding::O200kBase.count("hello world"), 2);
        assert_eq!(Encoding::Cl100kBase.count("hello world"), 2);
        assert_eq!(
            Encoding::Cl100kBase.count("tiktoken is great!"),
            6,
            "cl100k reference from the tiktoken README"
        );
        assert_eq!(Encoding::O200kBase.count(""), 0);
    }

    proptest::proptest! {
        /// bpe-openai counts exactly as tiktoken does, on text shaped like agent traffic:
        /// code, logs, JSON, other scripts, emoji, long runs, special-token strings.
        #[test]
        fn counts_equal_tiktokens(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    "[a-zA-Z0-9_ ]{0,40}",
                    "[ \\t\\n\\r]{0,12}",
                    "[{}\\[\\]:;,.\"'()<>|=+*/\\\\-]{0,12}",
                    "[àéüßñçøΩπ中文日本語한국어Ђ]{0,10}",
                    "[😀🚀✅❌🔥]{0,4}",
                    proptest::strategy::Just("<|endoftext|>".to_owned()),
                    proptest::strategy::Just("<|im_start|>user".to_owned()),
                    "x{100,400}",
                    "[0-9]{5,30}",
                ],
                0..12,
            )
        ) {
            let text = parts.concat();
            static TIKTOKEN: std::sync::OnceLock<(tiktoken_rs::CoreBPE, tiktoken_rs::CoreBPE)> =
                std::sync::OnceLock::new();
            let (o200k, cl100k) = TIKTOKEN.get_or_init(|| {
                (tiktoken_rs::o200k_base().unwrap(), tiktoken_rs::cl100k_base().unwrap())
            });
            proptest::prop_assert_eq!(Encoding::O200kBase.count(&text), o200k.encode_ordinary(&text).len());
            proptest::prop_assert_eq!(Encoding::Cl100kBase.count(&text), cl100k.encode_ordinary(&text).len());
        }
    }

    #[test]
    fn message_overhead_follows_openai_rule() {
        let mut counter = TokenCounter::openai();
        let m = Message::text(Role::User, "hello world");
        assert_eq!(counter.count_message(&m), 2 + TOKENS_PER_MESSAGE);
        assert_eq!(
            counter.count_messages([&m, &m]),
            2 * (2 + TOKENS_PER_MESSAGE) + REPLY_PRIMING
        );
    }

    #[test]
    fn claude_counts_apply_the_correction_factor() {
        let settings = TokenSettings {
            claude_correction: 1.5,
            ..TokenSettings::default()
        };
        let counter = TokenCounter::new(ProviderFamily::Anthropic, settings);
        let text = "The quick brown fox jumps over the lazy dog.";
        let raw = Encoding::O200kBase.count(text);
        assert_eq!(counter.count_text(text), (raw as f64 * 1.5).ceil() as usize);
    }

    #[test]
    fn cache_is_keyed_by_content() {
        let mut counter = TokenCounter::openai();
        let a = Message::text(Role::User, "same text");
        let b = Message::text(Role::User, "same text");
        let c = Message::text(Role::Assistant, "same text");
        counter.count_message(&a);
        counter.count_message(&b);
        assert_eq!(counter.cached_messages(), 1);
        counter.count_message(&c);
        assert_eq!(counter.cached_messages(), 2, "role is part of the key");
    }

    #[test]
    fn implicit_tool_calls_cost_nothing_extra() {
        let mut counter = TokenCounter::openai();
        let call = |implicit| Message {
            role: Role::Assistant,
            content: vec![
                Block::text("run ls"),
                Block::ToolCall(ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    arguments: r#"{"command":"ls"}"#.into(),
                    implicit,
                }),
            ],
            usage: None,
        };
        let plain = counter.count_message(&Message::text(Role::Assistant, "run ls"));
        assert_eq!(counter.count_message(&call(true)), plain);
        assert!(counter.count_message(&call(false)) > plain);
    }
}
