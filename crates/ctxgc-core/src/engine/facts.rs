//! Facts about tool calls and outputs, computed (never written by a model): which file a call
//! reads or modifies, its command, its exit code, its first error line.
//!
//! They feed one-line abstracts, superseded-read detection and the summary's file lists, so they
//! must be cheap, deterministic and conservative: an unknown shape yields `None`, not a guess.

use crate::transcript::ToolCall;
use crate::trim::salient;

/// What a call does to a file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileAccess {
    /// Reads a file (a read tool, `cat`, `sed -n`, `head`, `nl`...).
    Read(String),
    /// Writes or edits a file (an edit tool, `sed -i`, `cat > f`, `tee f`...).
    Write(String),
    /// Runs a script (`python3 gen.py 480`): what it prints is not the file, so a run is not a
    /// read (reruns were pruned as stale reads); an edit of the script makes its earlier runs'
    /// output stale.
    Run(String),
}

impl FileAccess {
    /// The path.
    pub fn path(&self) -> &str {
        match self {
            FileAccess::Read(p) | FileAccess::Write(p) | FileAccess::Run(p) => p,
        }
    }
}

const PATH_KEYS: &[&str] = &[
    "path",
    "file_path",
    "filePath",
    "filename",
    "file",
    "target_file",
    "notebook_path",
];

/// The shell command of a call: a `command`/`cmd` string argument (or argv array).
pub fn command_of(call: &ToolCall) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(&call.arguments).ok()?;
    for key in ["command", "cmd", "script", "code"] {
        match value.get(key) {
            Some(serde_json::Value::String(s)) => return Some(s.clone()),
            Some(serde_json::Value::Array(argv)) => {
                let words: Vec<&str> = argv.iter().filter_map(|v| v.as_str()).collect();
                if !words.is_empty() {
                    return Some(words.join(" "));
                }
            }
            _ => {}
        }
    }
    None
}

/// The files a call reads or writes, in order of appearance.
pub fn file_accesses(call: &ToolCall) -> Vec<FileAccess> {
    let name = call.name.to_ascii_lowercase();
    let value: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
    let path = PATH_KEYS
        .iter()
        .find_map(|k| value.get(*k).and_then(|v| v.as_str()))
        .map(str::to_owned);
    let sub = value
        .get("command")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    // Structured file tools (Claude Code Read/Edit/Write, MCP filesystem, str_replace_editor).
    if let Some(path) = path {
        let writes = [
            "edit", "write", "create", "replace", "insert", "patch", "delete", "move",
        ];
        let is_write = writes.iter().any(|w| name.contains(w))
            || matches!(sub, "create" | "str_replace" | "insert" | "undo_edit");
        if is_write && sub != "view" {
            return vec![FileAccess::Write(path)];
        }
        // A search in a file or a listing of a directory shows matches, not the file.
        let searches = ["grep", "search", "find", "glob", "list"];
        if name
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word == "ls" || searches.iter().any(|s| word.starts_with(s)))
        {
            return Vec::new();
        }
        return vec![FileAccess::Read(path)];
    }
    if name == "apply_patch" {
        return patch_paths(&call.arguments)
            .into_iter()
            .map(FileAccess::Write)
            .collect();
    }
    match command_of(call) {
        Some(command) => {
            // SWE-agent's own commands: `open path`, `edit 3:5`, `create path`.
            let mut words = command.split_whitespace();
            match (words.next(), words.next()) {
                (Some("open"), Some(p)) => return vec![FileAccess::Read(unquote(p))],
                (Some("create"), Some(p)) => return vec![FileAccess::Write(unquote(p))],
                _ => {}
            }
            shell_accesses(&command)
        }
        None => Vec::new(),
    }
}

/// Arguments of structured read tools that limit a read to part of the file.
const RANGE_KEYS: &[&str] = &[
    "offset",
    "limit",
    "view_range",
    "start_line",
    "end_line",
    "startLine",
    "endLine",
    "line_start",
    "line_end",
    "lines",
    "range",
    "head",
    "tail",
];

/// Whether a call that reads a file shows it whole, so that a later read can stand for an
/// earlier one: a read with an offset or a line range (Claude Code's `offset`/`limit`,
/// `view_range`, `head`, `tail`, `sed -n 10,20p`, SWE-agent's `open path 120`) shows only
/// part, and a read of another part leaves the first one current.
pub fn reads_whole_file(call: &ToolCall) -> bool {
    let value: serde_json::Value = serde_json::from_str(&call.arguments).unwrap_or_default();
    if RANGE_KEYS
        .iter()
        .any(|k| value.get(*k).is_some_and(|v| !v.is_null()))
    {
        return false;
    }
    let Some(command) = command_of(call) else {
        return true;
    };
    let mut words = command.split_whitespace();
    if let (Some("open"), Some(_), Some(_)) = (words.next(), words.next(), words.next()) {
        return false;
    }
    !command.split(['\n', ';', '|', '&']).any(|segment| {
        let words: Vec<&str> = segment.split_whitespace().collect();
        match words.first().copied() {
            Some("head" | "tail" | "awk") => true,
            Some("sed") => !words.iter().any(|w| w.starts_with("-i")),
            Some("bat") => words
                .iter()
                .any(|w| w.starts_with("-r") || w.starts_with("--line-range")),
            _ => false,
        }
    })
}

fn unquote(word: &str) -> String {
    word.trim_matches(|c| c == '"' || c == '\'').to_owned()
}

fn looks_like_path(word: &str) -> bool {
    let w = word.trim_matches(|c| c == '"' || c == '\'');
    !w.is_empty()
        && !w.starts_with('-')
        && !w.contains(['$', '*', '|', '<', '>', '(', ')', '=', '{', '}', '`'])
        && (w.contains('/') || w.contains('.'))
        && w.chars().any(|c| c.is_ascii_alphabetic())
        && !w.starts_with("http")
}

/// File reads and writes of simple shell commands, one segment (`&&`, `;`, `|`) at a time.
fn shell_accesses(command: &str) -> Vec<FileAccess> {
    let mut out = Vec::new();
    let command = strip_heredocs(command);
    for segment in command.split(['\n', ';', '|', '&']) {
        let words: Vec<&str> = segment.split_whitespace().collect();
        // Redirections write files: `cmd > f`, `cat > f`, `>> f`.
        for (i, w) in words.iter().enumerate() {
            let target = if let Some(rest) = w.strip_prefix(">>").or_else(|| w.strip_prefix('>')) {
                if rest.is_empty() {
                    words.get(i + 1).copied()
                } else {
                    Some(rest)
                }
            } else {
                None
            };
            if let Some(t) = target.filter(|t| looks_like_path(t) && *t != "/dev/null") {
                out.push(FileAccess::Write(unquote(t)));
            }
        }
        let Some(&program) = words.first() else {
            continue;
        };
        let args: Vec<&str> = words[1..]
            .iter()
            .take_while(|w| !w.starts_with('>'))
            .copied()
            .collect();
        // sed and awk take their script as the first operand unless it comes with -e.
        let skip_script = matches!(program, "sed" | "awk") && !args.contains(&"-e");
        let operands: Vec<&str> = args
            .iter()
            .filter(|a| !a.starts_with('-'))
            .skip(usize::from(skip_script))
            .copied()
            .collect();
        let paths = || {
            operands
                .iter()
                .filter(|w| looks_like_path(w))
                .map(|w| unquote(w))
        };
        match program {
            "cat" | "head" | "tail" | "nl" | "less" | "more" | "bat" | "view" => {
                out.extend(paths().map(FileAccess::Read))
            }
            "sed" if args.iter().any(|a| a.starts_with("-i")) => {
                out.extend(paths().map(FileAccess::Write))
            }
            "sed" | "awk" => out.extend(paths().map(FileAccess::Read)),
            "tee" | "touch" => out.extend(paths().map(FileAccess::Write)),
            "python" | "python3" => {
                if let Some(script) = args
                    .iter()
                    .find(|a| a.ends_with(".py") && looks_like_path(a))
                {
                    out.push(FileAccess::Run(unquote(script)));
                }
            }
            _ => {}
        }
    }
    out.dedup();
    out
}

/// The command without heredoc bodies (data, not commands) and without the `<<'EOF'` words.
fn strip_heredocs(command: &str) -> String {
    let mut out = String::with_capacity(command.len());
    let mut delimiter: Option<String> = None;
    for line in command.lines() {
        if let Some(d) = &delimiter {
            if line.trim() == d {
                delimiter = None;
            }
            continue;
        }
        let mut kept = Vec::new();
        let mut words = line.split_whitespace().peekable();
        while let Some(w) = words.next() {
            if let Some(rest) = w.strip_prefix("<<") {
                let rest = rest.trim_start_matches('-');
                let word = if rest.is_empty() {
                    words.next().unwrap_or_default()
                } else {
                    rest
                };
                delimiter = Some(word.trim_matches(|c| c == '\'' || c == '"').to_owned());
                continue;
            }
            kept.push(w);
        }
        out.push_str(&kept.join(" "));
        out.push('\n');
    }
    out
}

/// Paths named by an `apply_patch` envelope (`*** Update File: path`).
fn patch_paths(arguments: &str) -> Vec<String> {
    let text = serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| {
            v.get("input")
                .or_else(|| v.get("patch"))
                .and_then(|p| p.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| arguments.to_owned());
    text.lines()
        .filter_map(|l| {
            ["*** Update File: ", "*** Add File: ", "*** Delete File: "]
                .iter()
                .find_map(|p| l.strip_prefix(p))
        })
        .map(|p| p.trim().to_owned())
        .collect()
}

/// The exit code an output reports: `<returncode>N</returncode>`, `exit status: N`,
/// `Exit code: N`, `exited with code N`, `Process exited with code N`.
pub fn exit_code(output: &str) -> Option<i64> {
    let head = &output[..floor_boundary(output, 300)];
    if let Some(rest) = head.trim_start().strip_prefix("<returncode>") {
        return rest.split("</returncode>").next()?.trim().parse().ok();
    }
    // Harnesses report the code at the end (`exit status: 101`, `[exit code 3]`) or, like
    // Claude Code (`Exit code 3`) and Codex (`Process exited with code 0`), at the start.
    let tail = &output[floor_boundary(output, output.len().saturating_sub(300))..];
    code_after_marker(tail, true).or_else(|| code_after_marker(head, false))
}

/// The number after an exit-code phrase in `window` (the last such phrase, or the first).
fn code_after_marker(window: &str, last: bool) -> Option<i64> {
    const MARKERS: &[&str] = &[
        "exit status",
        "exit code",
        "exited with code",
        "exited with status",
        "return code",
    ];
    let lower = window.to_ascii_lowercase();
    let mut found: Option<(usize, i64)> = None;
    for marker in MARKERS {
        let mut from = 0;
        while let Some(at) = lower[from..].find(marker) {
            let start = from + at + marker.len();
            from = start;
            let rest = lower[start..].trim_start_matches([' ', ':', '=']);
            let digits: String = rest
                .chars()
                .enumerate()
                .take_while(|&(i, c)| c.is_ascii_digit() || (i == 0 && c == '-'))
                .map(|(_, c)| c)
                .collect();
            let Ok(code) = digits.parse::<i64>() else {
                continue;
            };
            let better = match found {
                None => true,
                Some((seen, _)) => (last && start > seen) || (!last && start < seen),
            };
            if better {
                found = Some((start, code));
            }
        }
    }
    found.map(|(_, code)| code)
}

fn floor_boundary(s: &str, mut at: usize) -> usize {
    at = at.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// The most telling error line of an output: the exception a traceback ends with
/// (`ValueError: ...`), else the first compiler/test error (`error[E0308]`, `error:`, `FAILED`,
/// `panicked`), else the first error-like line that is not a bare `Traceback` header.
pub fn first_error(output: &str, max: usize) -> Option<String> {
    let mut lines: Vec<String> = Vec::new();
    salient::scan_lines(
        salient::SalientLines::Events,
        output.as_bytes(),
        0,
        1,
        max,
        |hit| {
            if hit.tier == salient::Tier::Error && lines.len() < 256 {
                lines.push(String::from_utf8_lossy(&hit.text).trim().to_owned());
            }
        },
    );
    let exception = |l: &str| {
        let head = l.split(':').next().unwrap_or_default();
        l.contains(':')
            && (head.ends_with("Error") || head.ends_with("Exception"))
            && head
                .chars()
                .all(|c| c.is_alphanumeric() || c == '.' || c == '_')
    };
    let strong = |l: &str| {
        let lower = l.to_ascii_lowercase();
        lower.starts_with("error")
            || lower.contains("error:")
            || l.contains("FAILED")
            || l.contains("panicked")
    };
    // `[exit code 1]`, `Exit code 3`: the harness's report, not an error line of the output.
    let exit_report = |l: &str| {
        let lower = l.trim_matches(['[', ']', ' ']).to_ascii_lowercase();
        [
            "exit code",
            "exit status",
            "process exited",
            "command exited",
            "return code",
        ]
        .iter()
        .any(|m| lower.starts_with(m))
            && lower.len() < 48
    };
    lines.retain(|l| !exit_report(l));
    lines
        .iter()
        .rev()
        .find(|l| exception(l))
        .or_else(|| lines.iter().find(|l| strong(l)))
        .or_else(|| lines.iter().find(|l| !l.starts_with("Traceback")))
        .cloned()
}

/// A search call's pattern (`pattern`, `query`, `regex`, or the pattern word of a grep/rg command).
pub fn search_pattern(call: &ToolCall) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(&call.arguments).ok()?;
    for key in ["pattern", "query", "regex", "search_term", "q"] {
        if let Some(s) = value.get(key).and_then(|v| v.as_str()) {
            return Some(s.to_owned());
        }
    }
    let command = command_of(call)?;
    let mut words = command.split_whitespace();
    let program = words.next()?;
    if matches!(
        program,
        "grep" | "rg" | "search_dir" | "search_file" | "ag" | "git"
    ) {
        return words
            .find(|w| !w.starts_with('-') && *w != "grep")
            .map(|w| w.trim_matches(|c| c == '"' || c == '\'').to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall::for_test(name, args)
    }

    #[test]
    fn structured_tools() {
        assert_eq!(
            file_accesses(&call("Read", serde_json::json!({"file_path": "/w/a.rs"}))),
            [FileAccess::Read("/w/a.rs".into())]
        );
        assert_eq!(
            file_accesses(&call(
                "Edit",
                serde_json::json!({"file_path": "/w/a.rs", "old_string": "x"})
            )),
            [FileAccess::Write("/w/a.rs".into())]
        );
        assert_eq!(
            file_accesses(&call(
                "str_replace_editor",
                serde_json::json!({"command": "view", "path": "a.py"})
            )),
            [FileAccess::Read("a.py".into())]
        );
        assert_eq!(
            file_accesses(&call(
                "str_replace_editor",
                serde_json::json!({"command": "str_replace", "path": "a.py"})
            )),
            [FileAccess::Write("a.py".into())]
        );
    }

    #[test]
    fn searches_in_a_file_do_not_read_it() {
        for name in [
            "Grep",
            "Glob",
            "LS",
            "search_files",
            "mcp__fs__list_directory",
        ] {
            assert_eq!(
                file_accesses(&call(name, serde_json::json!({"path": "/w/a.rs"}))),
                [],
                "{name}"
            );
        }
        assert_eq!(
            file_accesses(&call("read_file", serde_json::json!({"path": "/w/a.rs"}))),
            [FileAccess::Read("/w/a.rs".into())]
        );
    }

    #[test]
    fn partial_reads_are_told_from_whole_ones() {
        let whole = |name: &str, args: serde_json::Value| reads_whole_file(&call(name, args));
        assert!(whole("Read", serde_json::json!({"file_path": "a.rs"})));
        assert!(!whole(
            "Read",
            serde_json::json!({"file_path": "a.rs", "offset": 100, "limit": 50})
        ));
        assert!(whole(
            "Read",
            serde_json::json!({"file_path": "a.rs", "offset": null})
        ));
        assert!(!whole(
            "str_replace_editor",
            serde_json::json!({"command": "view", "path": "a.py", "view_range": [1, 40]})
        ));
        let bash = |c: &str| whole("bash", serde_json::json!({"command": c}));
        assert!(bash("cat -n src/lib.rs"));
        assert!(bash("nl -ba src/lib.rs"));
        assert!(!bash("sed -n '1,80p' src/lib.rs"));
        assert!(!bash("head -n 40 src/lib.rs"));
        assert!(!bash("cat src/lib.rs | tail -20"));
        assert!(!bash("open src/lib.rs 120"));
        assert!(bash("open src/lib.rs"));
    }

    #[test]
    fn shell_commands() {
        let bash = |c: &str| file_accesses(&call("bash", serde_json::json!({"command": c})));
        assert_eq!(
            bash("cat src/lib.rs"),
            [FileAccess::Read("src/lib.rs".into())]
        );
        assert_eq!(
            bash("sed -n '1,80p' django/db/models.py"),
            [FileAccess::Read("django/db/models.py".into())]
        );
        assert_eq!(
            bash("sed -i 's/a/b/' x/y.py"),
            [FileAccess::Write("x/y.py".into())]
        );
        assert_eq!(
            bash("cat <<'EOF' > repro.py\nimport os\nEOF\npython repro.py"),
            [
                FileAccess::Write("repro.py".into()),
                FileAccess::Run("repro.py".into())
            ]
        );
        // A run prints what the script does, not the script: it is no read.
        assert_eq!(
            bash("python3 repro.py && cat out.txt"),
            [
                FileAccess::Run("repro.py".into()),
                FileAccess::Read("out.txt".into())
            ]
        );
        assert_eq!(
            bash("python3 gen.py 480 step07"),
            [FileAccess::Run("gen.py".into())]
        );
        assert!(bash("ls -la").is_empty());
        assert!(bash("grep -rn foo . > /dev/null").is_empty());
    }

    #[test]
    fn exit_codes_and_errors() {
        assert_eq!(
            exit_code("<returncode>1</returncode>\n<output>x</output>"),
            Some(1)
        );
        assert_eq!(exit_code("lots\nexit status: 101\n"), Some(101));
        assert_eq!(exit_code("Process exited with code 0"), Some(0));
        assert_eq!(exit_code("no code"), None);
        // The shapes real harnesses write, at the end or at the start.
        assert_eq!(exit_code("1\n2\n3\n[exit code 0]"), Some(0));
        assert_eq!(
            exit_code("Exit code 3\nError: disk quota exceeded"),
            Some(3)
        );
        assert_eq!(
            exit_code(
                "Chunk ID: 8f\nWall time: 0.1 seconds\nProcess exited with code 2\nOutput:\nx"
            ),
            Some(2)
        );
        assert_eq!(exit_code("make: *** [all] Error 2\nexit status 2"), Some(2));
        assert_eq!(exit_code("command exited with status -1"), Some(-1));
        assert_eq!(first_error("1\n2\n[exit code 1]", 120), None);
        assert_eq!(
            first_error("Exit code 3\nERROR: disk quota exceeded", 120).as_deref(),
            Some("ERROR: disk quota exceeded")
        );
        assert_eq!(
            first_error(
                "ok\nwarning: w\nerror[E0308]: mismatched types\nerror: x",
                100
            )
            .as_deref(),
            Some("error[E0308]: mismatched types")
        );
        let traceback = "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n    with transaction.mark_for_rollback_on_error():\ndjango.db.utils.OperationalError: no such table: person\n";
        assert_eq!(
            first_error(traceback, 100).as_deref(),
            Some("django.db.utils.OperationalError: no such table: person")
        );
    }

    #[test]
    fn search_patterns() {
        assert_eq!(
            search_pattern(&call("Grep", serde_json::json!({"pattern": "fn parse"}))).as_deref(),
            Some("fn parse")
        );
        assert_eq!(
            search_pattern(&call(
                "bash",
                serde_json::json!({"command": "grep -rn \"separability\" astropy"})
            ))
            .as_deref(),
            Some("separability")
        );
    }
}
