//! Aider's chat history, `.aider.chat.history.md` in each project: markdown appended as the
//! chat goes. Each run starts with `# aider chat started at YYYY-MM-DD HH:MM:SS`; what the user
//! typed is written as `#### ` lines, the model's replies as plain text, and what Aider itself
//! printed (its banner, applied edits, commits, command output) as `> ` quotes. After a reply
//! Aider prints its usage: `Tokens: 2.1k sent, 1.2k cache write, 800 cache hit, 150 received.`
//! (rounded as Aider shows it: to 100 tokens between 1k and 10k, to 1k above).
//!
//! A run becomes a text session: the user's messages and the replies. A line the user typed
//! that is an Aider command (`/add`, `/run`, ...) is not sent to the model and is left out,
//! except `/ask`, `/code` and `/architect`, whose text is. The start time is Aider's local time,
//! read as UTC. The files Aider adds to the chat and its repository map are sent with each
//! request but not written to the history: the replay cannot count them.

use ctxgc_core::{Message, RecordedUsage, Recording, Role, Transcript};

use crate::FormatError;

const RUN_START: &str = "# aider chat started at ";

/// Whether a text is an Aider chat history.
pub(crate) fn is_history(text: &str) -> bool {
    text.trim_start_matches('\u{feff}')
        .trim_start()
        .starts_with(RUN_START)
}

/// Imports every run of a history that holds a conversation: `id#N` for the N-th run.
pub(crate) fn import(text: &str, id: &str) -> Result<Vec<Transcript>, FormatError> {
    let mut runs: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.lines() {
        if let Some(start) = line.strip_prefix(RUN_START) {
            runs.push((start.trim().to_owned(), Vec::new()));
        } else if let Some((_, lines)) = runs.last_mut() {
            lines.push(line);
        }
    }
    let mut out = Vec::new();
    for (n, (start, lines)) in runs.iter().enumerate() {
        if let Some(mut t) = run(start, lines) {
            t.id = format!("{id}#{}", n + 1);
            out.push(t);
        }
    }
    if out.is_empty() {
        return Err(FormatError::shape(
            "file",
            "an Aider history with no conversation in it (no message answered by the model)",
        ));
    }
    Ok(out)
}

#[derive(PartialEq)]
enum Kind {
    User,
    Reply,
    Quote,
}

fn run(start: &str, lines: &[&str]) -> Option<Transcript> {
    let start_ms = super::time::rfc3339_ms(&format!("{}Z", start.replacen(' ', "T", 1)));
    let mut messages: Vec<Message> = Vec::new();
    let mut current: Option<(Kind, String)> = None;
    let flush = |messages: &mut Vec<Message>, current: &mut Option<(Kind, String)>| {
        let Some((kind, text)) = current.take() else {
            return;
        };
        let text = text.trim().to_owned();
        match kind {
            Kind::User => {
                if let Some(sent) = user_text(&text) {
                    messages.push(Message::text(Role::User, sent));
                }
            }
            Kind::Reply if !text.is_empty() => messages.push(Message::text(Role::Assistant, text)),
            Kind::Quote => {
                if let Some(usage) = text.lines().find_map(usage_line)
                    && let Some(reply) = messages
                        .iter_mut()
                        .rev()
                        .find(|m| m.role == Role::Assistant)
                    && reply.usage.is_none()
                {
                    reply.usage = Some(usage);
                }
            }
            _ => {}
        }
    };
    for line in lines {
        // Aider ends the lines it writes with two spaces (a markdown line break).
        let (kind, body) = if let Some(user) = line.strip_prefix("#### ") {
            (Kind::User, user.trim_end())
        } else if *line == "####" {
            (Kind::User, "")
        } else if let Some(quote) = line.strip_prefix("> ").or_else(|| line.strip_prefix('>')) {
            (Kind::Quote, quote.trim_end())
        } else {
            (Kind::Reply, *line)
        };
        // A blank line between quotes or user lines belongs to what surrounds it.
        if line.trim().is_empty()
            && let Some((_, text)) = &mut current
        {
            text.push('\n');
            continue;
        }
        match &mut current {
            Some((k, text)) if *k == kind => {
                text.push('\n');
                text.push_str(body);
            }
            _ => {
                flush(&mut messages, &mut current);
                current = Some((kind, body.to_owned()));
            }
        }
    }
    flush(&mut messages, &mut current);
    if !messages.iter().any(|m| m.role == Role::Assistant) {
        return None;
    }
    let mut sent_ms = vec![None; messages.len()];
    sent_ms[0] = start_ms;
    Some(Transcript {
        messages,
        recording: Some(Recording {
            client: "aider".into(),
            sent_ms,
            ..Recording::default()
        }),
        ..Transcript::default()
    })
}

/// What the model receives of what the user typed: nothing for an Aider command.
fn user_text(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    let Some(command) = text.strip_prefix('/') else {
        return Some(text.to_owned());
    };
    let (name, rest) = command
        .split_once(char::is_whitespace)
        .unwrap_or((command, ""));
    matches!(name, "ask" | "code" | "architect")
        .then(|| rest.trim().to_owned())
        .filter(|s| !s.is_empty())
}

/// `Tokens: 2.1k sent, 1.2k cache write, 800 cache hit, 150 received. Cost: ...`
fn usage_line(line: &str) -> Option<RecordedUsage> {
    let rest = line.trim().strip_prefix("Tokens: ")?;
    let rest = rest.split(". Cost").next()?.trim_end_matches('.');
    let mut usage = RecordedUsage::default();
    let mut any = false;
    for item in rest.split(", ") {
        let (number, what) = item.split_once(' ')?;
        let n = tokens(number)?;
        match what {
            "sent" => usage.prompt_tokens = n,
            "received" => usage.completion_tokens = n,
            "cache hit" => usage.cached_tokens = n,
            "cache write" => usage.cache_write_tokens = n,
            _ => continue,
        }
        any = true;
    }
    (any && usage.prompt_tokens > 0).then_some(usage)
}

/// `850`, `2.1k`, `12k`, `1.2M`.
fn tokens(text: &str) -> Option<u64> {
    let (digits, scale) = match text.chars().last()? {
        'k' => (&text[..text.len() - 1], 1e3),
        'M' => (&text[..text.len() - 1], 1e6),
        _ => (text, 1.0),
    };
    let value: f64 = digits.parse().ok()?;
    (value >= 0.0).then(|| (value * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-written in the format Aider 0.8x writes (Aider needs a git repository and a model
    /// that writes edits in its own formats, which the scripted upstream does not).
    #[test]
    fn runs_become_text_sessions_with_their_usage() {
        let history = "\n# aider chat started at 2025-03-01 09:30:00\n\n> /usr/bin/aider --model sonnet  \n> Aider v0.82.0  \n\n#### /add app.py  \n> Added app.py to the chat  \n\n#### why does the build fail?  \n#### it says missing import  \n\nThe import of `os` is missing.\n\napp.py\n```python\nimport os\n```\n\n> Tokens: 2.1k sent, 1.5k cache hit, 85 received. Cost: $0.0084 message, $0.0084 session.  \n> Applied edit to app.py  \n\n#### /ask and now?  \n\nIt builds.\n\n> Tokens: 12k sent, 150 received.  \n\n# aider chat started at 2025-03-02 10:00:00\n\n> Aider v0.82.0  \n";
        assert!(is_history(history));
        let runs = import(history, "proj").unwrap();
        assert_eq!(
            runs.len(),
            1,
            "a run without a conversation is not a session"
        );
        let t = &runs[0];
        assert_eq!(t.id, "proj#1");
        let roles: Vec<Role> = t.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::User, Role::Assistant, Role::User, Role::Assistant]
        );
        assert_eq!(
            t.messages[0].text_content(),
            "why does the build fail?\nit says missing import"
        );
        assert!(t.messages[1].text_content().ends_with("```"));
        assert_eq!(t.messages[2].text_content(), "and now?");
        let u = t.messages[1].usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.cached_tokens, u.completion_tokens),
            (2100, 1500, 85)
        );
        assert_eq!(t.messages[3].usage.unwrap().prompt_tokens, 12_000);
        assert_eq!(
            t.recording.as_ref().unwrap().sent_ms[0],
            Some(1_740_821_400_000)
        );
    }
}
