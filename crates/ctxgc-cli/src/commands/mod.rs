//! The subcommands, one module each, and what they share (window sizes on the command line).

pub mod breaks;
pub mod compact;
pub mod hook;
pub mod import;
pub mod mcp;
pub mod recall;
pub mod replay;
pub mod run;
pub mod serve;
pub mod summarizer;
pub mod trim;

/// A context window as every command takes it: `32000`, `32k` or `1m`; zero and anything that
/// is not a positive size are refused with the text named.
pub fn parse_window(text: &str) -> anyhow::Result<u64> {
    let t = text.trim().to_ascii_lowercase();
    let (digits, unit) = match t.strip_suffix('k') {
        Some(d) => (d, 1_000),
        None => match t.strip_suffix('m') {
            Some(d) => (d, 1_000_000),
            None => (t.as_str(), 1),
        },
    };
    let n: f64 = digits
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid window `{text}`: use e.g. 32000, 32k or 1m"))?;
    let tokens = n * unit as f64;
    if !(1.0..=100e6).contains(&tokens) {
        anyhow::bail!("invalid window `{text}`: must be between 1 and 100m tokens");
    }
    Ok(tokens as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_windows() {
        assert_eq!(parse_window("32k").unwrap(), 32_000);
        assert_eq!(parse_window("1m").unwrap(), 1_000_000);
        assert_eq!(parse_window("64000").unwrap(), 64_000);
        for bad in ["big", "0", "0k", "-5", "nan", "1e12"] {
            assert!(
                parse_window(bad)
                    .unwrap_err()
                    .to_string()
                    .contains(&format!("invalid window `{bad}`")),
                "{bad}"
            );
        }
    }
}
