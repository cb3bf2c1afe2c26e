//! Server-sent events, framed once for every reader of a stream (the usage tap, the splicer).
//!
//! The framer is resumable: each byte is scanned once, whatever the chunking, and the buffer is
//! compacted once per chunk, so time is linear in the stream's size (a 5 MB event or 100,000
//! small deltas alike). Lines end with LF, CRLF or CR, as the SSE specification allows, also
//! when a CRLF is split between two chunks; an event ends at an empty line. An event's `raw`
//! bytes are exactly what arrived, so a reader that does not rewrite it passes it on byte for
//! byte; its `data` is its `data:` lines joined with LF, as the specification defines.

/// One event as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// The bytes, its terminating empty line included.
    pub raw: &'a [u8],
}

impl<'a> Event<'a> {
    /// The event's lines, without their terminators (a leading LF that completes the previous
    /// event's CRLF is not a line).
    fn lines(&self) -> impl Iterator<Item = &'a [u8]> {
        let raw = self.raw.strip_prefix(b"\n").unwrap_or(self.raw);
        let mut rest = raw;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let end = rest.iter().position(|&b| b == b'\n' || b == b'\r')?;
            let line = &rest[..end];
            let skip = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') {
                2
            } else {
                1
            };
            rest = &rest[end + skip..];
            Some(line)
        })
    }

    /// The value of each line of field `name` (one leading space removed).
    fn field(&self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
        self.lines().filter_map(move |line| {
            let value = line.strip_prefix(name)?.strip_prefix(b":")?;
            Some(value.strip_prefix(b" ").unwrap_or(value))
        })
    }

    /// The event's data: its `data:` lines joined with LF; `None` when it has none (a comment,
    /// a ping with only an `event:` line).
    pub fn data(&self) -> Option<Vec<u8>> {
        let mut lines = self.field(b"data");
        let mut out = lines.next()?.to_vec();
        for line in lines {
            out.push(b'\n');
            out.extend_from_slice(line);
        }
        Some(out)
    }

    /// The event's type (`event:`), when named.
    pub fn name(&self) -> Option<&'a str> {
        self.field(b"event")
            .last()
            .and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// Cuts a byte stream into events.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    /// Where the event being read starts in `buf`.
    start: usize,
    /// How far `buf` has been scanned.
    scanned: usize,
    /// No byte yet on the line being read.
    line_empty: bool,
    /// The last byte scanned was a CR: an LF right after it ends the same line.
    after_cr: bool,
}

impl Default for Framer {
    fn default() -> Self {
        Framer::new()
    }
}

impl Framer {
    /// A framer at the start of a stream: on an empty line.
    pub fn new() -> Framer {
        Framer {
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            line_empty: true,
            after_cr: false,
        }
    }

    /// Feeds bytes as they arrived; `each` sees every event they complete, in order.
    pub fn feed(&mut self, chunk: &[u8], mut each: impl FnMut(Event<'_>)) {
        self.buf.extend_from_slice(chunk);
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            i += 1;
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            match b {
                b'\r' | b'\n' => {
                    self.after_cr = b == b'\r';
                    if self.line_empty {
                        // An empty line: the event ends here, with the LF of a CRLF when it
                        // has arrived (else the next event's bytes start with it, and it is
                        // read as part of this line end: the event is not held back for it).
                        if self.after_cr && self.buf.get(i) == Some(&b'\n') {
                            i += 1;
                            self.after_cr = false;
                        }
                        each(Event {
                            raw: &self.buf[self.start..i],
                        });
                        self.start = i;
                    }
                    self.line_empty = true;
                }
                _ => self.line_empty = false,
            }
        }
        self.scanned = i;
        // Compacted once per chunk, not once per event: linear however many events it held.
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
    }

    /// Bytes received that do not complete an event yet.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

    /// The bytes of an event the stream ended before completing, taken out.
    pub fn take_rest(&mut self) -> Vec<u8> {
        let rest = self.buf.split_off(self.start);
        self.buf.clear();
        self.start = 0;
        self.scanned = 0;
        rest
    }

    /// Forgets what is buffered (a reader that gave up on an oversized event).
    pub fn clear(&mut self) {
        self.take_rest();
        self.line_empty = true;
        self.after_cr = false;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// Each event's bytes and data.
    type Events = Vec<(Vec<u8>, Option<Vec<u8>>)>;
    /// The events of a stream, and the bytes of an unfinished one.
    type Framed = (Events, Vec<u8>);

    fn frame(chunks: &[&[u8]]) -> Framed {
        let mut framer = Framer::new();
        let mut events = Vec::new();
        for chunk in chunks {
            framer.feed(chunk, |e| events.push((e.raw.to_vec(), e.data())));
        }
        (events, framer.take_rest())
    }

    #[test]
    fn every_line_ending_ends_lines_and_data_lines_join() {
        for stream in [
            &b"event: a\ndata: 1\ndata: 2\n\ndata:3\n\n"[..],
            b"event: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata:3\r\n\r\n",
            b"event: a\rdata: 1\rdata: 2\r\rdata:3\r\r",
        ] {
            let (events, rest) = frame(&[stream]);
            let data: Vec<_> = events.iter().map(|(_, d)| d.clone().unwrap()).collect();
            assert_eq!(data, vec![b"1\n2".to_vec(), b"3".to_vec()], "{stream:?}");
            assert!(rest.is_empty());
            assert_eq!(events.concat_raw(), stream, "byte for byte");
        }
    }

    trait ConcatRaw {
        fn concat_raw(&self) -> Vec<u8>;
    }
    impl ConcatRaw for Events {
        fn concat_raw(&self) -> Vec<u8> {
            self.iter().flat_map(|(raw, _)| raw.clone()).collect()
        }
    }

    #[test]
    fn a_crlf_split_between_chunks_is_one_line_end() {
        let (events, rest) = frame(&[b"data: 1\r", b"\n\r", b"\ndata: 2\r\n\r\n"]);
        let data: Vec<_> = events.iter().map(|(_, d)| d.clone().unwrap()).collect();
        assert_eq!(data, vec![b"1".to_vec(), b"2".to_vec()]);
        assert!(rest.is_empty());
    }

    #[test]
    fn comments_and_names_and_an_unfinished_event() {
        let (events, rest) = frame(&[b": ping\n\nevent: message_stop\ndata: {}\n\ndata: par"]);
        assert_eq!(events[0].1, None, "a comment has no data");
        let mut f = Framer::new();
        let mut names = Vec::new();
        f.feed(b"event: message_stop\ndata: {}\n\n", |e| {
            names.push(e.name().map(str::to_owned))
        });
        assert_eq!(names, vec![Some("message_stop".to_owned())]);
        assert_eq!(events.len(), 2);
        assert_eq!(rest, b"data: par");
    }

    proptest! {
        /// However a stream is cut into chunks, the same events come out, and together with
        /// the rest they are the stream's bytes.
        #[test]
        fn chunking_does_not_matter(
            lines in proptest::collection::vec(("[a-z: ]{0,6}", 0..3usize), 0..30),
            cuts in proptest::collection::vec(0..200usize, 0..8),
        ) {
            let endings: [&[u8]; 3] = [b"\n", b"\r\n", b"\r"];
            let mut stream = Vec::new();
            for (text, ending) in &lines {
                stream.extend_from_slice(text.as_bytes());
                stream.extend_from_slice(endings[*ending]);
            }
            let whole = frame(&[&stream]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            let mut chunks: Vec<&[u8]> = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&stream[at..c]);
                at = c;
            }
            chunks.push(&stream[at..]);
            let pieces = frame(&chunks);
            // A CR at a chunk's end may end an event whose LF comes in the next chunk: the
            // data is the same; the bytes, concatenated, are the stream.
            let data = |r: &Framed| r.0.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>();
            prop_assert_eq!(data(&whole), data(&pieces));
            let mut joined = pieces.0.concat_raw();
            joined.extend_from_slice(&pieces.1);
            prop_assert_eq!(joined, stream);
        }
    }
}
