//! Whose session is it: the lab judges itself user by user, because what fits one user's
//! sessions need not fit another's (each round's rule met its target on the shared users and
//! missed it on others). A set names its users in one of two ways, as `../shared` does: a prefix
//! before the session id in the file name (`procrypto-0012a6f2-….jsonl`,
//! `EdouardZemb-rollout-2026-….jsonl`), or one folder per user under the folder given.

use std::path::Path;

/// The user of the session read from `file`, found under `root` (the path given on the command
/// line) in the set `set`: the file name's prefix before the first `-` when it is a name and not
/// the start of a session id, else the first folder under `root` when that is a name (not a
/// Claude Code project folder, `-home-…`, nor a dated folder, `2026/…`), else the set itself (a
/// set of one user).
pub fn user_of(file: &Path, root: &Path, set: &str) -> String {
    if let Some(user) = file
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(name_prefix)
    {
        return user.to_owned();
    }
    let folder = file
        .strip_prefix(root)
        .ok()
        .and_then(|rel| {
            let mut parts = rel.components();
            let first = parts.next()?;
            // The first component must be a folder, not the file itself.
            parts.next()?;
            first.as_os_str().to_str()
        })
        .filter(|name| is_name(name));
    folder.map_or_else(|| set.to_owned(), str::to_owned)
}

/// `alice` of `alice-0012a6f2-….jsonl`; `None` when the name starts with its session id.
fn name_prefix(file_name: &str) -> Option<&str> {
    let (prefix, rest) = file_name.split_once('-')?;
    (!rest.is_empty() && is_name(prefix) && prefix != "rollout" && prefix != "checkpoint")
        .then_some(prefix)
}

/// A user's name, not a piece of a session id, a date or a project path: it starts with a
/// letter and is not all hex digits.
fn is_name(s: &str) -> bool {
    s.chars().next().is_some_and(|c| c.is_alphabetic()) && !s.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(file: &str, root: &str) -> String {
        user_of(Path::new(file), Path::new(root), "set")
    }

    #[test]
    fn a_name_prefix_names_the_user() {
        assert_eq!(
            user("logs/procrypto-0012a6f2-e05a.jsonl", "logs"),
            "procrypto"
        );
        assert_eq!(
            user(
                "logs/EdouardZemb-rollout-2026-01-29T10-08-57-019c.jsonl",
                "logs"
            ),
            "EdouardZemb"
        );
    }

    #[test]
    fn a_session_id_is_not_a_user() {
        assert_eq!(user("logs/0012a6f2-e05a-4371.jsonl", "logs"), "set");
        assert_eq!(user("logs/deadbeef-e05a-4371.jsonl", "logs"), "set");
        assert_eq!(user("s/rollout-2026-01-29T10-08-57-019c.jsonl", "s"), "set");
        assert_eq!(user("logs/session.jsonl", "logs"), "set");
    }

    #[test]
    fn a_folder_per_user_names_the_user() {
        assert_eq!(user("logs/alice/0012a6f2-e05a.jsonl", "logs"), "alice");
        // Claude Code's project folders and Codex's dated folders are not users.
        assert_eq!(
            user("projects/-home-bob-src/0012a6f2-e05a.jsonl", "projects"),
            "set"
        );
        assert_eq!(
            user("sessions/2026/01/29/rollout-2026-01-29.jsonl", "sessions"),
            "set"
        );
    }
}
