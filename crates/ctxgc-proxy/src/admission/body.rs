//! A request's body, admitted: memory reserved for it before it is read (its declared length
//! first, then as it grows), read within its deadline and size limit, decoded when the client
//! compressed it, and weighed by what parsing and rewriting it takes, against the memory
//! budget of the requests in flight ([`MemoryBudget`]). Past that budget the body is not
//! refused: it goes upstream as the client sent it (the route streams it), never buffered.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};

use crate::reply::Refusal;

/// What a body may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    /// Its size, read and decoded.
    pub(crate) max_bytes: usize,
    /// How long it may take to arrive.
    pub(crate) deadline: Duration,
}

/// A body admitted.
pub(crate) enum Admitted {
    /// Read whole and decoded, within the memory reserved for it (`weight`: what parsing and
    /// rewriting it takes, [`weight_of`]).
    Whole {
        bytes: Bytes,
        reserved: Reserved,
        weight: usize,
    },
    /// Past the memory budget (`short`: what it needed and what was left): `read`, then the
    /// rest of the body unread, go upstream as they come. The request's headers are the
    /// client's again.
    Unbuffered {
        read: Bytes,
        rest: Body,
        short: (usize, usize),
    },
}

/// Admits the body of the request whose head is `parts` (its `content-encoding` header goes
/// once the body is decoded). A refusal is the answer the client gets.
pub(crate) async fn admit(
    limits: BodyLimits,
    memory: &Arc<MemoryBudget>,
    parts: &mut Parts,
    body: Body,
) -> Result<Admitted, Refusal> {
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limits.max_bytes) {
        return Err(too_large(limits.max_bytes));
    }
    let mut reserved = match memory.reserve(declared.unwrap_or(0)) {
        Ok(reserved) => reserved,
        Err(short) => {
            let (read, rest) = (Bytes::new(), body);
            return Ok(Admitted::Unbuffered { read, rest, short });
        }
    };
    let bytes = match read_within(limits, body, &mut reserved).await? {
        Read::Whole(b) => b,
        Read::OverBudget { read, rest, short } => {
            return Ok(Admitted::Unbuffered { read, rest, short });
        }
    };
    // What the client sent, to forward as it came if the decoded body does not fit (the
    // headers are kept only when decoding changes them).
    let encoded = (
        parts
            .headers
            .contains_key(axum::http::header::CONTENT_ENCODING)
            .then(|| parts.headers.clone()),
        bytes.clone(),
    );
    let bytes = decode(limits.max_bytes, &mut parts.headers, bytes)?;
    // Read whole, the body is weighed by what parsing and rewriting it takes (objects weigh
    // more than their bytes): past the budget it goes upstream as the client sent it.
    let weight = weight_of(&bytes);
    if let Err(short) = reserved.settle(weight) {
        drop(bytes);
        if let Some(headers) = encoded.0 {
            parts.headers = headers;
        }
        let (read, rest) = (encoded.1, Body::empty());
        return Ok(Admitted::Unbuffered { read, rest, short });
    }
    Ok(Admitted::Whole {
        bytes,
        reserved,
        weight,
    })
}

/// What a body is weighed at while it is read, before its objects are counted: as
/// [`weight_of`] weighs its bytes, so that a body of few objects needs nothing more once read
/// (reserving less up front let 32 concurrent 30 MB bodies each take a part of the budget and
/// none find the rest).
pub(crate) const PARSED_FACTOR: usize = 2;

/// Bytes a parsed JSON object holds beside its strings (its map, its entries, the values and
/// the rewrite's notes on it), measured: a 10 MB request of 40,000 small tool results
/// (160,000 objects) peaked 190 MB above an idle proxy, a 30 MB one of 300 outputs of 100 KB
/// (1,500 objects) about three times its bytes.
const BYTES_PER_OBJECT: usize = 1_000;

/// What rewriting a body takes in memory: the body, its parsed strings, the new body spliced
/// from it, and what each object costs parsed.
pub(crate) fn weight_of(body: &[u8]) -> usize {
    let objects = memchr::memchr_iter(b'{', body).count();
    body.len()
        .saturating_mul(3)
        .saturating_add(objects.saturating_mul(BYTES_PER_OBJECT))
}

/// The memory the requests in flight may hold for rewriting.
pub(crate) struct MemoryBudget {
    limit: usize,
    used: AtomicUsize,
}

/// Memory reserved for one request: given back when dropped.
pub(crate) struct Reserved {
    bytes: usize,
    budget: Arc<MemoryBudget>,
}

impl Reserved {
    /// Whether no other request holds memory now.
    pub(crate) fn alone(&self) -> bool {
        self.budget.used() <= self.bytes
    }

    /// The body size the reservation covers.
    pub(crate) fn body_bytes(&self) -> usize {
        self.bytes / (PARSED_FACTOR + 1)
    }

    /// Grows the reservation to cover a body of `body_bytes`, if that fits; else `Err` with
    /// what it needed and what was left.
    pub(crate) fn grow(&mut self, body_bytes: usize) -> Result<(), (usize, usize)> {
        let more = body_bytes.saturating_sub(self.body_bytes());
        if more == 0 {
            return Ok(());
        }
        let mut extra = self.budget.reserve(more)?;
        // The extra bytes now belong to this reservation.
        self.bytes += std::mem::take(&mut extra.bytes);
        Ok(())
    }

    /// Grows the reservation to `weight` bytes in all (a body read whole, weighed with
    /// [`weight_of`]), if that fits; else `Err` with what it needed and what was left.
    pub(crate) fn settle(&mut self, weight: usize) -> Result<(), (usize, usize)> {
        let more = weight.saturating_sub(self.bytes);
        if more == 0 {
            return Ok(());
        }
        let mut extra = self
            .budget
            .reserve(more.div_ceil(PARSED_FACTOR + 1))
            .map_err(|(_, left)| (weight, left))?;
        self.bytes += std::mem::take(&mut extra.bytes);
        Ok(())
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicUsize::new(0),
        })
    }

    /// Bytes reserved now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// The budget.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Reserves what a body of `body_bytes` takes to rewrite, if that fits; else `Err` with
    /// what it needed and what was left.
    pub(crate) fn reserve(self: &Arc<Self>, body_bytes: usize) -> Result<Reserved, (usize, usize)> {
        let needed = body_bytes.saturating_mul(PARSED_FACTOR + 1);
        let mut used = self.used.load(Ordering::Acquire);
        loop {
            let left = self.limit.saturating_sub(used);
            if needed > left {
                return Err((needed, left));
            }
            match self.used.compare_exchange_weak(
                used,
                used + needed,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    return Ok(Reserved {
                        bytes: needed,
                        budget: self.clone(),
                    });
                }
                Err(now) => used = now,
            }
        }
    }
}

/// What reading a body gave.
enum Read {
    /// The whole body, within the memory reserved for it.
    Whole(Bytes),
    /// The body outgrew what the memory budget had left: what was read, and the rest unread.
    OverBudget {
        read: Bytes,
        rest: Body,
        short: (usize, usize),
    },
}

/// The request body, within the deadline and size of `limits`, growing `reserved` as it
/// arrives (a body of undeclared length).
async fn read_within(
    limits: BodyLimits,
    mut body: Body,
    reserved: &mut Reserved,
) -> Result<Read, Refusal> {
    use http_body_util::BodyExt;
    let until = tokio::time::Instant::now() + limits.deadline;
    // A declared length is reserved already: the buffer takes it at once instead of growing
    // by doubling, which copied a 100K-token body about once more and faulted in its pages.
    let mut buffer = bytes::BytesMut::with_capacity(reserved.body_bytes());
    loop {
        let frame = match tokio::time::timeout_at(until, body.frame()).await {
            Err(_) => {
                return Err(Refusal(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    format!(
                        "ctxgc: the request body did not arrive within {} s",
                        limits.deadline.as_secs()
                    ),
                ));
            }
            Ok(None) => return Ok(Read::Whole(buffer.freeze())),
            // A body cut short by the client is no body too large.
            Ok(Some(Err(e))) => {
                return Err(Refusal(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    format!("ctxgc: the request body was cut short before its end ({e})"),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let total = buffer.len() + data.len();
        if total > limits.max_bytes {
            return Err(too_large(limits.max_bytes));
        }
        if total > reserved.body_bytes() {
            // Reserve ahead, so a long body does not ask for every chunk.
            let want = total.max(reserved.body_bytes() * 2).min(limits.max_bytes);
            if let Err(short) = reserved.grow(want).or_else(|_| reserved.grow(total)) {
                buffer.extend_from_slice(&data);
                return Ok(Read::OverBudget {
                    read: buffer.freeze(),
                    rest: body,
                    short,
                });
            }
        }
        buffer.extend_from_slice(&data);
    }
}

/// The answer to a body past the configured limit.
fn too_large(max_bytes: usize) -> Refusal {
    Refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        "request_too_large",
        format!("ctxgc: request body larger than the configured limit of {max_bytes} bytes"),
    )
}

/// A request body as sent, decoded when the client compressed it (`content-encoding: gzip` or
/// `deflate`, as SDKs may); the header goes, since what is forwarded is the decoded body. The
/// decoded size is bounded like the body itself.
fn decode(max_bytes: usize, headers: &mut HeaderMap, bytes: Bytes) -> Result<Bytes, Refusal> {
    use std::io::Read;
    let encoding = headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if encoding.is_empty() || encoding == "identity" {
        headers.remove("content-encoding");
        return Ok(bytes);
    }
    let limit = max_bytes as u64 + 1;
    let mut out = Vec::new();
    let read = match encoding.as_str() {
        "gzip" | "x-gzip" => flate2::read::MultiGzDecoder::new(&bytes[..])
            .take(limit)
            .read_to_end(&mut out),
        // HTTP's deflate is zlib-wrapped; some clients send it raw.
        "deflate" => flate2::read::ZlibDecoder::new(&bytes[..])
            .take(limit)
            .read_to_end(&mut out)
            .or_else(|_| {
                out.clear();
                flate2::read::DeflateDecoder::new(&bytes[..])
                    .take(limit)
                    .read_to_end(&mut out)
            }),
        other => {
            return Err(Refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                format!(
                    "ctxgc: request content-encoding `{other}` is not supported (send gzip, deflate or none)"
                ),
            ));
        }
    };
    if let Err(e) = read {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("ctxgc: the request body is not valid {encoding}: {e}"),
        ));
    }
    if out.len() as u64 >= limit {
        return Err(Refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!(
                "ctxgc: decoded request body larger than the configured limit of {max_bytes} bytes"
            ),
        ));
    }
    headers.remove("content-encoding");
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_reserved_and_given_back() {
        let budget = MemoryBudget::new(90 << 20);
        let mut a = budget.reserve(10 << 20).unwrap();
        assert_eq!(budget.used(), 30 << 20);
        a.settle(45 << 20).unwrap();
        assert_eq!(budget.used(), 45 << 20);
        let b = budget.reserve(10 << 20).unwrap();
        let (needed, left) = budget.reserve(10 << 20).err().unwrap();
        assert_eq!((needed, left), (30 << 20, 15 << 20));
        drop((a, b));
        assert_eq!(budget.used(), 0);
        // Objects weigh more than their bytes.
        let objects = "{\"a\":1},".repeat(1000);
        assert_eq!(
            weight_of(objects.as_bytes()),
            8000 * 3 + 1000 * BYTES_PER_OBJECT
        );
    }
}
