//! External policies: `exec:CMD`.
//!
//! The command is started once per replay worker (`sh -c CMD`) and kept running. For each
//! request it reads one line on stdin, a JSON object
//! `{"session": ID, "window": TOKENS, "messages": [Chat Completions messages]}`, and must answer
//! with one line on stdout: the JSON array of Chat Completions messages to send. The history it
//! receives is always the full verbatim conversation (the agent's), so stateless compressors fit.
//! A failure (exit, bad JSON) is recorded and the messages are sent unchanged for that request;
//! the replay reports the failures.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use ctxgc_core::{Message, Transcript};
use ctxgc_formats::{chat, wire};
use serde_json::{Value, json};

use super::{History, ReplayPolicy, Request};

struct Worker {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Running instances of one external command, shared by the replay's threads.
pub struct ExecPool {
    command: String,
    idle: Mutex<Vec<Worker>>,
    errors: Mutex<Vec<String>>,
}

impl ExecPool {
    /// A pool for `command` (run with `sh -c`).
    pub fn new(command: impl Into<String>) -> Arc<ExecPool> {
        Arc::new(ExecPool {
            command: command.into(),
            idle: Mutex::new(Vec::new()),
            errors: Mutex::new(Vec::new()),
        })
    }

    /// Failures so far (at most the first 20).
    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().map(|e| e.clone()).unwrap_or_default()
    }

    fn spawn(&self) -> Result<Worker, String> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", self.command))?;
        let stdin = BufWriter::new(child.stdin.take().ok_or("no stdin")?);
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        Ok(Worker {
            child,
            stdin,
            stdout,
        })
    }

    /// Sends one request line and reads the answer line.
    fn call(&self, line: &str) -> Result<String, String> {
        let mut worker = match self.idle.lock().ok().and_then(|mut v| v.pop()) {
            Some(w) => w,
            None => self.spawn()?,
        };
        let answer = (|| {
            worker
                .stdin
                .write_all(line.as_bytes())
                .map_err(|e| e.to_string())?;
            worker.stdin.write_all(b"\n").map_err(|e| e.to_string())?;
            worker.stdin.flush().map_err(|e| e.to_string())?;
            let mut out = String::new();
            let n = worker
                .stdout
                .read_line(&mut out)
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the command exited without answering".to_owned());
            }
            Ok(out)
        })();
        if answer.is_ok()
            && let Ok(mut idle) = self.idle.lock()
        {
            idle.push(worker);
        }
        answer.map_err(|e| format!("`{}`: {e}", self.command))
    }

    fn note(&self, error: String) {
        if let Ok(mut errors) = self.errors.lock()
            && errors.len() < 20
        {
            errors.push(error);
        }
    }
}

/// A policy run by an external command.
pub struct Exec {
    name: String,
    session: String,
    window: u64,
    pool: Arc<ExecPool>,
    h: History,
    sent: Vec<Message>,
}

impl Exec {
    /// The policy for one session, named `session` in every request line.
    pub fn new(name: String, pool: Arc<ExecPool>, window: u64, session: String) -> Exec {
        Exec {
            name,
            session,
            window,
            pool,
            h: History::default(),
            sent: Vec::new(),
        }
    }

    fn parse(answer: &str) -> Result<Vec<Message>, String> {
        let value: Value =
            serde_json::from_str(answer.trim()).map_err(|e| format!("answer is not JSON: {e}"))?;
        let items = value
            .as_array()
            .ok_or("answer is not a JSON array of messages")?;
        let mut t = Transcript::default();
        for (i, m) in items.iter().enumerate() {
            t.messages.push(
                chat::message_from_chat(m, &format!("answer[{i}]")).map_err(|e| e.to_string())?,
            );
        }
        ctxgc_formats::resolve_tool_names(&mut t);
        Ok(t.messages)
    }
}

impl ReplayPolicy for Exec {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn push(&mut self, m: Message) {
        self.h.push(m);
    }
    fn insert_tool_results(&mut self, results: Vec<Message>) {
        results.into_iter().for_each(|m| self.h.push(m));
    }
    fn request(&mut self) -> Request<'_> {
        let line = json!({"session": self.session, "window": self.window, "messages": wire::chat_messages(&self.h.messages)}).to_string();
        match self.pool.call(&line).and_then(|a| Exec::parse(&a)) {
            Ok(messages) => self.sent = messages,
            Err(e) => {
                self.pool.note(e);
                self.sent = self.h.messages.clone();
            }
        }
        Request {
            messages: &self.sent,
            breakpoints: vec![],
            event: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxgc_core::Role;

    #[test]
    fn a_command_that_drops_tool_outputs_is_replayed() {
        // A tiny external policy in shell + sed: it blanks every tool message's content.
        let cmd = r#"while IFS= read -r line; do printf '%s\n' "$line" | sed -e 's/^.*"messages"://' -e 's/}$//' -e 's/"role":"tool","tool_call_id":"\([^"]*\)","content":"[^"]*"/"role":"tool","tool_call_id":"\1","content":"gone"/g'; done"#;
        let pool = ExecPool::new(cmd);
        let mut p = Exec::new("blank".into(), pool.clone(), 32_000);
        p.push(Message::text(Role::User, "task"));
        p.push(Message {
            role: Role::Assistant,
            content: vec![ctxgc_core::Block::ToolCall(ctxgc_core::ToolCall {
                id: "c1".into(),
                name: "bash".into(),
                arguments: "{}".into(),
                implicit: false,
            })],
            usage: None,
        });
        p.insert_tool_results(vec![Message::tool_result(
            "c1",
            Some("bash".into()),
            "long output",
            false,
        )]);
        let request = p.request();
        assert_eq!(request.messages.len(), 3);
        assert_eq!(
            request.messages[2].tool_results().next().unwrap().text(),
            "gone"
        );
        assert!(pool.errors().is_empty(), "{:?}", pool.errors());
    }

    #[test]
    fn failures_are_recorded_and_the_request_goes_unchanged() {
        let pool = ExecPool::new("echo not-json; sleep 5");
        let mut p = Exec::new("bad".into(), pool.clone(), 32_000);
        p.push(Message::text(Role::User, "task"));
        assert_eq!(p.request().messages.len(), 1);
        assert!(
            pool.errors()[0].contains("answer is not JSON"),
            "{:?}",
            pool.errors()
        );
    }
}
