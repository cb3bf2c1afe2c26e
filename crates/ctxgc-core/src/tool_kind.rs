//! Where the context goes: each tool output's kind, by tool and, for shell tools, by command
//! (the replay lab's breakdown, and the relevance model's classes).

use crate::transcript::ToolCall;
use serde_json::Value;

/// Shell tools of the agents the replay knows (mini-swe-agent, SWE-agent, Claude Code, Codex,
/// OpenHands, Cursor-style agents), compared case-insensitively.
const SHELL_TOOLS: &[&str] = &[
    "bash",
    "shell",
    "exec_command",
    "local_shell",
    "shell_command",
    "execute_bash",
    "run_terminal_cmd",
    "terminal",
    "run_command",
];

/// The kind of a tool's output: the tool's name, or for a shell tool `shell: ` and what the
/// command does (file views, searches, test runs, installs, git, other).
pub fn tool_kind(call: &ToolCall) -> String {
    let name = call.name.to_ascii_lowercase();
    if !SHELL_TOOLS.contains(&name.as_str()) {
        return call.name.clone();
    }
    format!("shell: {}", command_kind(&shell_command(call)))
}

/// The command line of a shell call, whatever the argument shape (`command` or `cmd` as a
/// string or an argv array, Codex's `local_shell` action, or plain text).
fn shell_command(call: &ToolCall) -> String {
    let Ok(args) = serde_json::from_str::<Value>(&call.arguments) else {
        return call.arguments.clone();
    };
    let value = args
        .get("command")
        .or_else(|| args.get("cmd"))
        .or_else(|| args.get("action").and_then(|a| a.get("command")));
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(argv)) => {
            let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            // Codex runs `["bash", "-lc", "the command"]`.
            match argv.as_slice() {
                [shell, flag, rest @ ..]
                    if matches!(*shell, "bash" | "sh" | "zsh") && matches!(*flag, "-c" | "-lc") =>
                {
                    rest.join(" ")
                }
                _ => argv.join(" "),
            }
        }
        _ => call.arguments.clone(),
    }
}

/// What a shell command does, judged by the programs it runs.
pub fn command_kind(command: &str) -> &'static str {
    let lower = command.to_ascii_lowercase();
    const TESTS: &[&str] = &[
        "pytest",
        "py.test",
        "runtests",
        "unittest",
        "cargo test",
        "cargo nextest",
        "go test",
        "npm test",
        "npm run test",
        "yarn test",
        "pnpm test",
        "jest",
        "vitest",
        "tox",
        "make test",
        "make check",
        "manage.py test",
        "ctest",
        "mvn test",
        "gradle test",
        "rspec",
    ];
    const INSTALLS: &[&str] = &[
        "pip install",
        "pip3 install",
        "uv pip",
        "uv add",
        "npm install",
        "npm i ",
        "npm ci",
        "yarn add",
        "pnpm add",
        "apt-get install",
        "apt install",
        "cargo add",
        "cargo install",
        "poetry add",
        "poetry install",
        "conda install",
        "setup.py install",
        "setup.py develop",
        "go get",
        "gem install",
    ];
    if TESTS.iter().any(|t| lower.contains(t)) {
        return "test runs";
    }
    if INSTALLS.iter().any(|t| lower.contains(t)) {
        return "installs";
    }
    // The first program of the first pipeline stage, past `cd X &&`, env assignments and
    // wrappers.
    let programs: Vec<&str> = lower
        .split(['|', ';', '&', '\n', '('])
        .filter_map(|stage| {
            stage.split_whitespace().find(|w| {
                !w.contains('=')
                    && !matches!(*w, "sudo" | "timeout" | "env" | "time" | "nohup" | "xargs")
                    && w.parse::<f64>().is_err()
            })
        })
        .filter(|p| *p != "cd")
        .collect();
    let first = programs.first().copied().unwrap_or_default();
    let program = first.rsplit('/').next().unwrap_or(first);
    if program == "git" {
        return if lower.contains("git grep") || lower.contains("git ls-files") {
            "searches"
        } else {
            "git"
        };
    }
    match program {
        "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "find" | "fd" | "ls" | "tree"
        | "locate" => "searches",
        "cat" | "nl" | "sed" | "head" | "tail" | "less" | "more" | "bat" | "view" | "awk"
        | "open" => "file views",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args.into(),
            implicit: false,
        }
    }

    #[test]
    fn shell_commands_are_told_apart() {
        for (command, kind) in [
            (
                "nl -ba django/db/models/query.py | sed -n 200,260p",
                "file views",
            ),
            ("cd /testbed && cat setup.py", "file views"),
            ("grep -rn \"def parse\" src | head", "searches"),
            (
                "cd /repo && python -m pytest tests/test_x.py -q",
                "test runs",
            ),
            ("pip install -e .", "installs"),
            ("git diff HEAD~1", "git"),
            ("git grep -n foo", "searches"),
            ("python reproduce.py", "other"),
            ("timeout 30 /usr/bin/tail -n 50 build.log", "file views"),
        ] {
            assert_eq!(command_kind(command), kind, "{command}");
        }
    }

    #[test]
    fn argument_shapes_of_real_agents() {
        let bash = call("bash", r#"{"command": "ls -la"}"#);
        assert_eq!(tool_kind(&bash), "shell: searches");
        let codex = call("shell", r#"{"command": ["bash", "-lc", "cat README.md"]}"#);
        assert_eq!(tool_kind(&codex), "shell: file views");
        let exec = call("exec_command", r#"{"cmd": "cargo test -q"}"#);
        assert_eq!(tool_kind(&exec), "shell: test runs");
        let local = call(
            "local_shell",
            r#"{"type": "exec", "command": ["sed", "-n", "1,20p", "a.rs"]}"#,
        );
        assert_eq!(tool_kind(&local), "shell: file views");
        assert_eq!(tool_kind(&call("Read", "{}")), "Read");
    }
}
