//! A Redis store, so several proxy replicas behind a load balancer share originals.
//!
//! It speaks to Redis through the `redis` crate: `redis://[user:password@]host:port/db` (an ACL
//! user or the default user's `requirepass`, a database number) and `rediss://` (TLS, with the
//! system's roots or a CA file of the operator's). Connections are pooled and bounded (at most
//! [`MAX_CONNECTIONS`] open; a request waits for one within the deadline), and each is used by
//! one command or pipeline at a time: `SET key value NX` to save (an original never changes, so
//! the first write wins), `GET` to load, a Lua script for the lineage's compare-and-set, sent
//! once and then called by its SHA (`EVALSHA`). Every connect, write and read has a deadline; a
//! connection whose exchange failed or timed out is dropped, never reused, so a late reply can
//! never be read as the answer to another command. Keys are namespaced by a prefix and by
//! session, whose id starts with the caller's tenant. A URL is only ever shown with its password
//! replaced by `***`.
//!
//! A `put` returns only after Redis acknowledged the write; how long it survives a Redis restart
//! depends on the server's persistence settings (`appendonly yes` for the proxy's guarantee).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ctxgc_core::ContentId;
use ctxgc_core::store::{OriginalStore, SessionId, StateKey, StateStore, StoreError};

use crate::DEFAULT_TIMEOUT;
use crate::pool::{Lent, Pool};

/// Connections a store keeps open at most.
pub const MAX_CONNECTIONS: usize = 16;

/// How to reach Redis beyond its URL.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// The deadline of every connect, write and read.
    pub timeout: Duration,
    /// Every key starts with `{prefix}:` (several deployments can share one Redis).
    pub key_prefix: String,
    /// A PEM file of the CA that signed the server's certificate (`rediss://`); the system's
    /// roots otherwise.
    pub ca_file: Option<PathBuf>,
    /// Keys expire this long after their last write (Redis `EX`), the server's own states
    /// excepted.
    pub retention: Option<Duration>,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            timeout: DEFAULT_TIMEOUT,
            key_prefix: "ctxgc".into(),
            ca_file: None,
            retention: None,
        }
    }
}

/// Originals in Redis under `{prefix}:orig:{session}:{id}`, states under
/// `{prefix}:state:{name}`.
pub struct RedisStore {
    client: redis::Client,
    /// The URL as it may be shown (no password).
    shown: String,
    options: RedisOptions,
    connections: Pool<redis::Connection>,
    open: AtomicUsize,
    swap: redis::Script,
}

/// Sets a state if it is still the expected one: `ARGV[1]` is `1` when a state is expected
/// (`ARGV[2]`), `0` when none is; `ARGV[3]` the new state, `ARGV[4]` its expiry in seconds or
/// empty.
const SWAP_SCRIPT: &str = "local cur = redis.call('GET', KEYS[1])
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

/// `url` with the password in its user information replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let user = authority[..at].split(':').next().unwrap_or_default();
            let user = if authority[..at].contains(':') && !user.is_empty() {
                format!("{user}:***")
            } else if authority[..at].contains(':') {
                ":***".to_owned()
            } else {
                "***".to_owned()
            };
            format!("{scheme}://{user}@{}", &rest[at + 1..])
        }
        None => url.to_owned(),
    }
}

impl RedisStore {
    /// Connects to `url` with [`DEFAULT_TIMEOUT`].
    pub fn connect(url: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect_with(url, RedisOptions::default())
    }

    /// Connects with a deadline for every connect, write and read.
    pub fn connect_with_timeout(url: &str, timeout: Duration) -> Result<RedisStore, StoreError> {
        RedisStore::connect_with(
            url,
            RedisOptions {
                timeout,
                ..RedisOptions::default()
            },
        )
    }

    /// Connects as `options` say, and checks that the server answers (a wrong password or an
    /// unknown user is an error here, naming the server without the password).
    pub fn connect_with(url: &str, options: RedisOptions) -> Result<RedisStore, StoreError> {
        let shown = redact(url);
        let invalid = |why: String| StoreError::backend("redis", format!("{shown}: {why}"));
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(invalid(
                "not a Redis URL: use redis://[user:password@]host:port[/db] or rediss://..."
                    .into(),
            ));
        }
        if options.key_prefix.is_empty() || options.key_prefix.contains(char::is_whitespace) {
            return Err(invalid(
                "the key prefix must be non-empty, without spaces".into(),
            ));
        }
        let client = match &options.ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    invalid(format!("cannot read the CA file {}: {e}", path.display()))
                })?;
                redis::Client::build_with_tls(
                    url,
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    },
                )
            }
            None => redis::Client::open(url),
        }
        .map_err(|e| invalid(e.to_string()))?;
        let store = RedisStore {
            client,
            shown,
            connections: Pool::new(Vec::new(), options.timeout),
            options,
            open: AtomicUsize::new(0),
            swap: redis::Script::new(SWAP_SCRIPT),
        };
        store.run("reaching the server", |con| {
            redis::cmd("PING").query::<String>(con).map(|_| ())
        })?;
        Ok(store)
    }

    /// Keys expire this long after their last write (Redis `EX`).
    pub fn with_retention(mut self, retention: Duration) -> RedisStore {
        self.options.retention = Some(retention);
        self
    }

    fn expiry(&self) -> Option<u64> {
        self.options.retention.map(|r| r.as_secs().max(1))
    }

    fn key(&self, session: &SessionId, id: ContentId) -> String {
        format!("{}:orig:{session}:{id}", self.options.key_prefix)
    }

    /// The set of sessions holding an original, so that an id alone finds it.
    fn holders_key(&self, id: ContentId) -> String {
        format!("{}:holders:{id}", self.options.key_prefix)
    }

    fn state_key(&self, key: StateKey<'_>) -> String {
        format!("{}:state:{}", self.options.key_prefix, key.name())
    }

    fn open_connection(&self) -> Result<redis::Connection, redis::RedisError> {
        let con = self
            .client
            .get_connection_with_timeout(self.options.timeout)?;
        con.set_read_timeout(Some(self.options.timeout))?;
        con.set_write_timeout(Some(self.options.timeout))?;
        Ok(con)
    }

    /// A connection: an idle one, a new one while fewer than [`MAX_CONNECTIONS`] are open, else
    /// the next one given back within the deadline.
    fn connection(&self, what: &str) -> Result<Lent<'_, redis::Connection>, StoreError> {
        if let Some(con) = self.connections.take_idle() {
            return Ok(con);
        }
        if self.open.fetch_add(1, Ordering::AcqRel) < MAX_CONNECTIONS {
            return match self.open_connection() {
                Ok(con) => Ok(self.connections.lend(con)),
                Err(e) => {
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    if e.is_timeout() {
                        return Err(self.error(what, &e));
                    }
                    Err(StoreError::Unavailable {
                        backend: "redis",
                        message: format!("{what}: cannot connect to {}: {e}", self.shown),
                    })
                }
            };
        }
        self.open.fetch_sub(1, Ordering::AcqRel);
        self.connections.take().ok_or(StoreError::Timeout {
            backend: "redis",
            what: format!("{what}: every connection stayed busy"),
            after: self.options.timeout,
        })
    }

    /// Runs `f` on a connection; a broken connection is dropped (one fresh attempt when it
    /// was stale: Redis restarted, an idle connection closed; a timeout is not retried, so a
    /// stalled Redis costs one deadline).
    fn run<T>(
        &self,
        what: &str,
        f: impl Fn(&mut redis::Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let mut attempt = 0;
        loop {
            let mut con = self.connection(what)?;
            match f(&mut con) {
                Ok(value) => return Ok(value),
                Err(e) if e.is_unrecoverable_error() || e.is_io_error() || e.is_timeout() => {
                    // The exchange broke: a late reply may still come on it, so it is never
                    // reused. (An error reply leaves the connection in step: it goes back.)
                    con.discard();
                    self.open.fetch_sub(1, Ordering::AcqRel);
                    if attempt == 0 && e.is_connection_dropped() {
                        attempt += 1;
                        continue;
                    }
                    return Err(self.error(what, &e));
                }
                Err(e) => return Err(self.error(what, &e)),
            }
        }
    }

    fn error(&self, what: &str, e: &redis::RedisError) -> StoreError {
        if e.is_timeout() {
            return StoreError::Timeout {
                backend: "redis",
                what: what.to_owned(),
                after: self.options.timeout,
            };
        }
        // The crate's messages name no password; the URL is shown redacted.
        let message = format!("{what} at {}: {e}", self.shown);
        if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
            StoreError::Unavailable {
                backend: "redis",
                message,
            }
        } else {
            StoreError::backend("redis", message)
        }
    }
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
        // SET NX answers OK or nil when the key exists: both mean "stored"; an existing
        // original is still in use, so its expiry starts again (EXPIRE). All in one pipeline.
        let expiry = self.expiry();
        let mut pipe = redis::pipe();
        for (id, text) in originals {
            let key = self.key(session, *id);
            let holders = self.holders_key(*id);
            let set = pipe.cmd("SET").arg(&key).arg(text.as_bytes()).arg("NX");
            match expiry {
                Some(secs) => {
                    set.arg("EX").arg(secs).ignore();
                    pipe.cmd("EXPIRE").arg(&key).arg(secs).ignore();
                }
                None => {
                    set.ignore();
                }
            }
            pipe.cmd("SADD")
                .arg(&holders)
                .arg(session.as_str())
                .ignore();
            if let Some(secs) = expiry {
                pipe.cmd("EXPIRE").arg(&holders).arg(secs).ignore();
            }
        }
        self.run("saving originals", |con| pipe.query::<()>(con))
    }

    fn get(&self, session: &SessionId, id: ContentId) -> Result<Option<String>, StoreError> {
        let key = self.key(session, id);
        let bytes = self.run("loading an original", |con| {
            redis::cmd("GET").arg(&key).query::<Option<Vec<u8>>>(con)
        })?;
        bytes.map(text).transpose()
    }

    fn find(&self, scope: &str, id: ContentId) -> Result<Option<(SessionId, String)>, StoreError> {
        let holders = self.run("finding an original", |con| {
            redis::cmd("SMEMBERS")
                .arg(self.holders_key(id))
                .query::<Vec<String>>(con)
        })?;
        // Sorted, so that the same store answers the same way.
        let mut holders: Vec<String> = holders
            .into_iter()
            .filter(|session| session.starts_with(scope))
            .collect();
        holders.sort();
        for session in holders {
            let session = SessionId::new(session);
            // A holder whose original expired or was evicted answers nothing; the next may.
            if let Some(text) = self.get(&session, id)? {
                return Ok(Some((session, text)));
            }
        }
        Ok(None)
    }
}

impl StateStore for RedisStore {
    fn is_shared(&self) -> bool {
        true
    }

    fn put_state(&self, key: StateKey<'_>, state: &str) -> Result<(), StoreError> {
        let name = self.state_key(key);
        let expiry = self.expiry().filter(|_| key.expires());
        self.run("saving a state", |con| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&name).arg(state.as_bytes());
            if let Some(secs) = expiry {
                cmd.arg("EX").arg(secs);
            }
            cmd.query::<()>(con)
        })
    }

    fn get_state(&self, key: StateKey<'_>) -> Result<Option<String>, StoreError> {
        let name = self.state_key(key);
        let bytes = self.run("loading a state", |con| {
            redis::cmd("GET").arg(&name).query::<Option<Vec<u8>>>(con)
        })?;
        bytes.map(text).transpose()
    }

    fn swap_state(
        &self,
        key: StateKey<'_>,
        expected: Option<&str>,
        state: &str,
    ) -> Result<bool, StoreError> {
        let name = self.state_key(key);
        let expiry = self
            .expiry()
            .filter(|_| key.expires())
            .map(|s| s.to_string())
            .unwrap_or_default();
        // EVALSHA; the script is sent whole only when the server does not have it yet.
        let swapped = self.run("swapping a state", |con| {
            self.swap
                .key(&name)
                .arg(if expected.is_some() { "1" } else { "0" })
                .arg(expected.unwrap_or_default())
                .arg(state)
                .arg(&expiry)
                .invoke::<i64>(con)
        })?;
        Ok(swapped == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn a_url_is_shown_without_its_password() {
        assert_eq!(
            redact("redis://alice:s3cret@cache:6380/2"),
            "redis://alice:***@cache:6380/2"
        );
        assert_eq!(
            redact("rediss://:s3cret@cache:6380"),
            "rediss://:***@cache:6380"
        );
        assert_eq!(redact("redis://s3cret@cache"), "redis://***@cache");
        assert_eq!(redact("redis://cache:6379"), "redis://cache:6379");
    }
}
