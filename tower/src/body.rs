//! The response body: the inner service's, or the short text of a refusal.

use bytes::Bytes;
use core::pin::Pin;
use core::task::{Context, Poll};
use http_body::{Body, Frame, SizeHint};

pin_project_lite::pin_project! {
    /// The body of a response that passed through [`RateLimit`](crate::RateLimit): the inner
    /// service's body, or the text of a refusal (`429 Too Many Requests`).
    #[project = Proj]
    pub enum RateLimitBody<B> {
        /// The inner service's body.
        Inner { #[pin] body: B },
        /// A refusal's text (taken once).
        Refused { text: Option<Bytes> },
    }
}

impl<B> RateLimitBody<B> {
    pub(crate) fn inner(body: B) -> Self {
        RateLimitBody::Inner { body }
    }

    pub(crate) fn refused(text: Bytes) -> Self {
        RateLimitBody::Refused {
            text: (!text.is_empty()).then_some(text),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project() {
            Proj::Inner { body } => body.poll_frame(cx),
            Proj::Refused { text } => Poll::Ready(text.take().map(|t| Ok(Frame::data(t)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RateLimitBody::Inner { body } => body.is_end_stream(),
            RateLimitBody::Refused { text } => text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RateLimitBody::Inner { body } => body.size_hint(),
            RateLimitBody::Refused { text } => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
        }
    }
}
