//! Work that waits until the client has had its whole answer: done while the answer is still
//! being written, it would compete with that for the CPU (on a small machine, the time a client
//! waits), while after it, the agent is reading the answer and thinking.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use crate::intake::parse::RecentBodies;

/// `response`, which makes the kept bodies' spare copies ([`RecentBodies::make_spares`]) once
/// its body is done with (sent whole, or dropped), when a body was kept since they were last
/// made. The body is relayed frame for frame, with the same size and end.
pub(crate) fn then_make_spares(response: Response, recent: Arc<RecentBodies>) -> Response {
    if !recent.wants_spares() {
        return response;
    }
    response.map(|inner| {
        Body::new(Then {
            inner,
            _after: Spares(Some(recent)),
        })
    })
}

/// A body, then the work in `_after` when it is dropped (held for its `Drop` alone).
struct Then {
    inner: Body,
    _after: Spares,
}

impl HttpBody for Then {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Makes the spares when dropped, on a blocking thread of the runtime it is dropped in (none
/// when it is dropped outside one, as at shutdown).
struct Spares(Option<Arc<RecentBodies>>);

impl Drop for Spares {
    fn drop(&mut self) {
        if let (Some(recent), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn_blocking(move || recent.make_spares());
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;

    /// The answer goes through whole, with its length; the spares are made only once it is
    /// done with.
    #[tokio::test]
    async fn spares_are_made_once_the_answer_is_done_with() {
        let recent = Arc::new(RecentBodies::default());
        recent.want_spares_for_tests();
        let response = Response::new(Body::from("the answer"));
        let response = then_make_spares(response, recent.clone());
        assert_eq!(response.body().size_hint().exact(), Some(10));
        assert!(recent.wants_spares(), "not before the answer is done with");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"the answer");
        for _ in 0..100 {
            if !recent.wants_spares() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the spares were never made");
    }
}
