//! A Redis store, so several proxy replicas behind a load balancer share originals.
//!
//! It speaks RESP2 over one TCP connection per store: `SET key value NX` to save (an original
//! never changes, so the first write wins) and `GET` to load. Every connect, write and read has
//! a deadline; a connection whose exchange failed or timed out is dropped, never reused, so a
//! late reply can never be read as the answer to another command.
//! A `put` returns only after Redis acknowledged the write; how long it survives a Redis restart
//! depends on the server's persistence settings (`appendonly yes` for the proxy's guarantee).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::Duration;

use ctxgc_core::ContentId;
use ctxgc_core::store::{OriginalStore, StateStore, StoreError};

/// How long one connect, write or read may take by default: a stalled Redis then costs a request
/// at most this long before it fails open.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// Originals in Redis under `ctxgc:orig:{session}:{id}`.
pub struct RedisStore {
    address: String,
    timeout: Duration,
    /// Every key but the store's own (`ctxgc.*` states) expires this long after its last write.
    retention: Option<Duration>,
    conn: Mutex<Option<BufReader<TcpStream>>>,
}

enum Reply {
    Ok,
    Bulk(Option<Vec<u8>>),
}

/// Why a command failed, which decides what becomes of its connection.
#[derive(Debug, thiserror::Error)]
enum RedisError {
    /// No connection could be made.
    #[error("cannot connect to {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    /// The exchange broke or timed out: a reply may still be on its way, so the connection is
    /// never used again (reusing it would hand that reply to the next command).
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A reply that is not RESP: the stream is out of step, so the connection is dropped too.
    #[error("unexpected reply {0:?}")]
    Protocol(String),
    /// Redis answered with an error: the exchange is complete and the connection in step.
    #[error("server error: {0}")]
    Server(String),
}

impl RedisError {
    /// A stale connection (Redis restarted, an idle connection closed): one fresh attempt is
    /// worth it. A timeout is not retried, so a stalled Redis costs one timeout, not two.
    fn stale_connection(&self) -> bool {
        use std::io::ErrorKind::*;
        matches!(self, RedisError::Io(e) if matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof))
    }
}

impl From<RedisError> for StoreError {
    fn from(e: RedisError) -> StoreError {
        StoreError(format!("redis: {e}"))
    }
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(format!("redis: {e}"))
}

impl RedisStore {
    /// Connects to `redis://HOST:PORT` (or `HOST:PORT`) with [`DEFAULT_TIMEOUT`].
    pub fn connect(url: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect_with_timeout(url, DEFAULT_TIMEOUT)
    }

    /// Connects with a deadline for every connect, write and read.
    pub fn connect_with_timeout(url: &str, timeout: Duration) -> Result<RedisStore, StoreError> {
        let address = url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .to_owned();
        if address.is_empty() {
            return Err(err(format!("no address in `{url}`: use redis://HOST:PORT")));
        }
        let store = RedisStore {
            address,
            timeout,
            retention: None,
            conn: Mutex::new(None),
        };
        store
            .command(&[b"PING"])
            .map_err(|e| err(format!("cannot reach {}: {}", store.address, e.0)))?;
        Ok(store)
    }

    /// Keys expire this long after their last write (Redis `EX`).
    pub fn with_retention(mut self, retention: Duration) -> RedisStore {
        self.retention = Some(retention);
        self
    }

    fn expiry(&self) -> Option<Vec<u8>> {
        self.retention
            .map(|r| r.as_secs().max(1).to_string().into_bytes())
    }

    fn open(&self) -> Result<BufReader<TcpStream>, RedisError> {
        let connect = |source| RedisError::Connect {
            address: self.address.clone(),
            source,
        };
        let addr = self
            .address
            .to_socket_addrs()
            .map_err(connect)?
            .next()
            .ok_or_else(|| connect(std::io::ErrorKind::AddrNotAvailable.into()))?;
        let stream = TcpStream::connect_timeout(&addr, self.timeout).map_err(connect)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        stream.set_nodelay(true)?;
        Ok(BufReader::new(stream))
    }

    fn command(&self, args: &[&[u8]]) -> Result<Reply, StoreError> {
        let mut guard = self
            .conn
            .lock()
            .map_err(|_| err("connection lock poisoned"))?;
        let mut attempt = 0;
        loop {
            // The connection is taken out and put back only after a complete exchange.
            let mut conn = match guard.take() {
                Some(conn) => conn,
                None => self.open()?,
            };
            match round_trip(&mut conn, args) {
                Ok(reply) => {
                    *guard = Some(conn);
                    return Ok(reply);
                }
                Err(e @ RedisError::Server(_)) => {
                    *guard = Some(conn);
                    return Err(e.into());
                }
                Err(e) if attempt == 0 && e.stale_connection() => attempt += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn round_trip(conn: &mut BufReader<TcpStream>, args: &[&[u8]]) -> Result<Reply, RedisError> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        request.extend_from_slice(a);
        request.extend_from_slice(b"\r\n");
    }
    conn.get_mut().write_all(&request)?;
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    let line = line.trim_end();
    match line.as_bytes().first() {
        Some(b'+') | Some(b':') => Ok(Reply::Ok),
        Some(b'-') => Err(RedisError::Server(line[1..].to_owned())),
        Some(b'$') => {
            let len: i64 = line[1..]
                .parse()
                .map_err(|_| RedisError::Protocol(line.to_owned()))?;
            if len < 0 {
                return Ok(Reply::Bulk(None));
            }
            let mut data = vec![0; len as usize + 2];
            conn.read_exact(&mut data)?;
            data.truncate(len as usize);
            Ok(Reply::Bulk(Some(data)))
        }
        _ => Err(RedisError::Protocol(line.to_owned())),
    }
}

fn key(session: &str, id: ContentId) -> Vec<u8> {
    format!("ctxgc:orig:{session}:{id}").into_bytes()
}

impl OriginalStore for RedisStore {
    fn put(&mut self, session: &str, id: ContentId, text: &str) -> Result<(), StoreError> {
        // SET NX answers +OK or a nil bulk when the key exists: both mean "stored"; an existing
        // original is still in use, so its expiry starts again.
        let key = key(session, id);
        let Some(secs) = self.expiry() else {
            return self
                .command(&[b"SET", &key, text.as_bytes(), b"NX"])
                .map(|_| ());
        };
        match self.command(&[b"SET", &key, text.as_bytes(), b"NX", b"EX", &secs])? {
            Reply::Bulk(None) => self.command(&[b"EXPIRE", &key, &secs]).map(|_| ()),
            _ => Ok(()),
        }
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
        let key = format!("ctxgc:state:{session}");
        match self.expiry().filter(|_| !session.starts_with("ctxgc.")) {
            Some(secs) => self.command(&[b"SET", key.as_bytes(), state.as_bytes(), b"EX", &secs]),
            None => self.command(&[b"SET", key.as_bytes(), state.as_bytes()]),
        }
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
