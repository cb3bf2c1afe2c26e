//! What the code under test logs through `tracing`, captured: one global subscriber per test
//! binary writes every line (spans and fields included, as the text format shows them) to a
//! buffer the tests read. Tests run in parallel in one process, so a test looks for lines that
//! only it can cause, and a check that something never appears is a check over all of them.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The captured lines of the whole test binary.
#[derive(Clone)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Every line logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts capturing (once per binary; at debug level for ctxgc's crates) and returns the
/// buffer.
pub fn capture() -> Logs {
    static LOGS: OnceLock<Logs> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "ctxgc=debug,ctxgc_proxy=debug",
            ))
            .with_ansi(false)
            .with_writer(move || Writer(sink.clone()))
            .try_init();
        Logs(buffer)
    })
    .clone()
}
