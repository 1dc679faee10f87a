//! What the listener and the status page answer with: a whole body or an
//! event stream behind one type, and the time a client has to send a body. A
//! leaf: the listener (`listener`) hands `/status` to the page (`page`), and
//! both build answers here, so neither imports the other's helpers.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

/// How long a client may take to send its body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// An answer: a whole body, or the status page's event stream.
pub type Answer = Response<BoxBody<Bytes, std::convert::Infallible>>;

/// An answer of `status` with the whole `body` of type `kind`.
pub fn full(status: StatusCode, kind: &'static str, body: impl Into<Bytes>) -> Answer {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(kind));
    r
}
