//! A client of the HMS listener: one request through Envoy, and the answer
//! as the client saw it.

/// The session header of the default filter configuration.
pub const SESSION_HEADER: &str = "x-keyhole-session";

/// A response as the client saw it.
pub struct Reply {
    /// Its status code.
    pub status: u16,
    /// Its headers.
    pub headers: reqwest::header::HeaderMap,
    /// Its body.
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    /// Every header as `name: value` lines.
    pub fn header_text(&self) -> String {
        self.headers
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", v.to_str().unwrap_or("?")))
            .collect()
    }

    /// Reads a response whole.
    pub async fn read(resp: reqwest::Response) -> Reply {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().await.expect("body").to_vec();
        Reply {
            status,
            headers,
            body,
        }
    }
}

/// Sends `method path` to `base` (the HMS listener's URL) in `session`, with
/// a JSON `body`; asserts that a `content-length` the answer carries is its
/// body's.
pub async fn send(
    base: &str,
    method: &str,
    path: &str,
    session: Option<&str>,
    body: Option<Vec<u8>>,
) -> Reply {
    let mut req = reqwest::Client::new().request(method.parse().unwrap(), format!("{base}{path}"));
    if let Some(s) = session {
        req = req.header(SESSION_HEADER, s);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    let reply = Reply::read(req.send().await.expect("request through envoy")).await;
    if let Some(len) = reply.headers.get("content-length") {
        assert_eq!(
            len.to_str().unwrap().parse::<usize>().unwrap(),
            reply.body.len(),
            "content-length is the body's"
        );
    }
    reply
}
