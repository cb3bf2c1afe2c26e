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
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctxgc_core::{Message, Transcript};
use ctxgc_formats::{chat, wire};
use serde_json::{Value, json};

use super::{History, ReplayPolicy, Request};

/// How long an external policy may take to answer one request by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

struct Worker {
    child: Child,
    stdin: BufWriter<ChildStdin>,
    /// Lines of the command's stdout, read by a thread of their own so that a wait has a
    /// deadline.
    lines: Receiver<std::io::Result<String>>,
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
    timeout: Duration,
    idle: Mutex<Vec<Worker>>,
    errors: Mutex<Vec<String>>,
}

impl ExecPool {
    /// A pool for `command` (run with `sh -c`), answering each request within
    /// [`DEFAULT_TIMEOUT`].
    pub fn new(command: impl Into<String>) -> Arc<ExecPool> {
        ExecPool::with_timeout(command, DEFAULT_TIMEOUT)
    }

    /// A pool whose command must answer each request within `timeout` (else it is killed, the
    /// failure recorded and the request sent unchanged).
    pub fn with_timeout(command: impl Into<String>, timeout: Duration) -> Arc<ExecPool> {
        Arc::new(ExecPool {
            command: command.into(),
            timeout,
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
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let mut line = String::new();
                let read = stdout.read_line(&mut line);
                let done = !matches!(read, Ok(n) if n > 0);
                if send.send(read.map(|_| line)).is_err() || done {
                    break;
                }
            }
        });
        Ok(Worker {
            child,
            stdin,
            lines,
        })
    }

    /// Sends one request line and reads the answer line, on the session's own worker (taken
    /// from the idle ones, or started, on its first request): a stateful policy sees all of a
    /// session's requests in one process, in order. A worker that failed is dropped.
    fn call(&self, pinned: &mut Option<Worker>, line: &str) -> Result<String, String> {
        let mut worker = match pinned
            .take()
            .or_else(|| self.idle.lock().ok().and_then(|mut v| v.pop()))
        {
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
            match worker.lines.recv_timeout(self.timeout) {
                Ok(Ok(line)) if !line.is_empty() => Ok(line),
                Ok(Ok(_)) | Err(RecvTimeoutError::Disconnected) => {
                    Err("the command exited without answering".to_owned())
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(RecvTimeoutError::Timeout) => Err(format!(
                    "no answer within {} s (the command was stopped)",
                    self.timeout.as_secs_f64()
                )),
            }
        })();
        if answer.is_ok() {
            *pinned = Some(worker);
        }
        answer.map_err(|e| format!("`{}`: {e}", self.command))
    }

    fn release(&self, worker: Worker) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(worker);
        }
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
    worker: Option<Worker>,
    h: History,
    sent: Vec<Message>,
}

impl Drop for Exec {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            self.pool.release(worker);
        }
    }
}

impl Exec {
    /// The policy for one session, named `session` in every request line.
    pub fn new(name: String, pool: Arc<ExecPool>, window: u64, session: String) -> Exec {
        Exec {
            name,
            session,
            window,
            pool,
            worker: None,
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
        match self
            .pool
            .call(&mut self.worker, &line)
            .and_then(|a| Exec::parse(&a))
        {
            Ok(messages) => self.sent = messages,
            Err(e) => {
                self.pool.note(e);
                self.sent = self.h.messages.clone();
            }
        }
        Request {
            long_ttl: None,
            messages: &self.sent,
            breakpoints: vec![],
            stable_breakpoint: false,
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
        let mut p = Exec::new("blank".into(), pool.clone(), 32_000, "s".into());
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

    /// Defect guarded: `replay --policy exec:'sleep 100'` never timed out.
    #[test]
    fn a_command_that_never_answers_is_stopped_at_its_deadline() {
        let pool = ExecPool::with_timeout("sleep 100", Duration::from_millis(300));
        let mut p = Exec::new("sleepy".into(), pool.clone(), 32_000, "s".into());
        p.push(Message::text(Role::User, "task"));
        let started = std::time::Instant::now();
        assert_eq!(p.request().messages.len(), 1, "sent unchanged");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(
            pool.errors()[0].contains("no answer within 0.3 s"),
            "{:?}",
            pool.errors()
        );
    }

    #[test]
    fn failures_are_recorded_and_the_request_goes_unchanged() {
        let pool = ExecPool::new("echo not-json; sleep 5");
        let mut p = Exec::new("bad".into(), pool.clone(), 32_000, "s".into());
        p.push(Message::text(Role::User, "task"));
        assert_eq!(p.request().messages.len(), 1);
        assert!(
            pool.errors()[0].contains("answer is not JSON"),
            "{:?}",
            pool.errors()
        );
    }

    #[test]
    fn each_session_has_its_own_name_even_when_they_start_alike() {
        // A stateful external policy: it counts requests per session and answers with one user
        // message naming the session and its count. Two sessions with the same first message
        // used to share one name, so their counts ran together.
        let script = "import json,sys\nseen={}\nfor line in sys.stdin:\n    s=json.loads(line)['session']\n    seen[s]=seen.get(s,0)+1\n    print(json.dumps([{'role':'user','content':'%s#%d'%(s,seen[s])}]),flush=True)\n";
        let dir = std::env::temp_dir().join(format!("ctxgc-exec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("count.py");
        std::fs::write(&file, script).unwrap();
        let pool = ExecPool::new(format!("python3 {}", file.display()));
        let factory: crate::policies::PolicyFactory = {
            let pool = pool.clone();
            Box::new(move |c| {
                Box::new(Exec::new(
                    "count".into(),
                    pool.clone(),
                    c.window,
                    c.session.to_owned(),
                ))
            })
        };
        let session = |id: &str| Transcript {
            id: id.into(),
            messages: vec![
                Message::text(Role::User, "the same task"),
                Message::text(Role::Assistant, "one"),
                Message::text(Role::User, "more"),
                Message::text(Role::Assistant, "two"),
            ],
            ..Transcript::default()
        };
        for (source, t) in [session("a"), session("b")].iter().enumerate() {
            let run = crate::run::replay(source, t, &factory, 32_000, &[], None, false);
            assert_eq!(run.requests.len(), 2);
        }
        assert!(pool.errors().is_empty(), "{:?}", pool.errors());
        let names: Vec<String> = [0usize, 1]
            .iter()
            .map(|&i| {
                let t = session(["a", "b"][i]);
                let mut p = factory(&crate::policies::SessionContext {
                    window: 32_000,
                    session: &format!("{i}:{}", t.id),
                    transcript: &t,
                });
                p.push(t.messages[0].clone());
                p.request().messages[0].text_content()
            })
            .collect();
        // Each session counts from 1 on its own: the first two replays used names 0:a and 1:b.
        assert_eq!(names, ["0:a#3", "1:b#3"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
