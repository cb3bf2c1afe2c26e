//! The outline of a view of a file: which of its lines open a definition (a function, a
//! method, a class, a type), in the common languages, and which lines carry the number a
//! numbered view (`nl -ba`, `cat -n`, Claude Code's `Read`) put before them.

/// Words that may stand before a definition's keyword (`pub fn`, `export default function`,
/// `public static void main(`).
const MODIFIERS: &[&str] = &[
    "pub",
    "export",
    "default",
    "async",
    "static",
    "public",
    "private",
    "protected",
    "abstract",
    "final",
    "override",
    "unsafe",
    "internal",
    "extern",
    "virtual",
    "const",
    "inline",
];

/// Keywords that open a definition in the common languages.
const DEFINERS: &[&str] = &[
    "def",
    "class",
    "fn",
    "fun",
    "func",
    "function",
    "impl",
    "struct",
    "enum",
    "trait",
    "interface",
    "type",
    "mod",
    "module",
    "object",
    "record",
];

/// Whether a line of a file (after any line number a numbered view put before it) opens a
/// definition: a definer keyword first, after any modifiers, or modifiers before a signature
/// (`public int size()`).
pub(crate) fn is_definition(line: &[u8]) -> bool {
    let line = &line[..line.len().min(512)];
    let text = match std::str::from_utf8(line) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&line[..e.valid_up_to()]).unwrap_or_default(),
    };
    let code = without_line_number(text).trim_start();
    let mut modified = false;
    for word in code.split_whitespace() {
        if MODIFIERS.contains(&word) || word.starts_with("pub(") {
            modified = true;
            continue;
        }
        // `impl<T> Trait for X`, `struct Map<K, V>`: the keyword ends at its generics.
        let keyword = word.split('<').next().unwrap_or(word);
        return (DEFINERS.contains(&keyword) && code.len() > word.len())
            || (modified && (is_signature(code) || code.contains("=>")));
    }
    false
}

/// Whether a line after modifiers is a signature (`public int size(List xs) {`), not a
/// binding of a call's value (`const total = sum(xs);`; an arrow function is a definition).
fn is_signature(code: &str) -> bool {
    match (code.find('('), code.find('=')) {
        (Some(paren), Some(assign)) => paren < assign,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Whether a line starts with the number a numbered view put before it.
pub(crate) fn is_numbered(line: &str) -> bool {
    without_line_number(line).len() < line.len()
}

/// The line without the number a numbered view (`nl -ba`, `cat -n`, Claude Code's `Read`)
/// put before it.
fn without_line_number(line: &str) -> &str {
    let rest = line.trim_start_matches(' ');
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return line;
    }
    let after = &rest[digits..];
    after
        .strip_prefix('\t')
        .or_else(|| after.strip_prefix('\u{2192}'))
        .unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outline_is_the_definition_lines_of_any_common_language() {
        for line in [
            "    13\t    def _rename(self, apps, schema_editor):",
            "     6\tclass RenameContentType(migrations.RunPython):",
            "   120\u{2192}    async def fetch(url):",
            "pub(crate) fn scan_lines(",
            "impl<T: Clone> Reservoir<T> {",
            "export default function App() {",
            "func (s *Server) Serve(l net.Listener) error {",
            "  public static int size(List<String> xs) {",
            "struct Hit {",
            "type Handler = Box<dyn Fn()>;",
            "const fn limit() -> usize {",
            "const handler = (req) => {",
        ] {
            assert!(is_definition(line.as_bytes()), "{line}");
        }
        for line in [
            "    14\t        ContentType = apps.get_model('contenttypes', 'ContentType')",
            "    15\t        return type(x)",
            "default settings apply",
            "    16\t",
            "class",
            "error: the class of this value",
            "  const v12 = load(12);",
            "    static total = sum(values);",
        ] {
            assert!(!is_definition(line.as_bytes()), "{line}");
        }
    }
}
