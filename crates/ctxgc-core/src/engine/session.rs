//! A conversation under management: the prompt as the model sees it plus an event log.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::config::Config;
use crate::content_id::ContentId;
use crate::engine::abstracts::ResultMeta;
use crate::engine::apply::EventKind;
use crate::engine::apply::{self, ApplyInput, Edits};
use crate::engine::event;
use crate::engine::integrity::{self, IntegrityError};
use crate::engine::plan::{self, Plan, PlanInput};
use crate::engine::repeats::RepeatIndex;
use crate::engine::summarizer::{Summarizer, SummaryReply, SummaryRequest};
use crate::recall::{self, RecallError, RecallQuery};
use crate::store::{OriginalStore, SessionId, StoreError};
use crate::tokens::{Calibration, ProviderFamily, TokenCounter};
use crate::transcript::{Block, Message, Role};
use crate::trim::{self, ToolOutput, TrimConfig};

use super::policy::Policy;

/// One entry of the event log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    /// What happened.
    pub kind: EventKind,
    /// Assistant turns so far.
    pub turn: usize,
    /// Prompt tokens before (for insert-trims: the original output's tokens).
    pub tokens_before: usize,
    /// Prompt tokens after (for insert-trims: the inserted text's tokens).
    pub tokens_after: usize,
    /// Index of the earliest message the event changed (where the cached prefix ends).
    pub earliest_changed: usize,
    /// Summarizer input tokens.
    pub summarizer_tokens_in: usize,
    /// Summarizer output tokens.
    pub summarizer_tokens_out: usize,
    /// Wall time of planning and applying, in microseconds (telemetry only; not in prompts).
    pub duration_us: u64,
    /// Why, when something is worth saying (fallback reason, automatic events stopped...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// What the event did with each output it pruned, kept or summarised, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<crate::engine::event::Decision>,
}

impl EventRecord {
    /// Tokens the event reclaimed.
    pub fn reclaimed(&self) -> usize {
        self.tokens_before.saturating_sub(self.tokens_after)
    }
}

/// Engine errors.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The original store failed; nothing was changed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The event would leave an invalid prompt; nothing was changed.
    #[error("event not applied: {0}")]
    Integrity(#[from] IntegrityError),
    /// An agent trim with no tool result to trim.
    #[error("trim_tool_result: there is no tool result since the last user message to replace")]
    NothingToTrim,
    /// A recall of an unknown id.
    #[error("recall_tool_result: no original with id {0} in this session")]
    UnknownId(String),
    /// A recall query that cannot be answered.
    #[error("recall_tool_result: {0}")]
    Recall(#[from] RecallError),
}

/// Aggregates of a session's event log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionReport {
    /// Assistant turns.
    pub turns: usize,
    /// History-rewriting events (prune-only, compaction, fallback, agent trim).
    pub events: usize,
    /// Events per 100 turns.
    pub events_per_100_turns: f64,
    /// Mean assistant turns between history-rewriting events.
    pub mean_turns_between_events: Option<f64>,
    /// Prune-only events.
    pub prune_only: usize,
    /// Compactions (fallbacks included).
    pub compactions: usize,
    /// Insert-time trims.
    pub insert_trims: usize,
    /// Calls to a summarizer (LLM or extractive).
    pub summarizer_calls: usize,
    /// Mean tokens reclaimed per history-rewriting event.
    pub mean_reclaimed_per_event: Option<f64>,
    /// The earliest message index any event changed.
    pub earliest_changed: Option<usize>,
    /// Why automatic events stopped, if they did.
    pub stopped: Option<String>,
}

/// The engine for one conversation. See the module documentation of `engine`.
pub struct Session {
    id: SessionId,
    window: u64,
    policy: Policy,
    trim: TrimConfig,
    counter: TokenCounter,
    messages: Vec<Message>,
    tokens: Vec<usize>,
    tools: Vec<Value>,
    tools_tokens: usize,
    /// Tokens every request holds that neither the messages nor the tools show
    /// ([`Session::set_unseen_tokens`]).
    unseen_tokens: usize,
    metas: BTreeMap<String, ResultMeta>,
    events: Vec<EventRecord>,
    ineffective: usize,
    stopped: Option<String>,
    turns: usize,
    frozen: usize,
    /// Tool results as they entered the history (what repeats may point to).
    inserted: Vec<String>,
    /// Where earlier results' lines are, for repeats.
    repeats: RepeatIndex,
    cache_cold: bool,
    /// Whether events may summarise ([`PlanInput::may_compact`]).
    may_compact: bool,
    /// Runaway assistant texts events cut, by id (recallable; tool outputs are in the store).
    cut_texts: BTreeMap<ContentId, String>,
    /// The provider's counts against ours ([`Session::observe_usage`]): events are planned in
    /// the provider's tokens, since its window is counted in them.
    calibration: Calibration,
}

impl Session {
    /// A session named `id` (the store namespace) for a model with a `window`-token context.
    pub fn new(
        id: impl Into<String>,
        window: u64,
        config: &Config,
        family: ProviderFamily,
    ) -> Session {
        Session {
            id: SessionId::new(id),
            window,
            policy: config.engine.clone(),
            trim: config.trim.clone(),
            counter: TokenCounter::new(family, config.tokens.clone()),
            messages: Vec::new(),
            tokens: Vec::new(),
            tools: Vec::new(),
            tools_tokens: 0,
            unseen_tokens: 0,
            metas: BTreeMap::new(),
            events: Vec::new(),
            ineffective: 0,
            stopped: None,
            turns: 0,
            frozen: 0,
            inserted: Vec::new(),
            repeats: RepeatIndex::new(),
            cache_cold: false,
            may_compact: true,
            cut_texts: BTreeMap::new(),
            calibration: Calibration::default(),
        }
    }

    /// Memoises its token counts in `memo` too (shared with other sessions of a server or a
    /// replay run).
    pub fn share_counts(&mut self, memo: std::sync::Arc<crate::tokens::CountMemo>) {
        let counter = std::mem::replace(
            &mut self.counter,
            TokenCounter::new(ProviderFamily::default(), Default::default()),
        );
        self.counter = counter.sharing(memo);
    }

    /// The session id.
    pub fn id(&self) -> &str {
        self.id.as_str()
    }

    /// Sets the tool definitions sent on every request (they count in every prompt).
    pub fn set_tools(&mut self, tools: Vec<Value>) {
        self.tools_tokens = self.counter.count_tools(&tools);
        self.tools = tools;
    }

    /// Tokens the provider reads on every request that the session's messages and tool
    /// definitions do not hold, in ctxgc's own count: a client's system prompt and tools its
    /// log leaves out, which a proxy would see. They count in every prompt.
    pub fn set_unseen_tokens(&mut self, tokens: usize) {
        self.unseen_tokens = tokens;
    }

    /// The prompt as the model sees it.
    pub fn prompt(&self) -> &[Message] {
        &self.messages
    }

    /// Tokens of the prompt, tool definitions and reply priming included.
    pub fn prompt_tokens(&self) -> usize {
        self.tokens.iter().sum::<usize>() + self.fixed_tokens()
    }

    /// Tells the session how many prompt tokens the provider counted for the request built
    /// from [`Self::prompt`] as it stands (the usage its answer reported): called before the
    /// next message enters. Later plans count in the provider's tokens, whose window is the one
    /// that must not be passed: a model whose tokenizer counts 30% more than ctxgc's (Gemini's
    /// does) would otherwise pass it before an event is due.
    pub fn observe_usage(&mut self, reported_prompt_tokens: usize) {
        // A count past the window is not of a prompt the model took as planned (the window is
        // larger than the session was told, or the usage counts more than the prompt): it
        // teaches nothing about ctxgc's counts.
        if reported_prompt_tokens as u64 > self.window {
            return;
        }
        self.calibration
            .observe(self.prompt_tokens(), reported_prompt_tokens);
    }

    /// What [`Self::observe_usage`] learned: the provider's tokens per token of ctxgc's count
    /// (1 before any report).
    pub fn calibration(&self) -> f64 {
        self.calibration.ratio()
    }

    /// Starts from what `earlier` learned of the provider's counts: a session that replaces
    /// another for the same conversation (its history was rewound or edited) talks to the same
    /// provider.
    pub fn keep_calibration(&mut self, earlier: &Session) {
        self.calibration = earlier.calibration;
    }

    /// Tokens of each message of the prompt.
    pub fn message_tokens(&self) -> &[usize] {
        &self.tokens
    }

    /// The event log.
    pub fn events(&self) -> &[EventRecord] {
        &self.events
    }

    /// Facts of a tool output, by call id.
    pub fn result_meta(&self, call_id: &str) -> Option<&ResultMeta> {
        self.metas.get(call_id)
    }

    /// Appends a system, user or assistant message verbatim (tool results go through
    /// [`Session::insert_tool_results`]).
    pub fn push(&mut self, message: Message) {
        if message.role == Role::Assistant {
            self.turns += 1;
        }
        self.tokens.push(self.counter.count_message(&message));
        self.messages.push(message);
    }

    /// Inserts the tool results of one assistant turn. Each original is written to `store`
    /// first; each result then passes repeat detection and insertion trimming (with the turn's
    /// shared budget). Returns the insert-trim events.
    pub fn insert_tool_results(
        &mut self,
        store: &dyn OriginalStore,
        results: Vec<Message>,
    ) -> Result<Vec<EventRecord>, EngineError> {
        let started = Instant::now();
        let mut texts = Vec::with_capacity(results.len());
        let mut originals = Vec::with_capacity(results.len());
        for message in &results {
            let result = message.tool_results().next();
            let original = result.map(|r| r.text()).unwrap_or_default();
            // A result an integration already trimmed when the tool returned it (its framework
            // keeps the trim): its original is the one the trim's marker names, stored then.
            // Abstracts and recall name that one, and the trim counts in the report.
            let earlier = self.earlier_trim(store, &original);
            let meta = match &earlier {
                Some((id, whole)) => ResultMeta {
                    id: *id,
                    ..ResultMeta::of(whole)
                },
                None => {
                    let meta = ResultMeta::of(&original);
                    store.put(&self.id, meta.id, &original)?;
                    meta
                }
            };
            let inserted = &self.inserted;
            let pointed = self
                .repeats
                .point_to_repeats(&original, meta.id, &|k| inserted[k].as_str());
            texts.push(pointed.unwrap_or_else(|| original.clone()));
            let earlier_tokens = earlier.map(|(_, whole)| self.counter.count_text(&whole));
            originals.push((original, meta, earlier_tokens));
        }
        let outputs: Vec<ToolOutput<'_>> = results
            .iter()
            .zip(&texts)
            .map(|(m, text)| ToolOutput {
                tool: m
                    .tool_results()
                    .next()
                    .and_then(|r| r.tool_name.as_deref())
                    .unwrap_or("tool"),
                text,
            })
            .collect();
        let trimmed = trim::trim_turn(&self.trim, self.window, &outputs);
        let mut events = Vec::new();
        for (((mut message, (original, meta, earlier_tokens)), trimmed), entered) in
            results.into_iter().zip(originals).zip(trimmed).zip(&texts)
        {
            // A pointer text cut further is recalled by its own id.
            if trimmed.trimmed && trimmed.id != meta.id {
                store.put(&self.id, trimmed.id, entered)?;
            }
            let changed = trimmed.text != original;
            let mut call_id = String::new();
            for block in &mut message.content {
                if let Block::ToolResult(result) = block {
                    call_id = result.call_id.clone();
                    if changed {
                        let mut content = vec![Block::text(trimmed.text.clone())];
                        content.extend(
                            result
                                .content
                                .iter()
                                .filter(|b| !matches!(b, Block::Text { .. }))
                                .cloned(),
                        );
                        result.content = content;
                    }
                }
            }
            let index = self.messages.len();
            let original_tokens = match earlier_tokens {
                Some(tokens) => tokens,
                None if changed => self.counter.count_text(&original),
                None => 0,
            };
            self.push(message);
            if changed || earlier_tokens.is_some() {
                events.push(EventRecord {
                    kind: EventKind::InsertTrim,
                    turn: self.turns,
                    tokens_before: original_tokens,
                    tokens_after: self.tokens[index],
                    earliest_changed: index,
                    summarizer_tokens_in: 0,
                    summarizer_tokens_out: 0,
                    duration_us: started.elapsed().as_micros() as u64,
                    note: None,
                    decisions: Vec::new(),
                });
            }
            // Repeats point to results as they entered the history, pointers and abstracts
            // aside: a pure function of the history the client sends (not of the events
            // since), so the proxy, which sees only that history, inserts the same pointers.
            self.repeats
                .push(self.inserted.len(), &call_id, meta.id, &trimmed.text);
            self.inserted.push(trimmed.text);
            self.metas.insert(call_id, meta);
        }
        self.events.extend(events.iter().cloned());
        Ok(events)
    }

    /// The id and text of the original an earlier ctxgc trim of `text` names, when the store
    /// has it (a marker whose original is not in this session's store is only text).
    fn earlier_trim(&self, store: &dyn OriginalStore, text: &str) -> Option<(ContentId, String)> {
        if !text.contains("; id r-") {
            return None;
        }
        trim::marker_ids(text)
            .into_iter()
            .find_map(|id| Some((id, store.get(&self.id, id).ok()??)))
    }

    /// Tells the session how long the agent was silent before the request about to be
    /// planned: past [`Policy::cold_cache_secs`] the provider's cache has expired, and the
    /// next plan may use that free rewrite. `family` is the provider's (its cache's TTL) and
    /// `requested_ttl_secs` how long the client asked it to keep the cache (see
    /// [`Policy::is_cache_cold`]).
    pub fn set_idle(
        &mut self,
        idle_secs: Option<u64>,
        family: ProviderFamily,
        requested_ttl_secs: Option<u64>,
    ) {
        self.cache_cold = self
            .policy
            .is_cache_cold(idle_secs, family, requested_ttl_secs);
    }

    /// Lets events summarise the middle (the default) or only prune: a session in front of a
    /// client that keeps its own window (the proxy without `compact`) only prunes.
    pub fn set_may_compact(&mut self, may_compact: bool) {
        self.may_compact = may_compact;
    }

    /// Whether the request about to be planned follows a pause past the cache's lifetime (as
    /// [`Self::set_idle`] last judged it).
    pub fn is_cache_cold(&self) -> bool {
        self.cache_cold
    }

    /// The event that is due, if any (once automatic events have stopped, only one that makes
    /// a prompt past the window fit).
    pub fn plan(&self) -> Option<Plan> {
        let tokens = self.calibrated_tokens();
        let input = self.plan_input(&tokens);
        self.may_plan(&input)
            .then(|| plan::plan(&input, &self.policy, &self.counter))
            .flatten()
    }

    /// Whether an event may be planned on `input`: always, but once automatic events have
    /// stopped only to make a prompt past the window fit.
    fn may_plan(&self, input: &PlanInput<'_>) -> bool {
        self.stopped.is_none() || plan::must_fit(input, &self.policy)
    }

    /// Whether the prompt as it stands does not fit the window with room for the answer
    /// ([`plan::must_fit`]): an event must run on the next request, wherever events are
    /// otherwise held back.
    pub fn must_fit(&self) -> bool {
        let tokens = self.calibrated_tokens();
        plan::must_fit(&self.plan_input(&tokens), &self.policy)
    }

    /// The share of the prompt the request after a pause past the cache's lifetime would still
    /// send ([`plan::kept_if_cold`]); 1 once automatic events have stopped.
    pub fn kept_if_cold(&self) -> f64 {
        match self.stopped {
            Some(_) => 1.0,
            None => {
                let tokens = self.calibrated_tokens();
                plan::kept_if_cold(&self.plan_input(&tokens), &self.policy, &self.counter)
            }
        }
    }

    /// Tokens of every request besides its messages: tool definitions, what the session does
    /// not see, the reply's priming.
    fn fixed_tokens(&self) -> usize {
        self.tools_tokens + self.unseen_tokens + 3
    }

    /// Tokens of each message in the provider's count.
    fn calibrated_tokens(&self) -> Vec<usize> {
        self.tokens
            .iter()
            .map(|&n| self.calibration.scale(n))
            .collect()
    }

    /// What planning sees, with `tokens` from [`Self::calibrated_tokens`].
    fn plan_input<'a>(&'a self, tokens: &'a [usize]) -> PlanInput<'a> {
        PlanInput {
            messages: &self.messages,
            tokens,
            fixed_tokens: self.calibration.scale(self.fixed_tokens()),
            metas: &self.metas,
            window: self.window,
            frozen: self.frozen,
            cache_cold: self.cache_cold,
            // The session does not know the model: the policy's prices, the dearer default.
            cache_prices: None,
            may_compact: self.may_compact,
            enforce_window: true,
        }
    }

    fn apply_input(&self) -> ApplyInput<'_> {
        ApplyInput {
            messages: &self.messages,
            tokens: &self.tokens,
            metas: &self.metas,
        }
    }

    /// The request an external summarizer gets for a compaction plan.
    pub fn summary_request(&self, plan: &Plan) -> SummaryRequest {
        event::summary_request(plan, &self.apply_input(), &self.tools)
    }

    /// Runs the due event, if any: prune-only directly; a compaction with `summarizer` when
    /// given (falling back to the extractive summarizer when it fails), else extractively.
    pub fn run_due_event<'s>(
        &mut self,
        summarizer: Option<&mut (dyn Summarizer + 's)>,
    ) -> Result<Option<EventRecord>, EngineError> {
        let started = Instant::now();
        let mut ask = summarizer.map(|s| {
            move |request: &SummaryRequest| {
                s.summarize(request)
                    .map_err(|e| format!("{} summarizer failed: {e}", s.name()))
            }
        });
        let tokens = self.calibrated_tokens();
        let input = self.plan_input(&tokens);
        if !self.may_plan(&input) {
            return Ok(None);
        }
        let Some((_, edits)) = event::decide(
            &input,
            &self.policy,
            &self.counter,
            &self.tools,
            ask.as_mut().map(|f| f as &mut event::SummarizeFn<'_>),
        ) else {
            return Ok(None);
        };
        self.take(edits, started).map(Some)
    }

    /// Applies a plan. For compactions, `reply` is the external summarizer's answer (`Err`
    /// with the reason when it failed: the extractive summarizer fills in and the event is
    /// logged as a fallback), or `None` for the extractive summarizer.
    pub fn apply(
        &mut self,
        plan: &Plan,
        reply: Option<Result<SummaryReply, String>>,
    ) -> Result<EventRecord, EngineError> {
        let started = Instant::now();
        let edits = apply::apply(plan, &self.apply_input(), &self.counter, reply);
        self.take(edits, started)
    }

    /// Renders an event's edits on the prompt, checks it, records the event and judges it.
    fn take(&mut self, edits: Edits, started: Instant) -> Result<EventRecord, EngineError> {
        let before = self.prompt_tokens();
        let decisions = crate::engine::event::decisions(&edits, &self.messages);
        let new_messages = edits.render(&self.messages);
        integrity::check(&new_messages)?;
        // What the event took out of view can no longer be pointed to by a later repeat.
        for &index in &edits.hidden {
            for result in self.messages[index].tool_results() {
                self.repeats.hide(&result.call_id);
            }
        }
        if let crate::engine::apply::Change::Prune(prune) = &edits.change {
            for edit in prune {
                if let crate::engine::plan::Replacement::Text(_) = edit.replacement {
                    let text = self.messages[edit.index].text_content();
                    self.cut_texts.insert(ContentId::of(text.as_bytes()), text);
                }
            }
        }
        self.tokens = new_messages
            .iter()
            .map(|m| self.counter.count_message(m))
            .collect();
        self.messages = new_messages;
        self.frozen = edits.frozen;
        let after = self.prompt_tokens();
        let mut record = EventRecord {
            kind: edits.kind,
            turn: self.turns,
            tokens_before: before,
            tokens_after: after,
            earliest_changed: edits.earliest_changed(),
            summarizer_tokens_in: edits.summarizer_tokens_in,
            summarizer_tokens_out: edits.summarizer_tokens_out,
            duration_us: started.elapsed().as_micros() as u64,
            note: edits.note,
            decisions,
        };
        self.note_effectiveness(&mut record);
        self.events.push(record.clone());
        Ok(record)
    }

    /// Two ineffective events in a row (reclaiming too little, or landing above the threshold)
    /// stop automatic events: firing again would only break the cache again.
    fn note_effectiveness(&mut self, record: &mut EventRecord) {
        let verdict = self.policy.judge_event(
            self.window,
            self.calibration.scale(record.tokens_before),
            self.calibration.scale(record.tokens_after),
            self.ineffective,
        );
        self.ineffective = verdict.ineffective_in_a_row;
        if let Some(why) = verdict.stop {
            record.note = Some(match record.note.take() {
                Some(n) => format!("{n}; {why}"),
                None => why.clone(),
            });
            self.stopped = Some(why);
        }
    }

    /// Why automatic events stopped, if they did.
    pub fn stopped(&self) -> Option<&str> {
        self.stopped.as_deref()
    }

    /// `trim_tool_result`: replaces the most recent tool result (it must come after the last
    /// user message) with the model's summary and the original's recall id. Only the latest
    /// result may be replaced, so only the end of the cached prefix is lost.
    pub fn agent_trim(&mut self, summary_text: &str) -> Result<EventRecord, EngineError> {
        let started = Instant::now();
        let last_user = self
            .messages
            .iter()
            .rposition(|m| m.role == Role::User)
            .unwrap_or(0);
        let index = self
            .messages
            .iter()
            .rposition(|m| m.role == Role::Tool)
            .filter(|&i| i > last_user)
            .ok_or(EngineError::NothingToTrim)?;
        let before = self.prompt_tokens();
        let message = &mut self.messages[index];
        for block in &mut message.content {
            if let Block::ToolResult(result) = block {
                let id = self
                    .metas
                    .get(&result.call_id)
                    .map(|m| m.id)
                    .unwrap_or_else(|| ContentId::of(result.text().as_bytes()));
                result.content = vec![Block::text(format!(
                    "[summary by the model; original: id {id}] {}",
                    summary_text.trim()
                ))];
            }
        }
        self.tokens[index] = self.counter.count_message(&self.messages[index]);
        let record = EventRecord {
            kind: EventKind::AgentTrim,
            turn: self.turns,
            tokens_before: before,
            tokens_after: self.prompt_tokens(),
            earliest_changed: index,
            summarizer_tokens_in: 0,
            summarizer_tokens_out: 0,
            duration_us: started.elapsed().as_micros() as u64,
            note: None,
            decisions: Vec::new(),
        };
        self.events.push(record.clone());
        Ok(record)
    }

    /// `recall_tool_result`: the original of `id`, whole or in part.
    pub fn recall(
        &self,
        store: &dyn OriginalStore,
        id: &str,
        query: &RecallQuery,
    ) -> Result<String, EngineError> {
        let parsed = ContentId::parse(id).ok_or_else(|| EngineError::UnknownId(id.to_owned()))?;
        let original = match self.cut_texts.get(&parsed) {
            Some(text) => text.clone(),
            None => store
                .get(&self.id, parsed)?
                .ok_or_else(|| EngineError::UnknownId(id.to_owned()))?,
        };
        Ok(recall::recall(&original, query, self.trim.hard_cap_bytes)?)
    }

    /// Aggregates of the event log.
    pub fn report(&self) -> SessionReport {
        let rewrites: Vec<&EventRecord> = self
            .events
            .iter()
            .filter(|e| e.kind.rewrites_history())
            .collect();
        let turns_between: Vec<f64> = rewrites
            .windows(2)
            .map(|w| (w[1].turn - w[0].turn) as f64)
            .collect();
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let reclaimed: Vec<f64> = rewrites.iter().map(|e| e.reclaimed() as f64).collect();
        SessionReport {
            turns: self.turns,
            events: rewrites.len(),
            events_per_100_turns: if self.turns == 0 {
                0.0
            } else {
                rewrites.len() as f64 * 100.0 / self.turns as f64
            },
            mean_turns_between_events: mean(&turns_between),
            prune_only: rewrites
                .iter()
                .filter(|e| e.kind == EventKind::PruneOnly)
                .count(),
            compactions: rewrites
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Compaction | EventKind::Fallback))
                .count(),
            insert_trims: self.events.len() - rewrites.len(),
            summarizer_calls: rewrites
                .iter()
                .filter(|e| matches!(e.kind, EventKind::Compaction | EventKind::Fallback))
                .count(),
            mean_reclaimed_per_event: mean(&reclaimed),
            earliest_changed: rewrites.iter().map(|e| e.earliest_changed).min(),
            stopped: self.stopped.clone(),
        }
    }
}
