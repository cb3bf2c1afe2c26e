//! Where each agent keeps its history on Linux, macOS and Windows, and the session files found
//! there.
//!
//! Finding reads folder listings and file metadata only, and lists only files named as the
//! agent names its sessions: the credential files that share these folders (`auth.json`,
//! `oauth_creds.json`, `.credentials.json`, `.env`, `secrets.json`) are never listed, so never
//! opened by the import that follows.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The agents whose history can be found, by the names `--agent` takes.
pub const AGENTS: &[&str] = &[
    "claude-code",
    "codex",
    "gemini-cli",
    "hermes",
    "opencode",
    "cline",
    "roo-code",
    "aider",
];

/// The operating system whose layout to follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    /// Linux and the other Unix systems (XDG folders).
    Linux,
    /// macOS (`~/Library/Application Support`).
    MacOs,
    /// Windows (`%APPDATA%`).
    Windows,
}

/// The home folder and the environment variables that move an agent's folder.
#[derive(Debug, Clone)]
pub struct Home {
    /// The user's home folder.
    pub home: PathBuf,
    /// The operating system.
    pub os: Os,
    /// The working folder (Aider keeps its history in each project).
    pub cwd: Option<PathBuf>,
    /// `(name, value)` of the variables that were set, among `CLAUDE_CONFIG_DIR`,
    /// `CODEX_HOME`, `GEMINI_CLI_HOME`, `HERMES_HOME`, `XDG_DATA_HOME`, `XDG_CONFIG_HOME`,
    /// `APPDATA`.
    pub vars: Vec<(String, PathBuf)>,
}

const VARS: &[&str] = &[
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "GEMINI_CLI_HOME",
    "HERMES_HOME",
    "XDG_DATA_HOME",
    "XDG_CONFIG_HOME",
    "APPDATA",
];

impl Home {
    /// This process's home, system and variables; `None` without a home folder.
    pub fn from_env() -> Option<Home> {
        let os = if cfg!(windows) {
            Os::Windows
        } else if cfg!(target_os = "macos") {
            Os::MacOs
        } else {
            Os::Linux
        };
        let home = std::env::var_os(if os == Os::Windows {
            "USERPROFILE"
        } else {
            "HOME"
        })
        .or_else(|| std::env::var_os("HOME"))
        .filter(|h| !h.is_empty())?;
        let vars = VARS
            .iter()
            .filter_map(|name| {
                let value = std::env::var_os(name).filter(|v| !v.is_empty())?;
                Some(((*name).to_owned(), PathBuf::from(value)))
            })
            .collect();
        Some(Home {
            home: PathBuf::from(home),
            os,
            cwd: std::env::current_dir().ok(),
            vars,
        })
    }

    fn var(&self, name: &str) -> Option<&Path> {
        self.vars
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_path())
    }

    fn or_home(&self, var: &str, default: &str) -> PathBuf {
        self.var(var)
            .map_or_else(|| self.home.join(default), Path::to_path_buf)
    }

    /// The folders VS Code and its forks keep extensions' storage in.
    fn editor_storage(&self, extension: &str) -> Vec<PathBuf> {
        let base = match self.os {
            Os::Linux => self.or_home("XDG_CONFIG_HOME", ".config"),
            Os::MacOs => self.home.join("Library/Application Support"),
            Os::Windows => self.or_home("APPDATA", "AppData/Roaming"),
        };
        ["Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf"]
            .iter()
            .map(|editor| {
                base.join(editor)
                    .join("User/globalStorage")
                    .join(extension)
                    .join("tasks")
            })
            .collect()
    }
}

/// One agent's history as found.
#[derive(Debug, Clone)]
pub struct AgentHistory {
    /// The agent (one of [`AGENTS`]).
    pub agent: &'static str,
    /// The folders looked in, found or not.
    pub looked_in: Vec<PathBuf>,
    /// The session files (and databases, and opencode `storage/` trees) found.
    pub files: Vec<PathBuf>,
    /// Their total size in bytes.
    pub bytes: u64,
    /// The oldest and newest modification times among them.
    pub modified: Option<(SystemTime, SystemTime)>,
}

/// Each agent's history under `home`, for the agents in `only` (all when empty).
pub fn find(home: &Home, only: &[String]) -> Vec<AgentHistory> {
    AGENTS
        .iter()
        .filter(|a| only.is_empty() || only.iter().any(|o| o == *a))
        .map(|agent| find_agent(home, agent))
        .collect()
}

fn find_agent(home: &Home, agent: &'static str) -> AgentHistory {
    let mut looked_in = Vec::new();
    let mut files = Vec::new();
    let ends = |name: &str, ext: &[&str]| ext.iter().any(|e| name.ends_with(e));
    match agent {
        "claude-code" => {
            let mut roots = vec![home.home.join(".claude/projects")];
            if let Some(dir) = home.var("CLAUDE_CONFIG_DIR") {
                roots.insert(0, dir.join("projects"));
            }
            for root in roots {
                walk(&root, 4, &mut files, &|n| n.ends_with(".jsonl"));
                looked_in.push(root);
            }
        }
        "codex" => {
            let base = home.or_home("CODEX_HOME", ".codex");
            for sub in ["sessions", "archived_sessions"] {
                let root = base.join(sub);
                walk(&root, 5, &mut files, &|n| {
                    n.starts_with("rollout-") && n.ends_with(".jsonl")
                });
                looked_in.push(root);
            }
        }
        "gemini-cli" => {
            let base = home
                .var("GEMINI_CLI_HOME")
                .map_or_else(|| home.home.clone(), Path::to_path_buf);
            let root = base.join(".gemini/tmp");
            for project in subfolders(&root) {
                walk(&project.join("chats"), 3, &mut files, &|n| {
                    n.starts_with("session-") && ends(n, &[".json", ".jsonl"])
                });
            }
            looked_in.push(root);
        }
        "hermes" => {
            let base = home.or_home("HERMES_HOME", ".hermes");
            let db = base.join("state.db");
            if db.is_file() {
                // The snapshots in sessions/ repeat what the database holds.
                files.push(db);
            } else {
                walk(&base.join("sessions"), 1, &mut files, &|n| {
                    (n.starts_with("session_") && n.ends_with(".json")) || n.ends_with(".jsonl")
                });
            }
            looked_in.push(base);
        }
        "opencode" => {
            let base = home
                .or_home("XDG_DATA_HOME", ".local/share")
                .join("opencode");
            let db = base.join("opencode.db");
            let storage = base.join("storage");
            if db.is_file() {
                // opencode moves the storage tree into the database when it first opens it.
                files.push(db);
            } else if storage.join("message").is_dir() {
                files.push(storage);
            }
            looked_in.push(base);
        }
        "cline" | "roo-code" => {
            let extension = if agent == "cline" {
                "saoudrizwan.claude-dev"
            } else {
                "rooveterinaryinc.roo-cline"
            };
            let mut roots = home.editor_storage(extension);
            if agent == "cline" {
                roots.push(home.home.join(".cline/data/tasks"));
            }
            for root in roots {
                for task in subfolders(&root) {
                    let file = task.join("api_conversation_history.json");
                    if file.is_file() {
                        files.push(file);
                    }
                }
                looked_in.push(root);
            }
        }
        "aider" => {
            // Aider writes its history in each project's root: the working folder and the
            // folders above it, up to the home folder.
            let mut dir = home.cwd.clone();
            while let Some(d) = dir {
                let file = d.join(".aider.chat.history.md");
                if file.is_file() {
                    files.push(file);
                }
                looked_in.push(d.clone());
                if d == home.home {
                    break;
                }
                dir = d.parent().map(Path::to_path_buf);
            }
        }
        _ => {}
    }
    files.sort();
    files.dedup();
    let mut bytes = 0;
    let mut modified: Option<(SystemTime, SystemTime)> = None;
    for file in &files {
        let Ok(meta) = std::fs::metadata(file) else {
            continue;
        };
        bytes += if meta.is_dir() {
            tree_size(file)
        } else {
            meta.len()
        };
        if let Ok(time) = meta.modified() {
            modified = Some(match modified {
                Some((lo, hi)) => (lo.min(time), hi.max(time)),
                None => (time, time),
            });
        }
    }
    AgentHistory {
        agent,
        looked_in,
        files,
        bytes,
        modified,
    }
}

fn subfolders(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The files under `dir` (at most `depth` folders down) whose name `keep` accepts.
fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>, keep: &dyn Fn(&str) -> bool) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in rd.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        if kind.is_dir() {
            if depth > 0 && !name.starts_with('.') {
                walk(&path, depth - 1, out, keep);
            }
        } else if kind.is_file() && keep(&name) {
            out.push(path);
        }
    }
}

fn tree_size(dir: &Path) -> u64 {
    let mut files = Vec::new();
    walk(dir, 4, &mut files, &|_| true);
    files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"{}").unwrap();
    }

    /// Each system's layout, laid out under one temporary home: the session files are found,
    /// the credential files beside them are not listed.
    #[test]
    fn every_agent_is_found_where_its_system_keeps_it_and_no_credential_is_listed() {
        let root = std::env::temp_dir().join(format!("ctxgc-history-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let credentials = [
            ".claude/.credentials.json",
            ".codex/auth.json",
            ".gemini/oauth_creds.json",
            ".hermes/.env",
            ".hermes/auth.json",
            ".local/share/opencode/auth.json",
            ".cline/data/secrets.json",
        ];
        let sessions = [
            ".claude/projects/-w-app/0b1.jsonl",
            ".codex/sessions/2026/11/26/rollout-2026-11-26T10-00-00-x.jsonl",
            ".gemini/tmp/abc/chats/session-2026-11-26T10-00-x.jsonl",
            ".hermes/state.db",
            ".local/share/opencode/opencode.db",
            ".cline/data/tasks/1700000000000/api_conversation_history.json",
            "proj/.aider.chat.history.md",
        ];
        for f in credentials.iter().chain(&sessions) {
            touch(&root.join(f));
        }
        touch(&root.join(".hermes/sessions/session_x.json"));
        touch(&root.join(".cline/data/tasks/1700000000000/ui_messages.json"));
        let mac = [
            "Library/Application Support/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks/t1/api_conversation_history.json",
        ];
        let win = [
            "AppData/Roaming/Cursor/User/globalStorage/saoudrizwan.claude-dev/tasks/t2/api_conversation_history.json",
        ];
        for f in mac.iter().chain(&win) {
            touch(&root.join(f));
        }
        let home = |os| Home {
            home: root.clone(),
            os,
            cwd: Some(root.join("proj")),
            vars: Vec::new(),
        };
        let found: Vec<PathBuf> = find(&home(Os::Linux), &[])
            .into_iter()
            .flat_map(|a| a.files)
            .collect();
        for f in &sessions {
            assert!(found.contains(&root.join(f)), "{f} not found in {found:?}");
        }
        for f in credentials {
            assert!(!found.contains(&root.join(f)), "{f} listed");
        }
        assert!(
            !found.iter().any(|f| f.ends_with("session_x.json")),
            "snapshots repeat state.db"
        );
        let roo = find(&home(Os::MacOs), &["roo-code".into()]);
        assert_eq!(roo[0].files, [root.join(mac[0])]);
        let cline = find(&home(Os::Windows), &["cline".into()]);
        assert!(cline[0].files.contains(&root.join(win[0])));
        let _ = std::fs::remove_dir_all(&root);
    }
}
