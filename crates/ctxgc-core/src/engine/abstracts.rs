//! One-line abstracts of pruned tool outputs, made per tool from the call and the original
//! output (no LLM):
//!
//! ```text
//! [bash] ran `cargo test -p core` -> exit 101, 847 lines, first error: error[E0308]...; id r-...
//! [read_file] src/lib.rs, 400 lines (12,004 chars); id r-...
//! [grep] "fn parse" -> 37 matches in 9 files; id r-...
//! [deploy] {"env":"prod"} (2,113 chars); id r-...
//! ```

use serde::{Deserialize, Serialize};

use crate::content_id::ContentId;
use crate::engine::facts;
use crate::transcript::ToolCall;
use crate::trim::lines::group;
use crate::trim::search::{looks_like_search, match_path};

/// What the engine remembers about an original tool output, computed once at insertion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResultMeta {
    /// The original's id (recall key).
    pub id: ContentId,
    /// Lines of the original.
    pub lines: u64,
    /// Chars of the original.
    pub chars: u64,
    /// The exit code it reports, if any.
    pub exit_code: Option<i64>,
    /// Its first error line, for terminal-like output.
    pub first_error: Option<String>,
    /// Matches and files, for grep-like output.
    pub search: Option<(u64, u64)>,
    /// Where the client saved the whole output, when what it sent is its own preview (Claude
    /// Code's `<persisted-output>`): the agent can read it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved_to: Option<String>,
}

impl ResultMeta {
    /// Computes the facts of an original output.
    pub fn of(original: &str) -> ResultMeta {
        // An envelope (`{"output": ..., "exit_code": 1, "error": null}`) is read inside: its
        // own exit code and error field, its text for the rest (its `"error": null` key read
        // as an error line once).
        let unwrapped = crate::trim::envelope::unwrap(original);
        let body = unwrapped.as_ref().map_or(original, |u| u.text.as_str());
        ResultMeta {
            id: ContentId::of(original.as_bytes()),
            lines: original.lines().count() as u64,
            chars: original.chars().count() as u64,
            exit_code: unwrapped
                .as_ref()
                .and_then(|u| u.exit_code)
                .or_else(|| facts::exit_code(body)),
            first_error: facts::first_error(body, 120).or_else(|| {
                unwrapped
                    .as_ref()
                    .and_then(|u| u.error.as_deref())
                    .map(|e| clip_one_line(e, 120))
            }),
            search: looks_like_search(original).then(|| search_counts(original)),
            saved_to: client_saved_path(original),
        }
    }
}

/// Claude Code sends an output over about 30 KB as a preview inside `<persisted-output>`, with
/// the path of the file that holds it whole.
fn client_saved_path(original: &str) -> Option<String> {
    const SAVED: &str = "Full output saved to: ";
    let start = original.trim_start();
    if !start.starts_with("<persisted-output>") {
        return None;
    }
    let head = &start[..start.len().min(1_024)];
    let at = head.find(SAVED)? + SAVED.len();
    let path = head[at..].lines().next()?.trim();
    (!path.is_empty() && path.len() <= 512).then(|| path.to_owned())
}

fn search_counts(text: &str) -> (u64, u64) {
    let mut files: Vec<&str> = Vec::new();
    let mut matches = 0;
    for path in text.lines().filter_map(match_path) {
        matches += 1;
        if !files.contains(&path) {
            files.push(path);
        }
    }
    (matches, files.len() as u64)
}

/// Clips to `max` chars on a char boundary, one line, with an ellipsis when cut.
pub fn clip_one_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let multi = text.trim().lines().count() > 1;
    if line.chars().count() <= max && !multi {
        return line.to_owned();
    }
    let clipped: String = line.chars().take(max).collect();
    format!("{clipped}…")
}

/// The abstract of a pruned output; `way`, the way back the agent has, is named after the id.
pub fn abstract_line(
    tool: &str,
    call: Option<&ToolCall>,
    meta: &ResultMeta,
    way: Option<&crate::agent_tools::RecallWay>,
) -> String {
    let mut line = abstract_of_call(tool, call, meta);
    if let Some(way) = way {
        // Every abstract ends with its id.
        line.push_str(&way.suffix(meta.id));
    }
    match &meta.saved_to {
        Some(path) => format!("{line}; the client saved it whole to {path}"),
        None => line,
    }
}

fn abstract_of_call(tool: &str, call: Option<&ToolCall>, meta: &ResultMeta) -> String {
    let name = if tool.is_empty() { "tool" } else { tool };
    let id = meta.id;
    let size = format!("{} chars", group(meta.chars));
    if let Some(call) = call {
        if let Some((matches, files)) = meta.search {
            let pattern = facts::search_pattern(call)
                .map(|p| format!("\"{}\" ", clip_one_line(&p, 60)))
                .unwrap_or_default();
            return format!(
                "[{name}] {pattern}-> {} matches in {} files; id {id}",
                group(matches),
                group(files)
            );
        }
        let accesses = facts::file_accesses(call);
        let command = facts::command_of(call);
        let read_path = match (accesses.as_slice(), &command) {
            ([facts::FileAccess::Read(path)], None) => Some(path),
            ([facts::FileAccess::Read(path)], Some(_)) if is_plain_read(call) => Some(path),
            _ => None,
        };
        if let Some(path) = read_path {
            let verb = if command.is_some() { "read " } else { "" };
            return format!(
                "[{name}] {verb}{path}, {} ({size}); id {id}",
                lines(meta.lines)
            );
        }
        if let Some(command) = command {
            let mut out = format!("[{name}] ran `{}` ->", clip_one_line(&command, 80));
            if let Some(code) = meta.exit_code {
                out.push_str(&format!(" exit {code},"));
            }
            out.push_str(&format!(" {}", lines(meta.lines)));
            // A clean exit means error words in the output are content (code, logs), not a failure.
            if let Some(error) = meta
                .first_error
                .as_ref()
                .filter(|_| meta.exit_code != Some(0))
            {
                out.push_str(&format!(", first error: {}", clip_one_line(error, 100)));
            }
            out.push_str(&format!("; id {id}"));
            return out;
        }
        let args = clip_one_line(&call.arguments, 80);
        return format!("[{name}] {args} ({size}); id {id}");
    }
    format!("[{name}] ({size}); id {id}")
}

fn lines(n: u64) -> String {
    format!("{} {}", group(n), if n == 1 { "line" } else { "lines" })
}

/// A shell command that only displays a file: `cat f`, `sed -n 1,80p f`, `head f`, or a
/// pipeline of such commands (`nl -ba f | sed -n '10,90p'`).
fn is_plain_read(call: &ToolCall) -> bool {
    facts::command_of(call).is_some_and(|c| {
        !c.contains("&&")
            && !c.contains(';')
            && !c.contains('>')
            && c.split('|').all(|stage| {
                let program = stage.split_whitespace().next().unwrap_or_default();
                let edits = program == "sed" && stage.contains(" -i");
                matches!(
                    program,
                    "cat" | "sed" | "head" | "tail" | "nl" | "open" | "view"
                ) && !edits
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The abstract with no way back named (the lab's, and the proxy's without one).
    fn abstract_of(tool: &str, call: Option<&ToolCall>, meta: &ResultMeta) -> String {
        abstract_line(tool, call, meta, None)
    }

    #[test]
    fn an_abstract_names_the_way_back_after_its_id() {
        let meta = ResultMeta::of("error: boom\n");
        let way = crate::agent_tools::RecallWay::Tool("mcp__ctxgc__recall_tool_result".into());
        let line = abstract_line("bash", None, &meta, Some(&way));
        assert!(
            line.ends_with(&format!(
                "; id {}, recall with mcp__ctxgc__recall_tool_result",
                meta.id
            )),
            "{line}"
        );
        assert_eq!(
            line.replace(", recall with mcp__ctxgc__recall_tool_result", ""),
            abstract_of("bash", None, &meta)
        );
    }
    use serde_json::json;

    fn call(name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall::for_test(name, args)
    }

    /// A pruned Claude Code preview says where the client keeps the whole output, so the
    /// agent can read it there; an ordinary output that mentions the phrase does not.
    #[test]
    fn an_abstract_of_a_client_preview_names_the_file_that_holds_it_whole() {
        let preview = "<persisted-output>\nOutput too large (48.2KB). Full output saved to: \
                       /home/dev/.claude/projects/p/tool-results/b1.txt\n\nPreview (first 2KB):\n\
                       running 812 tests\n</persisted-output>";
        let meta = ResultMeta::of(preview);
        assert_eq!(
            meta.saved_to.as_deref(),
            Some("/home/dev/.claude/projects/p/tool-results/b1.txt")
        );
        let c = call("Bash", json!({"command": "cargo test"}));
        let line = abstract_of("Bash", Some(&c), &meta);
        assert!(line.starts_with("[Bash] ran `cargo test` ->"), "{line}");
        assert!(
            line.ends_with(
                "; the client saved it whole to /home/dev/.claude/projects/p/tool-results/b1.txt"
            ),
            "{line}"
        );
        let echoed = ResultMeta::of("grep says: Full output saved to: /tmp/x\n");
        assert_eq!(echoed.saved_to, None);
    }

    #[test]
    fn display_pipelines_are_reads() {
        let c = call(
            "bash",
            json!({"command": "nl -ba django/forms/models.py | sed -n '566,650p'"}),
        );
        assert_eq!(
            facts::file_accesses(&c),
            [facts::FileAccess::Read("django/forms/models.py".into())]
        );
        assert!(is_plain_read(&c));
        let line = abstract_of("bash", Some(&c), &ResultMeta::of("x\n"));
        assert!(
            line.starts_with("[bash] read django/forms/models.py, 1 line"),
            "{line}"
        );
    }

    #[test]
    fn abstracts_say_what_the_output_was() {
        // A clean run whose harness appends `[exit code 0]`: no "first error".
        let seq: String =
            (1..=2222).map(|i| format!("{i}\n")).collect::<String>() + "[exit code 0]";
        let line = abstract_of(
            "bash",
            Some(&call("bash", json!({"command": "seq 1 200000"}))),
            &ResultMeta::of(&seq),
        );
        assert!(line.contains("exit 0, 2,223 lines"), "{line}");
        assert!(!line.contains("first error"), "{line}");
        // A timestamped log is not grep output.
        let log: String = (0..149)
            .map(|i| {
                format!(
                    "2025-12-02 09:{:02}:{:02},1 INFO served {i}\n",
                    i / 60,
                    i % 60
                )
            })
            .collect();
        let line = abstract_of(
            "bash",
            Some(&call("bash", json!({"command": "cat big.log"}))),
            &ResultMeta::of(&log),
        );
        assert!(!line.contains("matches"), "{line}");
    }

    #[test]
    fn abstracts_per_tool() {
        let log = "   Compiling a\nerror[E0308]: mismatched types\n  --> src/x.rs:3:5\nexit status: 101\n";
        let meta = ResultMeta::of(log);
        insta::assert_snapshot!(
            [
                abstract_of("bash", Some(&call("bash", json!({"command": "cargo test -p core"}))), &meta),
                abstract_of("read_file", Some(&call("read_file", json!({"path": "src/lib.rs"}))), &ResultMeta::of(&"x\n".repeat(400))),
                abstract_of("bash", Some(&call("bash", json!({"command": "sed -n '1,80p' a/b.py"}))), &ResultMeta::of("l\n")),
                abstract_of(
                    "grep",
                    Some(&call("grep", json!({"pattern": "fn parse"}))),
                    &ResultMeta::of("a.rs:1:fn parse\na.rs:9:fn parse2\nb.rs:3:fn parse\n")
                ),
                abstract_of("deploy", Some(&call("deploy", json!({"env": "prod"}))), &ResultMeta::of("ok")),
                abstract_of("mystery", None, &ResultMeta::of("ok")),
            ]
            .join("\n"),
            @r#"
        [bash] ran `cargo test -p core` -> exit 101, 4 lines, first error: error[E0308]: mismatched types; id r-b141c818b2c7ad5a
        [read_file] src/lib.rs, 400 lines (800 chars); id r-e07791a136765ef9
        [bash] read a/b.py, 1 line (2 chars); id r-4fdf79fb6f0c4eb5
        [grep] "fn parse" -> 3 matches in 2 files; id r-e9f3c7650a6aa45a
        [deploy] {"env":"prod"} (2 chars); id r-38af4cfed25a8222
        [mystery] (2 chars); id r-38af4cfed25a8222
        "#
        );
    }
}
