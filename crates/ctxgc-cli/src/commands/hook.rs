//! `ctxgc hook claude-code` and `ctxgc hook codex`: the agents' hooks, for users whose agent
//! cannot go through `ctxgc serve` (a subscription sign-in, a managed endpoint). It reads the
//! hook's input on stdin and answers on stdout, as Claude Code's hooks protocol says (Codex CLI
//! 0.169.0 speaks the same one, its shell tool named `Bash` there too):
//!
//! - `PreToolUse` of `Bash`: the command runs as written, in the same shell, its merged output
//!   kept in a temporary file and trimmed by `ctxgc trim --tool Bash` (the proxy's profile for
//!   that tool) before Claude Code reads it, so a long log loses its middle, not its error line
//!   or its end; the original is filed under the session for `ctxgc mcp` to answer.
//! - `PostToolUse` of an MCP tool (browser snapshots, fetched pages, issue trackers): its text
//!   trimmed the same way (`updatedMCPToolOutput`), the original filed too; Claude Code only
//!   (Codex CLI 0.169.0 refuses the field).
//! - Gemini CLI's `BeforeTool` of `run_shell_command` (`hookSpecificOutput.tool_input`), the
//!   same way; its `AfterTool` replaces no output.
//! - Codex CLI takes a rewritten command only with the hook's approval (`permissionDecision:
//!   allow`): ctxgc gives none of its own, so it rewrites only in sessions that already run
//!   every command unasked (`permission_mode: bypassPermissions`).
//!
//! `Read`, `Grep` and `Glob` run inside Claude Code and reach no command hook before their
//! output is in the conversation; the proxy covers them (docs/agents.md).

use std::io::Read;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use ctxgc_core::config::Config;
use ctxgc_core::store::SessionId;
use serde_json::{Value, json};

#[derive(Debug, Args)]
pub struct HookArgs {
    /// The agent whose hook this is.
    pub agent: Agent,
    /// The store originals are filed in (`sqlite:PATH`, default the one `ctxgc mcp` reads).
    #[arg(long)]
    pub store: Option<String>,
    /// The recall tool the agent has (the MCP server's, as the agent names it:
    /// `mcp__plugin_ctxgc_ctxgc__recall_tool_result` from the Claude Code plugin), which the
    /// markers then name, as the proxy's do.
    #[arg(long, value_name = "TOOL")]
    pub recall_with: Option<String>,
    /// The model's context window in tokens, which the trims scale with (default from the
    /// config, as `ctxgc serve` assumes for a model it does not know).
    #[arg(long, value_name = "TOKENS", value_parser = super::parse_window)]
    pub window: Option<u64>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Agent {
    /// Claude Code (`PreToolUse` and `PostToolUse`).
    ClaudeCode,
    /// Codex CLI (`[features] hooks = true`, `hooks.json` in `CODEX_HOME`).
    Codex,
    /// Gemini CLI (`BeforeTool`, in `settings.json`'s `hooks`).
    Gemini,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Gemini => "gemini",
        }
    }

    /// Its shell tool, as its hooks name it.
    fn shell_tool(self) -> &'static str {
        match self {
            Agent::ClaudeCode | Agent::Codex => "Bash",
            Agent::Gemini => "run_shell_command",
        }
    }

    /// The most a command's trim may hold, where the agent cuts longer outputs itself (keeping
    /// their start and end only, which would cut the marker and the error lines out):
    /// Claude Code 2.1.328 a failed command's at 10,000 characters, Codex CLI 0.169.0 every
    /// command's at about 10,000.
    fn max_bytes(self, failed: bool) -> Option<usize> {
        match self {
            Agent::ClaudeCode => failed.then_some(AGENT_CUT_MAX_BYTES),
            Agent::Codex => Some(AGENT_CUT_MAX_BYTES),
            // Gemini CLI 0.61.0 keeps 40,000 characters, more than a trim holds.
            Agent::Gemini => None,
        }
    }
}

/// A hook input holds a tool's whole output at most: bounded all the same.
const MAX_INPUT_BYTES: u64 = 256 << 20;

pub fn run(config: &Config, args: HookArgs) -> Result<ExitCode> {
    let mut input = String::new();
    std::io::stdin()
        .take(MAX_INPUT_BYTES)
        .read_to_string(&mut input)
        .context("cannot read the hook's input")?;
    let event: Value = serde_json::from_str(&input)
        .context("the hook's input on stdin is not JSON (is this run by an agent's hooks?)")?;
    let answer = match event["hook_event_name"].as_str() {
        Some("PreToolUse" | "BeforeTool") => pre_tool_use(&args, &event)?,
        Some("PostToolUse") => post_tool_use(config, &args, &event)?,
        _ => None,
    };
    if let Some(answer) = answer {
        outln!("{answer}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The session originals are filed under: the agent's own session id, spelled safely.
fn session_of(agent: Agent, event: &Value) -> String {
    let id: String = event["session_id"]
        .as_str()
        .unwrap_or("unknown")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(64)
        .collect();
    format!("hook.{}-{id}", agent.name())
}

/// Under the agents' own cuts at about 10,000 characters, with room for the lines they add
/// ("Exit code N", Codex's chunk header).
const AGENT_CUT_MAX_BYTES: usize = 9_000;

/// Marks a command this hook wrapped, so it is never wrapped twice.
const WRAPPED: &str = "# ctxgc: output trimmed";

fn pre_tool_use(args: &HookArgs, event: &Value) -> Result<Option<Value>> {
    let input = &event["tool_input"];
    let command = input["command"].as_str().unwrap_or_default();
    // Codex CLI takes a rewritten command only with the hook's approval of it, and ctxgc never
    // approves on the user's behalf: it rewrites only where the user already approved every
    // command (`bypassPermissions`).
    let approves = matches!(args.agent, Agent::Codex);
    if approves && event["permission_mode"] != "bypassPermissions" {
        return Ok(None);
    }
    let tool = args.agent.shell_tool();
    if event["tool_name"] != tool
        || command.trim().is_empty()
        || command.contains(WRAPPED)
        || input["run_in_background"] == true
    {
        return Ok(None);
    }
    let exe = std::env::current_exe().context("cannot tell where ctxgc is")?;
    let mut trim = vec![
        quote(&exe.to_string_lossy()),
        format!("trim --tool {tool} --session"),
        quote(&session_of(args.agent, event)),
    ];
    if let Some(store) = &args.store {
        trim.extend(["--store".into(), quote(store)]);
    }
    if let Some(window) = args.window {
        trim.extend(["--window".into(), window.to_string()]);
    }
    if let Some(tool) = &args.recall_with {
        trim.extend(["--recall-with".into(), quote(tool)]);
    }
    let trim = trim.join(" ");
    let capped = |failed| match args.agent.max_bytes(failed) {
        Some(max) => format!("{trim} --max-bytes {max}"),
        None => trim.clone(),
    };
    let wrapped = match args.agent {
        // The command runs in the tool's own shell (a `cd` or an export still holds), its
        // output to a file, then trimmed. An `exit` inside it leaves through the trap, which
        // trims what it wrote to the descriptors saved before the redirection. A failed
        // command's output is trimmed to fit Claude Code's own cut of failures (their start
        // and end only), so the error lines and the marker's id survive it.
        Agent::ClaudeCode => {
            let (passed, failed) = (capped(false), capped(true));
            format!(
                "{WRAPPED}\nexec 8>&1 9>&2; __ctxgc_out=\"$(mktemp)\"; \
                 trap '{failed_q} <\"$__ctxgc_out\" >&8 2>&9; rm -f \"$__ctxgc_out\"' EXIT\n\
                 {{ {command}\n}} >\"$__ctxgc_out\" 2>&1; __ctxgc_status=$?; trap - EXIT\n\
                 if [ $__ctxgc_status -eq 0 ]; then {passed} <\"$__ctxgc_out\"; \
                 else {failed} <\"$__ctxgc_out\"; fi\n\
                 rm -f \"$__ctxgc_out\"; exec 8>&- 9>&-; (exit $__ctxgc_status)",
                failed_q = failed.replace('\'', "'\\''"),
            )
        }
        // Codex and Gemini CLI run each command in a shell of its own (and Codex's exec policy
        // refuses `rm -f`): a pipe, its status the command's, set without leaving the shell
        // (Gemini CLI runs its own bookkeeping after the command).
        Agent::Codex | Agent::Gemini => format!(
            "{WRAPPED}\n{{ {command}\n}} 2>&1 | {trim}; (exit \"${{PIPESTATUS[0]}}\")",
            trim = capped(false),
        ),
    };
    let mut updated = input.clone();
    updated["command"] = Value::String(wrapped);
    let answer = match args.agent {
        Agent::ClaudeCode => json!({"hookEventName": "PreToolUse", "updatedInput": updated}),
        Agent::Codex => json!({
            "hookEventName": "PreToolUse", "updatedInput": updated, "permissionDecision": "allow"
        }),
        // Gemini CLI merges `tool_input` into the call's parameters.
        Agent::Gemini => json!({"hookEventName": "BeforeTool", "tool_input": updated}),
    };
    Ok(Some(json!({ "hookSpecificOutput": answer })))
}

fn post_tool_use(config: &Config, args: &HookArgs, event: &Value) -> Result<Option<Value>> {
    // Codex CLI 0.169.0 refuses `updatedMCPToolOutput` ("unsupported"); Gemini CLI 0.61.0's
    // AfterTool replaces no output.
    if !matches!(args.agent, Agent::ClaudeCode) {
        return Ok(None);
    }
    let tool = event["tool_name"].as_str().unwrap_or_default();
    // Only MCP tools' outputs can be replaced; ctxgc's own recall answers stay whole.
    if !tool.starts_with("mcp__") || tool.ends_with(ctxgc_core::agent_tools::RECALL_TOOL) {
        return Ok(None);
    }
    let response = &event["tool_response"];
    let text = text_of(response);
    if text.is_empty() {
        return Ok(None);
    }
    let window = args.window.unwrap_or(config.trim.default_window);
    let trimmed = ctxgc_core::trim::trim_output(&config.trim, tool, window, &text);
    if !trimmed.trimmed {
        return Ok(None);
    }
    let store = super::serve::open_store(args.store.as_deref(), config, None)?;
    store
        .put(
            &SessionId::new(session_of(args.agent, event)),
            trimmed.id,
            &text,
        )
        .context("cannot file the original in the store")?;
    let shown = match &args.recall_with {
        Some(tool) => {
            let way = ctxgc_core::agent_tools::RecallWay::Tool(tool.clone());
            ctxgc_core::trim::name_recall(&trimmed.text, &way).unwrap_or(trimmed.text)
        }
        None => trimmed.text,
    };
    let block = json!([{"type": "text", "text": shown}]);
    let updated = match response {
        Value::String(_) => block[0]["text"].clone(),
        Value::Object(map) if map.contains_key("content") => {
            let mut map = map.clone();
            map.insert("content".into(), block);
            Value::Object(map)
        }
        _ => block,
    };
    Ok(Some(json!({
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "updatedMCPToolOutput": updated}
    })))
}

/// The text of an MCP tool's output: a string, or its text blocks (bare or under `content`).
fn text_of(response: &Value) -> String {
    let blocks = match response {
        Value::String(text) => return text.clone(),
        Value::Array(blocks) => blocks,
        Value::Object(map) => match map.get("content") {
            Some(Value::Array(blocks)) => blocks,
            _ => return String::new(),
        },
        _ => return String::new(),
    };
    let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    // Anything but text (an image) stays as it came.
    if texts.len() != blocks.len() {
        return String::new();
    }
    texts.join("\n")
}

/// A word for the shell, in single quotes.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}
