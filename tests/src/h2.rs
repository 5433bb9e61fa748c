//! A small HTTP/2 client (h2c, prior knowledge) that can end a request with a
//! trailers frame: the transport on which a body callback never sees the end
//! of the stream.

use axum::body::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;

/// A response: status and body.
#[derive(Debug, Clone)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response body.
    pub body: Bytes,
}

/// Sends one request over a fresh h2c connection to `addr`. With `trailers`,
/// the body is followed by a trailers frame (`x-checksum: 0`) and the data
/// frames never carry END_STREAM.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
    trailers: bool,
) -> anyhow::Result<Reply> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = Vec::new();
    // Two data frames, so the body arrives in more than one callback.
    let half = body.len() / 2;
    let body = Bytes::from(body);
    frames.push(Ok(Frame::data(body.slice(..half))));
    frames.push(Ok(Frame::data(body.slice(half..))));
    if trailers {
        let mut map = hyper::HeaderMap::new();
        map.insert("x-checksum", hyper::header::HeaderValue::from_static("0"));
        frames.push(Ok(Frame::trailers(map)));
    }
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let mut request = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, v.as_str());
    }
    let response = sender.send_request(request.body(body)?).await?;
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Reply { status, body })
}
