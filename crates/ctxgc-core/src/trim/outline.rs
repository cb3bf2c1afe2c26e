//! The outline of a view of a file: which of its lines open a definition (a function, a
//! method, a class, a type), in the common languages, and which lines carry the number a
//! numbered view (`nl -ba`, `cat -n`, Claude Code's `Read`) put before them.

/// Words that may stand before a definition's keyword (`pub fn`, `export default function`,
/// `public static void main(`, `pub(crate) fn`).
fn is_modifier(word: &[u8]) -> bool {
    matches!(
        word,
        b"pub"
            | b"export"
            | b"default"
            | b"async"
            | b"static"
            | b"public"
            | b"private"
            | b"protected"
            | b"abstract"
            | b"final"
            | b"override"
            | b"unsafe"
            | b"internal"
            | b"extern"
            | b"virtual"
            | b"const"
            | b"inline"
    ) || word.starts_with(b"pub(")
}

/// Keywords that open a definition in the common languages.
fn is_definer(word: &[u8]) -> bool {
    matches!(
        word,
        b"def"
            | b"class"
            | b"fn"
            | b"fun"
            | b"func"
            | b"function"
            | b"impl"
            | b"struct"
            | b"enum"
            | b"trait"
            | b"interface"
            | b"type"
            | b"mod"
            | b"module"
            | b"object"
            | b"record"
    )
}

/// Whether a line of a file (after any line number a numbered view put before it) opens a
/// definition: a definer keyword first, after any modifiers, or modifiers before a signature
/// (`public int size()`). Bytes, not text: it runs on every line of a streamed view, and every
/// word it looks for is ASCII.
pub(crate) fn is_definition(line: &[u8]) -> bool {
    let code = without_line_number(line).trim_ascii_start();
    let mut rest = code;
    let mut modified = false;
    loop {
        rest = rest.trim_ascii_start();
        let end = rest
            .iter()
            .position(u8::is_ascii_whitespace)
            .unwrap_or(rest.len());
        if end == 0 {
            return false;
        }
        let word = &rest[..end];
        if is_modifier(word) {
            modified = true;
            rest = &rest[end..];
            continue;
        }
        // `impl<T> Trait for X`, `struct Map<K, V>`: the keyword ends at its generics.
        let keyword = word.split(|&b| b == b'<').next().unwrap_or(word);
        return (is_definer(keyword) && code.len() > word.len())
            || (modified && (is_signature(code) || code.windows(2).any(|w| w == b"=>")));
    }
}

/// Whether a line after modifiers is a signature (`public int size(List xs) {`), not a
/// binding of a call's value (`const total = sum(xs);`; an arrow function is a definition).
fn is_signature(code: &[u8]) -> bool {
    match (memchr::memchr(b'(', code), memchr::memchr(b'=', code)) {
        (Some(paren), Some(assign)) => paren < assign,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// The definition lines of a view of a file, as they stand (with the view's line numbers), for
/// what replaces the view when an event prunes it: the first that fit in `max_lines` lines and
/// `max_bytes` bytes (a line break each), each clipped to `max_line_chars`, and how many more
/// there were. None when none fits.
pub(crate) fn definition_lines(
    text: &str,
    max_lines: usize,
    max_line_chars: usize,
    max_bytes: usize,
) -> Option<(Vec<String>, usize)> {
    let mut kept: Vec<String> = Vec::new();
    let mut used = 0;
    let mut more = 0;
    for line in text.lines().filter(|l| is_definition(l.as_bytes())) {
        // Once one did not fit, the rest are only counted: the outline keeps the file's order.
        if more > 0 || kept.len() == max_lines {
            more += 1;
            continue;
        }
        let line = line.trim_end();
        let line = match line.char_indices().nth(max_line_chars) {
            Some((at, _)) => format!("{}…", &line[..at]),
            None => line.to_owned(),
        };
        if used + line.len() + 1 > max_bytes {
            more += 1;
            continue;
        }
        used += line.len() + 1;
        kept.push(line);
    }
    (!kept.is_empty()).then_some((kept, more))
}

/// Whether a line starts with the number a numbered view put before it.
pub(crate) fn is_numbered(line: &[u8]) -> bool {
    without_line_number(line).len() < line.len()
}

/// The line without the number a numbered view (`nl -ba`, `cat -n`, Claude Code's `Read`)
/// put before it.
fn without_line_number(line: &[u8]) -> &[u8] {
    &line[line_number_len(line)..]
}

/// How many bytes of the line are the number a numbered view put before it: spaces, digits,
/// then a tab or an arrow (0 when there is none).
pub(crate) fn line_number_len(line: &[u8]) -> usize {
    let spaces = line.iter().take_while(|&&b| b == b' ').count();
    let rest = &line[spaces..];
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return 0;
    }
    let after = &rest[digits..];
    let separator = if after.starts_with(b"\t") {
        1
    } else if after.starts_with("\u{2192}".as_bytes()) {
        "\u{2192}".len()
    } else {
        return 0;
    };
    spaces + digits + separator
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
