//! A Redis store, so several proxy replicas behind a load balancer share originals.
//!
//! It speaks RESP2 over a pool of TCP connections, one command (or one pipeline of commands)
//! per connection at a time: `SET key value NX` to save (an original never changes, so the first
//! write wins), `GET` to load, a Lua script for the lineage's compare-and-set. Every connect,
//! write and read has a deadline; a connection whose exchange failed or timed out is dropped,
//! never reused, so a late reply can never be read as the answer to another command. Keys are
//! namespaced by session, whose id starts with the caller's tenant.
//! A `put` returns only after Redis acknowledged the write; how long it survives a Redis restart
//! depends on the server's persistence settings (`appendonly yes` for the proxy's guarantee).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use ctxgc_core::ContentId;
use ctxgc_core::store::{OriginalStore, SessionId, StateKey, StateStore, StoreError};

use crate::pool::Pool;

use crate::DEFAULT_TIMEOUT;

/// Originals in Redis under `ctxgc:orig:{session}:{id}`, states under `ctxgc:state:{name}`.
pub struct RedisStore {
    address: String,
    timeout: Duration,
    /// Every key but the server's own states expires this long after its last write.
    retention: Option<Duration>,
    connections: Pool<BufReader<TcpStream>>,
}

/// One reply.
enum Reply {
    Ok,
    Int(i64),
    Bulk(Option<Vec<u8>>),
    /// Redis answered this command with an error (the connection stays in step).
    Error(String),
}

/// Why an exchange failed, which decides what becomes of its connection.
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
}

impl RedisError {
    /// A stale connection (Redis restarted, an idle connection closed): one fresh attempt is
    /// worth it. A timeout is not retried, so a stalled Redis costs one timeout, not two.
    fn stale_connection(&self) -> bool {
        use std::io::ErrorKind::*;
        matches!(self, RedisError::Io(e) if matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof))
    }
}

impl RedisError {
    fn into_store_error(self, what: &str, timeout: Duration) -> StoreError {
        use std::io::ErrorKind::{TimedOut, WouldBlock};
        match self {
            RedisError::Io(e) if matches!(e.kind(), TimedOut | WouldBlock) => StoreError::Timeout {
                backend: "redis",
                what: what.to_owned(),
                after: timeout,
            },
            RedisError::Connect { .. } | RedisError::Io(_) => StoreError::Unavailable {
                backend: "redis",
                message: format!("{what}: {self}"),
            },
            RedisError::Protocol(_) => StoreError::backend("redis", format!("{what}: {self}")),
        }
    }
}

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError::backend("redis", e)
}

/// Sets a state if it is still the expected one: `ARGV[1]` is `1` when a state is expected
/// (`ARGV[2]`), `0` when none is; `ARGV[3]` the new state, `ARGV[4]` its expiry in seconds or
/// empty.
const SWAP_SCRIPT: &[u8] = b"local cur = redis.call('GET', KEYS[1])
if ARGV[1] == '0' then
  if cur then return 0 end
elseif cur ~= ARGV[2] then
  return 0
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4])
else
  redis.call('SET', KEYS[1], ARGV[3])
end
return 1";

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
            connections: Pool::new(Vec::new(), timeout),
        };
        store.command("reaching the server", &[b"PING"])?;
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

    /// Sends `commands` as one pipeline on one connection and reads their replies in order.
    fn pipeline(&self, what: &str, commands: &[Vec<&[u8]>]) -> Result<Vec<Reply>, StoreError> {
        let mut attempt = 0;
        loop {
            let mut conn = self
                .connections
                .take_or_open(|| self.open())
                .map_err(|e| e.into_store_error(what, self.timeout))?;
            match round_trip(&mut conn, commands) {
                // The loan goes back to the pool: its exchange is complete.
                Ok(replies) => return Ok(replies),
                Err(e) => {
                    conn.discard();
                    // A stale connection (Redis restarted, an idle connection closed) is worth
                    // one fresh attempt; a timeout is not, so a stalled Redis costs one deadline.
                    if attempt == 0 && e.stale_connection() {
                        attempt += 1;
                        continue;
                    }
                    return Err(e.into_store_error(what, self.timeout));
                }
            }
        }
    }

    /// One command; an error reply is an error.
    fn command(&self, what: &str, args: &[&[u8]]) -> Result<Reply, StoreError> {
        let reply = self
            .pipeline(what, &[args.to_vec()])?
            .pop()
            .ok_or_else(|| err(format!("{what}: no reply")))?;
        match reply {
            Reply::Error(message) => Err(err(format!("{what}: {message}"))),
            reply => Ok(reply),
        }
    }
}

fn round_trip(
    conn: &mut BufReader<TcpStream>,
    commands: &[Vec<&[u8]>],
) -> Result<Vec<Reply>, RedisError> {
    let mut request = Vec::new();
    for args in commands {
        request.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            request.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            request.extend_from_slice(a);
            request.extend_from_slice(b"\r\n");
        }
    }
    conn.get_mut().write_all(&request)?;
    commands.iter().map(|_| read_reply(conn)).collect()
}

fn read_reply(conn: &mut BufReader<TcpStream>) -> Result<Reply, RedisError> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    let line = line.trim_end();
    let number = |text: &str| {
        text.parse::<i64>()
            .map_err(|_| RedisError::Protocol(line.to_owned()))
    };
    match line.as_bytes().first() {
        Some(b'+') => Ok(Reply::Ok),
        Some(b':') => Ok(Reply::Int(number(&line[1..])?)),
        Some(b'-') => Ok(Reply::Error(line[1..].to_owned())),
        Some(b'$') => {
            let len = number(&line[1..])?;
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

fn key(session: &SessionId, id: ContentId) -> Vec<u8> {
    format!("ctxgc:orig:{session}:{id}").into_bytes()
}

fn state_key(key: StateKey<'_>) -> Vec<u8> {
    format!("ctxgc:state:{}", key.name()).into_bytes()
}

fn text(bytes: Vec<u8>) -> Result<String, StoreError> {
    String::from_utf8(bytes).map_err(|e| StoreError::Corrupt {
        backend: "redis",
        message: format!("not UTF-8: {e}"),
    })
}

impl OriginalStore for RedisStore {
    fn put_all(
        &self,
        session: &SessionId,
        originals: &[(ContentId, &str)],
    ) -> Result<(), StoreError> {
        if originals.is_empty() {
            return Ok(());
        }
        // SET NX answers +OK or a nil bulk when the key exists: both mean "stored"; an existing
        // original is still in use, so its expiry starts again (EXPIRE). All in one pipeline.
        let expiry = self.expiry();
        let keys: Vec<Vec<u8>> = originals.iter().map(|(id, _)| key(session, *id)).collect();
        let mut commands: Vec<Vec<&[u8]>> = Vec::new();
        for (key, (_, text)) in keys.iter().zip(originals) {
            match &expiry {
                Some(secs) => {
                    commands.push(vec![b"SET", key, text.as_bytes(), b"NX", b"EX", secs]);
                    commands.push(vec![b"EXPIRE", key, secs]);
                }
                None => commands.push(vec![b"SET", key, text.as_bytes(), b"NX"]),
            }
        }
        for reply in self.pipeline("saving originals", &commands)? {
            if let Reply::Error(message) = reply {
                return Err(err(format!("saving originals: {message}")));
            }
        }
        Ok(())
    }

    fn get(&self, session: &SessionId, id: ContentId) -> Result<Option<String>, StoreError> {
        match self.command("loading an original", &[b"GET", &key(session, id)])? {
            Reply::Bulk(Some(bytes)) => text(bytes).map(Some),
            _ => Ok(None),
        }
    }
}

impl StateStore for RedisStore {
    fn put_state(&self, key: StateKey<'_>, state: &str) -> Result<(), StoreError> {
        let name = state_key(key);
        let what = "saving a state";
        match self.expiry().filter(|_| key.expires()) {
            Some(secs) => self.command(what, &[b"SET", &name, state.as_bytes(), b"EX", &secs]),
            None => self.command(what, &[b"SET", &name, state.as_bytes()]),
        }
        .map(|_| ())
    }

    fn get_state(&self, key: StateKey<'_>) -> Result<Option<String>, StoreError> {
        match self.command("loading a state", &[b"GET", &state_key(key)])? {
            Reply::Bulk(Some(bytes)) => text(bytes).map(Some),
            _ => Ok(None),
        }
    }

    fn swap_state(
        &self,
        key: StateKey<'_>,
        expected: Option<&str>,
        state: &str,
    ) -> Result<bool, StoreError> {
        let expiry = self.expiry().filter(|_| key.expires()).unwrap_or_default();
        let reply = self.command(
            "swapping a state",
            &[
                b"EVAL",
                SWAP_SCRIPT,
                b"1",
                &state_key(key),
                if expected.is_some() { b"1" } else { b"0" },
                expected.unwrap_or_default().as_bytes(),
                state.as_bytes(),
                &expiry,
            ],
        )?;
        Ok(matches!(reply, Reply::Int(1)))
    }
}
