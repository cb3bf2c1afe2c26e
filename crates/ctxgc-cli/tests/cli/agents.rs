//! The ways in from inside an agent: `ctxgc mcp` over stdio, the hooks, `ctxgc trim --session`
//! and `ctxgc recall` by id alone, all on one store.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{build_log, ctxgc};

fn store_in(name: &str) -> String {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    format!("sqlite:{}", dir.join("store.sqlite").display())
}

/// The id the output's trim marker shows.
fn marker_id(text: &str) -> String {
    let at = text.find("; id r-").expect("a trim marker with its id") + "; id ".len();
    text[at..at + 18].to_owned()
}

/// An MCP client's session with `ctxgc mcp`, line-delimited JSON-RPC on its stdin and stdout.
struct McpSession {
    child: std::process::Child,
    reader: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl McpSession {
    fn start(store: &str) -> McpSession {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ctxgc"))
            .args(["mcp", "--store", store])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let reader = BufReader::new(child.stdout.take().unwrap());
        let mut session = McpSession {
            child,
            reader,
            next_id: 0,
        };
        let init = session.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}),
        );
        assert_eq!(init["serverInfo"]["name"], "ctxgc", "{init}");
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.reader.read_line(&mut line).unwrap() > 0,
                "the server closed"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message["result"].clone();
            }
        }
    }

    fn recall(&mut self, arguments: Value) -> (bool, String) {
        let result = self.request(
            "tools/call",
            json!({"name": "recall_tool_result", "arguments": arguments}),
        );
        let text = result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        (result["isError"] == true, text)
    }
}

impl Drop for McpSession {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Defect guarded: through the proxy's defaults, an agent was shown ids that no tool it had
/// could answer.
#[test]
fn the_mcp_server_recalls_what_a_trim_filed_by_the_id_its_marker_shows() {
    let store = store_in("mcp-recall");
    let log = build_log(3000, 1500);
    let out = ctxgc(
        &[
            "trim",
            "--tool",
            "Bash",
            "--session",
            "s1",
            "--store",
            &store,
        ],
        log.as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trimmed = String::from_utf8(out.stdout).unwrap();
    assert!(trimmed.len() < log.len() / 2);
    let id = marker_id(&trimmed);

    let mut mcp = McpSession::start(&store);
    let tools = mcp.request("tools/list", json!({}));
    assert_eq!(tools["tools"][0]["name"], "recall_tool_result");
    assert_eq!(tools["tools"][0]["inputSchema"]["required"], json!(["id"]));
    let (failed, text) = mcp.recall(json!({"id": id, "pattern": "linking with", "context": 0}));
    assert!(!failed, "{text}");
    assert!(
        text.contains("1502| error: linking with `cc` failed"),
        "{text}"
    );
    let (failed, text) = mcp.recall(json!({"id": id}));
    assert!(!failed);
    assert!(text == log, "the original, byte for byte");
    let (failed, text) = mcp.recall(json!({"id": "r-0000000000000000"}));
    assert!(
        failed && text.contains("no original with id r-0000000000000000"),
        "{text}"
    );
    let (failed, text) = mcp.recall(json!({"id": "last-output"}));
    assert!(failed && text.contains("is not an id"), "{text}");

    // The same lookup from a shell, without the session.
    let out = ctxgc(
        &["recall", &id, "--store", &store, "--lines", "1502-1502"],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("error: linking with"));
}

/// A shared store holds many callers' originals: a reader must say whose.
#[test]
fn a_shared_store_needs_the_callers_key() {
    let out = ctxgc(
        &[
            "recall",
            "r-0123456789abcdef",
            "--store",
            "redis://127.0.0.1:1",
        ],
        b"",
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Either the store cannot be reached, or it refuses to read without a key: never a read.
    assert!(
        stderr.contains("--key-env") || stderr.contains("redis"),
        "{stderr}"
    );
    let out = ctxgc(
        &[
            "recall",
            "r-0123456789abcdef",
            "--store",
            &store_in("keyless"),
            "--key-env",
            "CTXGC_TEST_UNSET_KEY",
        ],
        b"",
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("CTXGC_TEST_UNSET_KEY: the variable is not set")
    );
}

fn hook(agent: &str, store: &str, event: &Value) -> Option<Value> {
    let out = ctxgc(
        &["hook", agent, "--store", store],
        event.to_string().as_bytes(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    (!stdout.trim().is_empty()).then(|| serde_json::from_str(&stdout).unwrap())
}

/// Claude Code's Bash hook: the command runs as written in the same shell, its output trimmed
/// with the original filed; an `exit` inside still trims, and the status is the command's.
#[test]
fn the_claude_code_hook_runs_bash_commands_through_the_trim() {
    let store = store_in("hook-claude");
    let script = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("hook-log.txt");
    std::fs::write(&script, build_log(3000, 1500)).unwrap();
    let command = format!("cd / && cat {} && exit 3", script.display());
    let event = json!({"session_id": "abc", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": command, "description": "build"}});
    let answer = hook("claude-code", &store, &event).expect("a rewrite");
    let output = &answer["hookSpecificOutput"];
    assert_eq!(output["hookEventName"], "PreToolUse");
    assert!(
        output.get("permissionDecision").is_none(),
        "never approves for the user"
    );
    assert_eq!(output["updatedInput"]["description"], "build");
    let wrapped = output["updatedInput"]["command"].as_str().unwrap();
    let run = Command::new("bash").args(["-c", wrapped]).output().unwrap();
    assert_eq!(run.status.code(), Some(3));
    let shown = String::from_utf8(run.stdout).unwrap();
    assert!(
        shown.len() <= 9_000,
        "{} bytes: under Claude Code's cut of failures",
        shown.len()
    );
    assert!(shown.contains("error: linking with `cc` failed"));
    let id = marker_id(&shown);
    let out = ctxgc(
        &[
            "recall",
            &id,
            "--store",
            &store,
            "--session",
            "hook.claude-code-abc",
        ],
        b"",
    );
    assert!(
        out.stdout == build_log(3000, 1500).as_bytes(),
        "the original, byte for byte"
    );

    // A wrapped command and a background one are left alone, as is another tool.
    let again = json!({"session_id": "abc", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": wrapped}});
    assert_eq!(hook("claude-code", &store, &again), None);
    let background = json!({"session_id": "abc", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                            "tool_input": {"command": "make", "run_in_background": true}});
    assert_eq!(hook("claude-code", &store, &background), None);
    let read = json!({"session_id": "abc", "hook_event_name": "PreToolUse", "tool_name": "Read",
                      "tool_input": {"file_path": "/etc/hosts"}});
    assert_eq!(hook("claude-code", &store, &read), None);
}

/// An MCP tool's long output is replaced by its trim (Claude Code), never ctxgc's own recall.
#[test]
fn the_claude_code_hook_trims_long_mcp_outputs() {
    let store = store_in("hook-mcp");
    // Under the recall's cap (the trimmer's hard cap, 128 KiB), so it comes back whole.
    let page = build_log(3000, 1500);
    let event = json!({"session_id": "abc", "hook_event_name": "PostToolUse",
                       "tool_name": "mcp__browser__snapshot", "tool_input": {},
                       "tool_response": [{"type": "text", "text": page}]});
    let answer = hook("claude-code", &store, &event).expect("a replacement");
    let replaced = &answer["hookSpecificOutput"]["updatedMCPToolOutput"];
    let text = replaced[0]["text"].as_str().unwrap();
    assert!(
        text.len() < page.len() / 2,
        "{} of {} bytes",
        text.len(),
        page.len()
    );
    assert!(text.contains("error: linking with"), "the error line kept");
    let mut mcp = McpSession::start(&store);
    let (failed, whole) = mcp.recall(json!({"id": marker_id(text)}));
    assert!(!failed);
    assert!(whole == page, "the original, byte for byte");
    let own = json!({"session_id": "abc", "hook_event_name": "PostToolUse",
                     "tool_name": "mcp__ctxgc__recall_tool_result", "tool_input": {},
                     "tool_response": [{"type": "text", "text": page}]});
    assert_eq!(hook("claude-code", &store, &own), None);
}

/// Codex takes a rewritten command only with the hook's approval: ctxgc gives it only where
/// every command already runs unasked. Gemini CLI's BeforeTool takes `tool_input`.
#[test]
fn the_codex_and_gemini_hooks_rewrite_their_shell_tools() {
    let store = store_in("hook-codex");
    let event = |mode: &str| {
        json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "permission_mode": mode, "tool_input": {"command": "seq 1 100000; exit 4"}})
    };
    assert_eq!(hook("codex", &store, &event("default")), None);
    let answer = hook("codex", &store, &event("bypassPermissions")).expect("a rewrite");
    let output = &answer["hookSpecificOutput"];
    assert_eq!(output["permissionDecision"], "allow");
    let wrapped = output["updatedInput"]["command"].as_str().unwrap();
    assert!(!wrapped.contains("rm -f"), "Codex's exec policy refuses it");
    let run = Command::new("bash").args(["-c", wrapped]).output().unwrap();
    assert_eq!(run.status.code(), Some(4));
    let shown = String::from_utf8(run.stdout).unwrap();
    assert!(
        shown.len() <= 9_000 && shown.ends_with("100000\n"),
        "{}",
        shown.len()
    );

    let gemini = json!({"session_id": "g", "hook_event_name": "BeforeTool",
                        "tool_name": "run_shell_command", "tool_input": {"command": "seq 1 100000"}});
    let answer = hook("gemini", &store, &gemini).expect("a rewrite");
    let output = &answer["hookSpecificOutput"];
    assert_eq!(output["hookEventName"], "BeforeTool");
    let wrapped = output["tool_input"]["command"].as_str().unwrap();
    let run = Command::new("bash").args(["-c", wrapped]).output().unwrap();
    assert!(run.status.success());
    assert!(String::from_utf8_lossy(&run.stdout).contains("trimmed from"));
}

#[test]
fn a_hook_fed_something_else_says_so() {
    let out = ctxgc(&["hook", "claude-code"], b"not json");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not JSON"));
}

/// What the proxy filed for one caller, a reader holding that caller's key finds, and one
/// holding another key does not: the tenant is keyed as the proxy keys it.
#[test]
fn a_recall_with_a_key_reads_only_that_callers_sessions() {
    use std::io::{Read, Write as _};
    let (db, addr) = super::serve_setup("recall-tenants");
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let upstream = super::recording_upstream(Some(bodies.clone()));
    let mut proxy = super::spawn_serve("", &addr, &upstream, &db, Stdio::null());
    let log = build_log(3000, 1500);
    let body = json!({"model": "gpt-5", "messages": [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": log}
    ]})
    .to_string();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer sk-caller-a\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let sent = bodies.lock().unwrap().last().cloned().unwrap();
    let id = marker_id(&sent);
    let recall = |key_env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ctxgc"));
        command.args([
            "recall",
            &id,
            "--store",
            &format!("sqlite:{}", db.display()),
        ]);
        if let Some(key) = key_env {
            command
                .args(["--key-env", "CTXGC_TEST_KEY"])
                .env("CTXGC_TEST_KEY", key);
        }
        command.output().unwrap()
    };
    // The original is filed beside the request: give it a moment.
    let mut found = recall(Some("sk-caller-a"));
    for _ in 0..50 {
        if found.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        found = recall(Some("sk-caller-a"));
    }
    assert!(
        found.stdout == log.as_bytes(),
        "{}",
        String::from_utf8_lossy(&found.stderr)
    );
    let other = recall(Some("sk-caller-b"));
    assert!(!other.status.success());
    assert!(String::from_utf8_lossy(&other.stderr).contains(&format!("no original {id}")));
    assert!(
        recall(None).status.success(),
        "the local file is its owner's"
    );
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// The hooks' markers name the recall tool the agent has, as the proxy's do, and still read as
/// the same id.
#[test]
fn a_hooks_markers_name_the_agents_recall_tool() {
    let store = store_in("hook-named");
    let tool = "mcp__plugin_ctxgc_ctxgc__recall_tool_result";
    let named_trim = |input: &[u8]| {
        let args = [
            "trim",
            "--tool",
            "Bash",
            "--session",
            "s",
            "--store",
            &store,
        ];
        ctxgc(&[&args[..], &["--recall-with", tool]].concat(), input).stdout
    };
    let log = build_log(3000, 1500);
    let named = String::from_utf8(named_trim(log.as_bytes())).unwrap();
    let plain =
        String::from_utf8(ctxgc(&["trim", "--tool", "Bash"], log.as_bytes()).stdout).unwrap();
    let id = marker_id(&plain);
    assert!(named.contains(&format!("; id {id}, recall with {tool} ...]")));
    assert_eq!(named.replace(&format!(", recall with {tool}"), ""), plain);
    // An output under the limit passes whole, named nothing.
    assert_eq!(named_trim(b"ok\n"), b"ok\n");
}
