//! A Redis store, so several proxy replicas behind a load balancer share originals.
//!
//! It speaks RESP2 over one TCP connection per store (reconnecting once on failure): `SET key
//! value NX` to save (an original never changes, so the first write wins) and `GET` to load.
//! A `put` returns only after Redis acknowledged the write; how long it survives a Redis restart
//! depends on the server's persistence settings (`appendonly yes` for the proxy's guarantee).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::Duration;

use ctxgc_core::ContentId;
use ctxgc_core::store::{OriginalStore, StateStore, StoreError};

/// Originals in Redis under `ctxgc:orig:{session}:{id}`.
pub struct RedisStore {
    address: String,
    conn: Mutex<Option<BufReader<TcpStream>>>,
}

enum Reply {
    Ok,
    Bulk(Option<Vec<u8>>),
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("redis: {e}"))
}

impl RedisStore {
    /// Connects to `redis://HOST:PORT` (or `HOST:PORT`).
    pub fn connect(url: &str) -> Result<RedisStore, StoreError> {
        let address = url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        if address.is_empty() {
            return Err(err(format!("no address in `{url}`: use redis://HOST:PORT")));
        }
        let store = RedisStore {
            address,
            conn: Mutex::new(None),
        };
        store
            .command(&[b"PING"])
            .map_err(|e| err(format!("cannot reach {}: {}", store.address, e.0)))?;
        Ok(store)
    }

    fn open(&self) -> Result<BufReader<TcpStream>, StoreError> {
        let stream = TcpStream::connect(&self.address)
            .map_err(|e| err(format!("cannot connect to {}: {e}", self.address)))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(err)?;
        stream.set_nodelay(true).map_err(err)?;
        Ok(BufReader::new(stream))
    }

    fn command(&self, args: &[&[u8]]) -> Result<Reply, StoreError> {
        let mut guard = self
            .conn
            .lock()
            .map_err(|_| err("connection lock poisoned"))?;
        for attempt in 0..2 {
            if guard.is_none() {
                *guard = Some(self.open()?);
            }
            let conn = guard.as_mut().expect("just opened");
            match round_trip(conn, args) {
                Ok(reply) => return Ok(reply),
                Err(e) if attempt == 0 && e.0.contains("(io)") => *guard = None,
                Err(e) => return Err(e),
            }
        }
        Err(err("unreachable"))
    }
}

fn round_trip(conn: &mut BufReader<TcpStream>, args: &[&[u8]]) -> Result<Reply, StoreError> {
    let io = |e: std::io::Error| err(format!("(io) {e}"));
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        request.extend_from_slice(a);
        request.extend_from_slice(b"\r\n");
    }
    conn.get_mut().write_all(&request).map_err(io)?;
    let mut line = String::new();
    if conn.read_line(&mut line).map_err(io)? == 0 {
        return Err(err("(io) connection closed"));
    }
    let line = line.trim_end();
    match line.as_bytes().first() {
        Some(b'+') => Ok(Reply::Ok),
        Some(b'-') => Err(err(format!("server error: {}", &line[1..]))),
        Some(b'$') => {
            let len: i64 = line[1..]
                .parse()
                .map_err(|_| err(format!("bad reply {line:?}")))?;
            if len < 0 {
                return Ok(Reply::Bulk(None));
            }
            let mut data = vec![0; len as usize + 2];
            conn.read_exact(&mut data).map_err(io)?;
            data.truncate(len as usize);
            Ok(Reply::Bulk(Some(data)))
        }
        Some(b':') => Ok(Reply::Ok),
        _ => Err(err(format!("unexpected reply {line:?}"))),
    }
}

fn key(session: &str, id: ContentId) -> Vec<u8> {
    format!("ctxgc:orig:{session}:{id}").into_bytes()
}

impl OriginalStore for RedisStore {
    fn put(&mut self, session: &str, id: ContentId, text: &str) -> Result<(), StoreError> {
        // SET NX answers +OK or a nil bulk when the key exists: both mean "stored".
        self.command(&[b"SET", &key(session, id), text.as_bytes(), b"NX"])
            .map(|_| ())
    }

    fn get(&self, session: &str, id: ContentId) -> Result<Option<String>, StoreError> {
        match self.command(&[b"GET", &key(session, id)])? {
            Reply::Bulk(Some(bytes)) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|e| err(format!("stored original is not UTF-8: {e}"))),
            _ => Ok(None),
        }
    }
}

impl StateStore for RedisStore {
    fn put_state(&mut self, session: &str, state: &str) -> Result<(), StoreError> {
        self.command(&[
            b"SET",
            format!("ctxgc:state:{session}").as_bytes(),
            state.as_bytes(),
        ])
        .map(|_| ())
    }

    fn get_state(&self, session: &str) -> Result<Option<String>, StoreError> {
        match self.command(&[b"GET", format!("ctxgc:state:{session}").as_bytes()])? {
            Reply::Bulk(Some(bytes)) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|e| err(format!("state is not UTF-8: {e}"))),
            _ => Ok(None),
        }
    }
}
