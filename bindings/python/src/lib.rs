//! `ctxgc._ctxgc`: the Python extension. The engine is `ctxgc-core`; this crate only converts
//! between Python and it (strings and JSON text in, strings and JSON text out), so a result in
//! Python is the same bytes as from `ctxgc trim`, `ctxgc serve` and the replay lab.
//!
//! The Python package (`python/ctxgc`) wraps these classes in a typed API; see its `.pyi`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use ctxgc_core::agent_tools::{self, AgentCall};
use ctxgc_core::config::Config as CoreConfig;
use ctxgc_core::engine::plan::{Plan, PlanKind};
use ctxgc_core::engine::{EventRecord, Session as CoreSession, SummaryReply};
use ctxgc_core::recall::{self, RecallQuery};
use ctxgc_core::store::{MemoryStore, OriginalStore, SessionId};
use ctxgc_core::tokens::ProviderFamily;
use ctxgc_core::trim::{Shape, trim_output};
use ctxgc_core::{ContentId, Message, Role, Transcript};
use ctxgc_formats::{anthropic, chat, responses, wire};
use ctxgc_store::{RedisOptions, RedisStore, SqliteStore};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use serde_json::{Value, json};

create_exception!(
    _ctxgc,
    CtxgcError,
    PyException,
    "Base class of every error ctxgc raises."
);
create_exception!(
    _ctxgc,
    ConfigError,
    CtxgcError,
    "A ctxgc.toml text or setting that is not valid."
);
create_exception!(
    _ctxgc,
    StoreError,
    CtxgcError,
    "The store of originals failed (nothing was changed)."
);
create_exception!(
    _ctxgc,
    FormatError,
    CtxgcError,
    "Messages that do not have the shape the API names."
);
create_exception!(
    _ctxgc,
    RecallError,
    CtxgcError,
    "A recall that cannot be answered: unknown id, bad line range or pattern."
);

fn config_error(e: impl std::fmt::Display) -> PyErr {
    ConfigError::new_err(e.to_string())
}
fn store_error(e: impl std::fmt::Display) -> PyErr {
    StoreError::new_err(e.to_string())
}
fn format_error(e: impl std::fmt::Display) -> PyErr {
    FormatError::new_err(e.to_string())
}

/// The settings of `ctxgc.toml` (`[trim]`, `[engine]`, `[tokens]`, `[store]`...).
#[pyclass(module = "ctxgc._ctxgc", frozen, from_py_object)]
#[derive(Clone)]
struct Config {
    inner: Arc<CoreConfig>,
}

#[pymethods]
impl Config {
    /// Parses a `ctxgc.toml` text (absent keys take their defaults); no text: the defaults.
    #[new]
    #[pyo3(signature = (toml=None))]
    fn new(toml: Option<&str>) -> PyResult<Config> {
        let inner = match toml {
            Some(text) => CoreConfig::from_toml(text).map_err(config_error)?,
            None => CoreConfig::default(),
        };
        Ok(Config {
            inner: Arc::new(inner),
        })
    }

    /// Reads a `ctxgc.toml` file.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Config> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| config_error(format!("cannot read {}: {e}", path.display())))?;
        CoreConfig::from_toml(&text)
            .map(|inner| Config {
                inner: Arc::new(inner),
            })
            .map_err(|e| config_error(format!("{}: {e}", path.display())))
    }

    /// The configuration as TOML (every key, defaults included).
    fn to_toml(&self) -> String {
        self.inner.to_toml()
    }

    /// The window, in tokens, assumed when none is given (`[trim] default_window`).
    #[getter]
    fn default_window(&self) -> u64 {
        self.inner.trim.default_window
    }

    /// The fraction of the window at which an event runs (`[engine] trigger_share`).
    #[getter]
    fn trigger(&self) -> f64 {
        self.inner.engine.trigger_share
    }
}

impl Config {
    fn or_default(config: Option<Config>) -> Arc<CoreConfig> {
        config.map_or_else(|| Arc::new(CoreConfig::default()), |c| c.inner)
    }
}

/// A trimmed tool output.
#[pyclass(module = "ctxgc._ctxgc", frozen, get_all)]
struct Trimmed {
    /// What enters the history.
    text: String,
    /// The original's recall id (`r-` and 16 hex digits).
    id: String,
    /// Whether `text` differs from the original.
    trimmed: bool,
    /// The original's size in bytes (UTF-8).
    original_bytes: usize,
    /// `"lines"`, `"json"` or `"search"`.
    shape: &'static str,
    /// The soft limit that applied, in bytes.
    limit: usize,
}

#[pymethods]
impl Trimmed {
    fn __repr__(&self) -> String {
        format!(
            "Trimmed(id={:?}, trimmed={}, original_bytes={}, bytes={}, shape={:?})",
            self.id,
            if self.trimmed { "True" } else { "False" },
            self.original_bytes,
            self.text.len(),
            self.shape
        )
    }
}

fn window_of(config: &CoreConfig, window: Option<u64>, model: Option<&str>) -> PyResult<u64> {
    match (window, model) {
        (Some(0), _) => Err(config_error("window must be a positive number of tokens")),
        (Some(w), _) => Ok(w),
        (None, Some(model)) => Ok(ctxgc_core::models::window_for(model, false)),
        (None, None) => Ok(config.trim.default_window),
    }
}

/// Trims one tool output (the GIL is released while it works).
#[pyfunction]
#[pyo3(signature = (text, *, tool="terminal", window=None, model=None, config=None))]
fn trim(
    py: Python<'_>,
    text: &str,
    tool: &str,
    window: Option<u64>,
    model: Option<&str>,
    config: Option<Config>,
) -> PyResult<Trimmed> {
    let config = Config::or_default(config);
    let window = window_of(&config, window, model)?;
    let out = py.detach(|| trim_output(&config.trim, tool, window, text));
    Ok(Trimmed {
        id: out.id.to_string(),
        trimmed: out.trimmed,
        original_bytes: out.original_bytes,
        shape: match out.shape {
            Shape::Lines => "lines",
            Shape::Json => "json",
            Shape::Search => "search",
        },
        limit: out.limit,
        text: out.text,
    })
}

/// Where originals are kept: SQLite (a path), Redis (a `redis://` or `rediss://` URL) or memory.
#[pyclass(module = "ctxgc._ctxgc", frozen)]
struct Store {
    inner: Arc<dyn OriginalStore>,
    description: String,
}

fn parse_id(id: &str) -> PyResult<ContentId> {
    ContentId::parse(id.trim()).ok_or_else(|| {
        RecallError::new_err(format!(
            "`{id}` is not an id; ids look like r-0123456789abcdef"
        ))
    })
}

#[pymethods]
impl Store {
    /// `None` or `":memory:"`: in memory; `redis://...` or `rediss://...`: Redis (the
    /// `[store]` settings of `config` apply: key prefix, CA file, timeout, retention); anything
    /// else: a SQLite file, created if absent.
    #[new]
    #[pyo3(signature = (location=None, *, config=None))]
    fn new(py: Python<'_>, location: Option<&str>, config: Option<Config>) -> PyResult<Store> {
        let config = Config::or_default(config);
        let settings = &config.store;
        py.detach(|| -> PyResult<Store> {
            Ok(match location {
                None | Some(":memory:") => Store {
                    inner: Arc::new(MemoryStore::default()),
                    description: "memory".into(),
                },
                Some(url) if url.starts_with("redis://") || url.starts_with("rediss://") => {
                    let options = RedisOptions {
                        timeout: settings.timeout(),
                        key_prefix: settings.redis_key_prefix.clone(),
                        ca_file: settings.redis_ca_file.clone(),
                        retention: Some(settings.retention()),
                    };
                    let store = RedisStore::connect_with(url, options).map_err(store_error)?;
                    Store {
                        inner: Arc::new(store),
                        description: ctxgc_store::redact_redis_url(url),
                    }
                }
                Some(path) => {
                    let store = SqliteStore::open_with_timeout(path, settings.timeout())
                        .map_err(store_error)?;
                    Store {
                        inner: Arc::new(store),
                        description: path.to_owned(),
                    }
                }
            })
        })
    }

    /// Where `ctxgc serve` and the CLI keep originals by default: `$XDG_DATA_HOME/ctxgc/
    /// ctxgc.sqlite`, else `~/.local/share/ctxgc/ctxgc.sqlite`.
    #[staticmethod]
    fn default_location() -> String {
        SqliteStore::default_path().display().to_string()
    }

    /// Stores `text` (idempotent) and returns its recall id.
    #[pyo3(signature = (text, *, session="default"))]
    fn put(&self, py: Python<'_>, text: &str, session: &str) -> PyResult<String> {
        let id = ContentId::of(text.as_bytes());
        let session = SessionId::new(session);
        py.detach(|| self.inner.put(&session, id, text))
            .map_err(store_error)?;
        Ok(id.to_string())
    }

    /// The original of `id`, or `None` when this session has none.
    #[pyo3(signature = (id, *, session="default"))]
    fn get(&self, py: Python<'_>, id: &str, session: &str) -> PyResult<Option<String>> {
        let id = parse_id(id)?;
        let session = SessionId::new(session);
        py.detach(|| self.inner.get(&session, id))
            .map_err(store_error)
    }

    /// The original of `id`, whole, by 1-based line range (`"40-80"`), or its lines matching
    /// `pattern` (a regex) with two lines of context; numbered when a part is asked for.
    #[pyo3(signature = (id, *, lines=None, pattern=None, session="default", max_bytes=None))]
    fn recall(
        &self,
        py: Python<'_>,
        id: &str,
        lines: Option<&str>,
        pattern: Option<&str>,
        session: &str,
        max_bytes: Option<usize>,
    ) -> PyResult<String> {
        let call = agent_tools::parse_call(
            agent_tools::RECALL_TOOL,
            &json!({"id": id, "lines": lines, "pattern": pattern}),
        );
        let Some(Ok(AgentCall::Recall { id, query })) = call else {
            let why = match call {
                Some(Err(why)) => why,
                _ => format!("`{id}` is not an id"),
            };
            return Err(RecallError::new_err(
                why.trim_start_matches("error: ").to_owned(),
            ));
        };
        let session = SessionId::new(session);
        let max = max_bytes.unwrap_or(CoreConfig::default().trim.hard_cap_bytes);
        let original = py
            .detach(|| self.inner.get(&session, id))
            .map_err(store_error)?
            .ok_or_else(|| RecallError::new_err(format!("no original with id {id}")))?;
        py.detach(|| recall::recall(&original, &query, max))
            .map_err(|e| RecallError::new_err(e.to_string()))
    }

    fn __repr__(&self) -> String {
        format!("Store({:?})", self.description)
    }
}

/// The message shapes a session reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MessageShape {
    /// OpenAI Chat Completions `messages`.
    Chat,
    /// Anthropic Messages `messages` (content blocks); the system prompt stays apart.
    Anthropic,
    /// OpenAI Responses `input` items.
    Responses,
}

impl MessageShape {
    fn parse(api: &str) -> PyResult<MessageShape> {
        match api {
            "openai" | "chat" | "chat_completions" => Ok(MessageShape::Chat),
            "anthropic" | "messages" => Ok(MessageShape::Anthropic),
            "responses" => Ok(MessageShape::Responses),
            other => Err(config_error(format!(
                "unknown api `{other}` (expected \"openai\", \"anthropic\" or \"responses\")"
            ))),
        }
    }

    fn family(self) -> ProviderFamily {
        match self {
            MessageShape::Anthropic => ProviderFamily::Anthropic,
            _ => ProviderFamily::Openai,
        }
    }

    /// The neutral messages of a list in this shape.
    fn read(self, items: &[Value]) -> Result<Vec<Message>, ctxgc_formats::FormatError> {
        let mut t = match self {
            MessageShape::Chat => {
                let mut t = Transcript::default();
                for (i, m) in items.iter().enumerate() {
                    t.messages
                        .push(chat::message_from_chat(m, &format!("messages[{i}]"))?);
                }
                t
            }
            MessageShape::Anthropic => {
                anthropic::transcript_from_body(&json!({"messages": items}))?
            }
            MessageShape::Responses => responses::transcript_from_body(&json!({"input": items}))?,
        };
        ctxgc_formats::resolve_tool_names(&mut t);
        Ok(t.messages)
    }

    /// Neutral messages in this shape.
    fn render(self, messages: &[Message]) -> Vec<Value> {
        match self {
            MessageShape::Chat => wire::chat_messages(messages),
            MessageShape::Anthropic => wire::anthropic_messages(messages).1,
            MessageShape::Responses => wire::responses_items(messages),
        }
    }

    fn agent_tools(self) -> Vec<Value> {
        match self {
            MessageShape::Chat => agent_tools::chat_completions(),
            MessageShape::Anthropic => agent_tools::anthropic(),
            MessageShape::Responses => agent_tools::responses(),
        }
    }
}

fn to_json_text(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".into())
}

fn parse_items(json_text: &str, what: &str) -> PyResult<Vec<Value>> {
    match serde_json::from_str::<Value>(json_text) {
        Ok(Value::Array(items)) => Ok(items),
        Ok(_) => Err(format_error(format!("{what} must be a list"))),
        Err(e) => Err(format_error(format!("{what}: {e}"))),
    }
}

/// One conversation under management (the core engine's `Session`), fed the framework's whole
/// history on every call and answering the prompt to send.
#[pyclass(module = "ctxgc._ctxgc")]
struct NativeSession {
    shape: MessageShape,
    engine: CoreSession,
    store: Arc<dyn OriginalStore>,
    session: SessionId,
    window: u64,
    config: Arc<CoreConfig>,
    /// The neutral messages ingested so far, as the framework gave them.
    seen: Vec<Message>,
    /// The framework's own items, by the canonical text of their rendering: an item the engine
    /// left alone goes back exactly as it came.
    originals: HashMap<String, Value>,
    pending: Option<Plan>,
    rebuilt: usize,
}

impl NativeSession {
    fn fresh_engine(&self) -> CoreSession {
        CoreSession::new(
            self.session.as_str(),
            self.window,
            &self.config,
            self.shape.family(),
        )
    }

    /// Feeds the messages past those already seen; a history that no longer starts with them
    /// (edited, rewound, compacted by the framework) starts the engine over.
    fn ingest(&mut self, items: &[Value]) -> PyResult<()> {
        let messages = self.shape.read(items).map_err(format_error)?;
        let keeps = messages.len() >= self.seen.len() && messages[..self.seen.len()] == self.seen;
        if !keeps {
            let mut fresh = self.fresh_engine();
            fresh.keep_calibration(&self.engine);
            self.engine = fresh;
            self.seen.clear();
            self.originals.clear();
            self.rebuilt += 1;
        }
        for item in items {
            // The rendering of one item on its own: what the engine's rendering of an untouched
            // message gives back.
            if let Ok(alone) = self.shape.read(std::slice::from_ref(item)) {
                let rendered = self.shape.render(&alone);
                if let [one] = rendered.as_slice() {
                    self.originals.insert(canonical(one), item.clone());
                }
            }
        }
        let new: Vec<Message> = messages[self.seen.len()..].to_vec();
        let mut results: Vec<Message> = Vec::new();
        for message in new {
            self.seen.push(message.clone());
            if message.role == Role::Tool {
                results.push(message);
                continue;
            }
            self.flush_results(&mut results)?;
            self.engine.push(message);
        }
        self.flush_results(&mut results)
    }

    fn flush_results(&mut self, results: &mut Vec<Message>) -> PyResult<()> {
        if results.is_empty() {
            return Ok(());
        }
        self.engine
            .insert_tool_results(self.store.as_ref(), std::mem::take(results))
            .map_err(store_error)?;
        Ok(())
    }
}

fn canonical(value: &Value) -> String {
    value.to_string()
}

fn event_json(record: &EventRecord) -> Value {
    serde_json::to_value(record).unwrap_or(Value::Null)
}

#[pymethods]
impl NativeSession {
    #[new]
    #[pyo3(signature = (api, *, store=None, config=None, window=None, model=None, session_id="default", recall_hint=None, max_result_bytes=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        api: &str,
        store: Option<PyRef<'_, Store>>,
        config: Option<Config>,
        window: Option<u64>,
        model: Option<&str>,
        session_id: &str,
        recall_hint: Option<String>,
        max_result_bytes: Option<usize>,
    ) -> PyResult<NativeSession> {
        let shape = MessageShape::parse(api)?;
        let mut config = Config::or_default(config);
        // How the agent gets outputs back, when it is not the recall tool (a shell command).
        if let Some(hint) = recall_hint {
            Arc::make_mut(&mut config).engine.recall_hint = hint;
        }
        // A framework that moves longer tool results out of the conversation (Hermes spills
        // them to a file) gets recall answers and kept outputs no longer than it keeps.
        if let Some(max) = max_result_bytes {
            let trim = &mut Arc::make_mut(&mut config).trim;
            trim.hard_cap_bytes = trim.hard_cap_bytes.min(max.max(trim.min_limit_bytes));
        }
        let window = window_of(&config, window, model)?;
        let store: Arc<dyn OriginalStore> = match store {
            Some(s) => s.inner.clone(),
            None => Arc::new(MemoryStore::default()),
        };
        let session = SessionId::new(session_id);
        let engine = CoreSession::new(session.as_str(), window, &config, shape.family());
        Ok(NativeSession {
            shape,
            engine,
            store,
            session,
            window,
            config,
            seen: Vec::new(),
            originals: HashMap::new(),
            pending: None,
            rebuilt: 0,
        })
    }

    /// Ingests the history (a JSON list in the session's shape) and tools (a JSON list).
    fn ingest_json(&mut self, items: &str, tools: Option<&str>) -> PyResult<()> {
        let items = parse_items(items, "messages")?;
        if let Some(tools) = tools {
            self.engine.set_tools(parse_items(tools, "tools")?);
        }
        self.ingest(&items)
    }

    /// Plans the event due, if any: `None` when none is; else the summarizer's request as JSON
    /// text (messages in the session's shape, tools, budget) when the event is a compaction,
    /// or `""` when it needs no summary.
    fn begin_event(&mut self) -> Option<String> {
        let plan = self.engine.plan()?;
        let request = (plan.kind == PlanKind::Compaction).then(|| {
            let request = self.engine.summary_request(&plan);
            to_json_text(&json!({
                "messages": self.shape.render(&request.messages),
                "tools": request.tools,
                "budget": request.budget,
            }))
        });
        self.pending = Some(plan);
        Some(request.unwrap_or_default())
    }

    /// Applies the planned event: `summary` is the summarizer's text, `error` why it gave none
    /// (the extractive summary stands in), neither for the extractive summary. Returns the
    /// event's record as JSON text, or `None` when no event was planned.
    #[pyo3(signature = (summary=None, error=None))]
    fn finish_event(
        &mut self,
        summary: Option<String>,
        error: Option<String>,
    ) -> PyResult<Option<String>> {
        let Some(plan) = self.pending.take() else {
            return Ok(None);
        };
        let reply = match (summary, error) {
            (_, Some(why)) => Some(Err(why)),
            (Some(body), None) => Some(Ok(SummaryReply {
                body,
                tokens_in: 0,
                tokens_out: 0,
            })),
            (None, None) => None,
        };
        // Originals the event hides are stored before the prompt that names them is sent.
        let record = self
            .engine
            .apply(&plan, reply)
            .map_err(|e| CtxgcError::new_err(e.to_string()))?;
        Ok(Some(to_json_text(&event_json(&record))))
    }

    /// The prompt to send, as JSON text in the session's shape: items the engine left alone
    /// are the framework's own, byte for byte.
    fn prompt_json(&self) -> String {
        let rendered = self.shape.render(self.engine.prompt());
        let items: Vec<Value> = rendered
            .into_iter()
            .map(|item| match self.originals.get(&canonical(&item)) {
                Some(original) => original.clone(),
                None => item,
            })
            .collect();
        to_json_text(&items)
    }

    /// ctxgc's tools in the session's shape, as JSON text.
    fn agent_tools_json(&self) -> String {
        to_json_text(&self.shape.agent_tools())
    }

    /// Runs a call of one of ctxgc's tools; `None` when `name` is not one of them. The answer
    /// is the text the model gets (an argument error is an answer too, so it can retry).
    fn handle_tool_call(&mut self, name: &str, arguments: &str) -> PyResult<Option<String>> {
        let arguments: Value = serde_json::from_str(arguments)
            .map_err(|e| format_error(format!("tool arguments: {e}")))?;
        let Some(call) = agent_tools::parse_call(name, &arguments) else {
            return Ok(None);
        };
        Ok(Some(match call {
            Err(answer) => answer,
            Ok(AgentCall::Trim { summary }) => match self.engine.agent_trim(&summary) {
                Ok(_) => "done: the latest tool result now shows your summary; its original stays recallable".into(),
                Err(e) => format!("error: {e}"),
            },
            Ok(AgentCall::Recall { id, query }) => {
                match self
                    .engine
                    .recall(self.store.as_ref(), &id.to_string(), &query)
                {
                    Ok(text) => text,
                    Err(e) => format!("error: {e}"),
                }
            }
        }))
    }

    /// The original of `id` stored by this session, whole or in part.
    #[pyo3(signature = (id, *, lines=None, pattern=None))]
    fn recall(&self, id: &str, lines: Option<&str>, pattern: Option<&str>) -> PyResult<String> {
        let id = parse_id(id)?;
        let lines = match lines {
            Some(l) => Some(recall::parse_lines(l).ok_or_else(|| {
                RecallError::new_err(format!("`lines` must look like \"40-80\", not `{l}`"))
            })?),
            None => None,
        };
        let query = RecallQuery {
            lines,
            pattern: pattern.map(str::to_owned),
            context: 2,
        };
        self.engine
            .recall(self.store.as_ref(), &id.to_string(), &query)
            .map_err(|e| RecallError::new_err(e.to_string()))
    }

    /// The event log as JSON text (insert-trims, prunes, compactions, agent trims).
    fn events_json(&self) -> String {
        to_json_text(
            &self
                .engine
                .events()
                .iter()
                .map(event_json)
                .collect::<Vec<_>>(),
        )
    }

    /// The report of the event log as JSON text.
    fn report_json(&self) -> String {
        to_json_text(&self.engine.report())
    }

    /// The prompt tokens the provider reported for the request built from the latest prompt.
    fn observe_usage(&mut self, prompt_tokens: usize) {
        self.engine.observe_usage(prompt_tokens);
    }

    /// ctxgc's token count of the prompt.
    #[getter]
    fn prompt_tokens(&self) -> usize {
        self.engine.prompt_tokens()
    }

    /// The window in tokens.
    #[getter]
    fn window(&self) -> u64 {
        self.window
    }

    /// The session's id (the store's namespace).
    #[getter]
    fn session_id(&self) -> String {
        self.session.as_str().to_owned()
    }

    /// How many times a history that no longer continued the last one restarted the engine.
    #[getter]
    fn restarts(&self) -> usize {
        self.rebuilt
    }
}

#[pymodule]
fn _ctxgc(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(trim, m)?)?;
    m.add_class::<Config>()?;
    m.add_class::<Trimmed>()?;
    m.add_class::<Store>()?;
    m.add_class::<NativeSession>()?;
    let py = m.py();
    m.add("CtxgcError", py.get_type::<CtxgcError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add("RecallError", py.get_type::<RecallError>())?;
    m.add("TRIM_TOOL", agent_tools::TRIM_TOOL)?;
    m.add("RECALL_TOOL", agent_tools::RECALL_TOOL)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
