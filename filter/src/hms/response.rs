//! The response half of an HMS stream: every raw id becomes an alias, or the
//! response is withheld.
//!
//! Headers (scanned ones copied; a body closes the response hold) → body held
//! to its end → decoded when content-encoded, read as UTF-8 when declared
//! windows-1252 → scanned → one encode callout (skipped only for an empty body
//! with no id) → body and headers rewritten, handed on through the hold
//! filter's verdict line (or, bodiless, to the headers paused here) → resumed.
//! Anything that cannot be aliased replaces the response with a 502 JSON error
//! and removes every scanned header.

use super::{body_kind, hand_on, taxonomy, HandOnError, Headers, Side, Stream};
use crate::callout::{self, Answer, Callout, Sent};
use crate::hold::{self, HeaderEdit, Verdict};
use crate::host;
use crate::metrics::{count, count_named};
use keyhole_core::alias::{
    BodyKind, EncodeRequest, EncodeResponse, KnownAlias, PartId, ResponseScan, Taxonomy,
};
use keyhole_core::config::Enforce;
use keyhole_core::proto::alias::WithTaxonomy;
use keyhole_core::proto::reply::{self, LocalReply};
use keyhole_core::proto::withhold::{Withheld, UNSCANNED_RESPONSE_HEADERS};
use keyhole_core::{alias::charset, alias::coding, alias::lastword};
use proxy_wasm::types::{Action, BufferType, StreamType};

/// The response half of one HMS stream.
#[derive(Default)]
pub(super) struct Response {
    state: State,
    /// The encode callout.
    callout: Callout,
}

/// Where the response is.
#[derive(Default)]
enum State {
    /// No response being aliased: not started, or done.
    #[default]
    Idle,
    /// Holding the body to its end (the hold filter holds the headers).
    Reading {
        headers: Vec<(String, String)>,
        latin1: Vec<bool>,
        kind: BodyKind,
    },
    /// Waiting for control's encode answer.
    Encoding { job: Box<Job> },
}

/// A response being aliased: the scan and everything needed to apply it.
struct Job {
    scan: ResponseScan<'static>,
    /// The complete body as read (decoded when it came compressed), and its
    /// part (`None` for an empty body).
    body: Vec<u8>,
    body_part: Option<PartId>,
    /// What Envoy holds of the body: its length, and whether it is encoded
    /// (`content-encoding` then goes with the rewrite: keyhole sends the body
    /// on decoded).
    held: Held,
    /// Scanned headers: name, original value, part.
    headers: Vec<(String, String, PartId)>,
    /// Per scanned header: its value was not UTF-8 and is read one
    /// character per byte ([`charset::header_text`]); it goes back as bytes.
    latin1: Vec<bool>,
    /// [`Headers::Held`] with a body, [`Headers::Direct`] for a bodiless
    /// response (its headers paused here).
    hold: Headers,
    /// The body's declared kind: an event stream's framing is no YAML.
    kind: BodyKind,
}

impl Job {
    /// Scans `body` (read as `kind`) and `headers` of the response to `s`'s
    /// request (the listener's taxonomy, the id kind its path names) for
    /// ids; fails, never quoting the response, when a part cannot be read.
    fn scan(
        s: &Stream,
        headers: &[(String, String)],
        latin1: Vec<bool>,
        body: Vec<u8>,
        held: Held,
        kind: BodyKind,
        hold: Headers,
    ) -> Result<Job, String> {
        let tax = taxonomy(&s.config);
        let mut scan = ResponseScan::new(tax);
        let body_part = if body.is_empty() {
            None
        } else {
            Some(
                scan.add(&body, kind, tax.kind_for_path(&s.path))
                    .map_err(|e| format!("{}: {e}", e.reason().as_str()))?,
            )
        };
        let headers = headers
            .iter()
            .map(|(name, value)| {
                let part = scan
                    .add(value.as_bytes(), BodyKind::Text, None)
                    .map_err(|e| e.to_string())?;
                Ok((name.clone(), value.clone(), part))
            })
            .collect::<Result<_, String>>()?;
        Ok(Job {
            scan,
            body,
            body_part,
            held,
            headers,
            latin1,
            hold,
            kind,
        })
    }

    /// The held body's length, for [`Response::withhold`].
    fn held_body(&self) -> Option<usize> {
        (self.hold == Headers::Held).then_some(self.held.len)
    }

    /// The header removals of a withheld response.
    fn removals(&self) -> Vec<HeaderEdit> {
        removals(self.headers.iter().map(|(name, _, _)| name.as_str()))
    }
}

/// What Envoy holds of a response body.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Bytes in Envoy's buffer (what a rewrite replaces).
    len: usize,
    /// They are content-encoded; keyhole read them decoded.
    encoded: bool,
    /// They are windows-1252 text (declared so); keyhole read them as UTF-8
    /// and sends them on so, saying so in `content-type`.
    transcoded: bool,
}

impl Held {
    /// Nothing held: a bodiless response.
    const NONE: Held = Held {
        len: 0,
        encoded: false,
        transcoded: false,
    };
}

/// `body` as keyhole reads it: decoded by its `content-encoding` when it has
/// one (at most `limit` bytes), and as UTF-8 when its `content-type` declares
/// windows-1252 / ISO-8859-1. Fails naming why (never quoting the body).
fn decoded(
    headers: &[(String, String)],
    body: Vec<u8>,
    limit: usize,
) -> Result<(Vec<u8>, Held), String> {
    let codings = headers
        .iter()
        .filter(|(name, _)| name == "content-encoding")
        .map(|(_, value)| coding::parse(value))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?
        .concat();
    let mut held = Held {
        len: body.len(),
        encoded: !codings.is_empty(),
        transcoded: false,
    };
    let mut body = if codings.is_empty() {
        body
    } else {
        coding::decode(&body, &codings, limit).map_err(|e| e.to_string())?
    };
    let windows_1252 = headers
        .iter()
        .find(|(name, _)| name == "content-type")
        .and_then(|(_, value)| charset::declared(value))
        .is_some_and(|label| charset::is_windows_1252(&label));
    if windows_1252 && !body.is_ascii() {
        body = charset::windows_1252_to_utf8(&body);
        held.transcoded = true;
    }
    Ok((body, held))
}

/// Makes `edits` set `content-type` to say UTF-8 (its rewritten value, if it
/// has one, else the value HMS sent).
fn say_utf8(job: &Job, edits: &mut Vec<HeaderEdit>) {
    let rewritten = edits.iter_mut().find_map(|e| match e {
        HeaderEdit::Set(name, value) if name == "content-type" => Some(value),
        _ => None,
    });
    match rewritten {
        Some(value) => *value = charset::with_utf8(value),
        None => {
            if let Some((_, value, _)) = job
                .headers
                .iter()
                .find(|(name, _, _)| name == "content-type")
            {
                edits.push(HeaderEdit::Set(
                    "content-type".to_owned(),
                    charset::with_utf8(value),
                ));
            }
        }
    }
}

/// Removals of every header in `names` that may hold an id (one per name).
fn removals<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<HeaderEdit> {
    let mut out: Vec<HeaderEdit> = Vec::new();
    for name in names {
        if !hold::KEPT_ON_WITHHOLD.contains(&name) && !out.iter().any(|e| e.name() == name) {
            out.push(HeaderEdit::Remove(name.to_owned()));
        }
    }
    out
}

/// The names of copied headers.
fn names(headers: &[(String, String)]) -> impl Iterator<Item = &str> {
    headers.iter().map(|(name, _)| name.as_str())
}

impl Response {
    /// Encodes a bodiless response at once (its headers paused here), or
    /// closes the hold so the headers wait for the body.
    pub(super) fn on_headers(&mut self, s: &Stream, end_of_stream: bool) -> Action {
        if !matches!(self.state, State::Idle) {
            return Action::Continue;
        }
        let Ok(all) = host::response_headers_raw() else {
            return self.withhold(
                s,
                Withheld::Host,
                None,
                Vec::new(),
                "the response headers could not be read",
            );
        };
        // Values keep their bytes: one that is not UTF-8 is read one
        // character per byte and written back so.
        let all: Vec<((String, String), bool)> = all
            .into_iter()
            .map(|(n, v)| {
                let (text, latin1) = charset::header_text(&v);
                ((n, text), latin1)
            })
            .collect();
        let kind = body_kind(
            all.iter()
                .find(|((n, _), _)| n == "content-type")
                .map(|((_, v), _)| v.as_str()),
        );
        let (headers, latin1): (Vec<(String, String)>, Vec<bool>) = all
            .into_iter()
            .filter(|((n, _), _)| {
                !n.starts_with(':') && !UNSCANNED_RESPONSE_HEADERS.contains(&n.as_str())
            })
            .unzip();
        if s.config.enforce == Enforce::Shadow {
            // Nothing is held: the headers go on as they are, the body is
            // read at its end and only counted.
            if end_of_stream {
                return shadow_measure(s, headers, latin1, Vec::new(), kind);
            }
            self.state = State::Reading {
                headers,
                latin1,
                kind,
            };
            return Action::Continue;
        }
        if end_of_stream {
            return self.encode(
                s,
                headers,
                latin1,
                Vec::new(),
                Held::NONE,
                kind,
                Headers::Direct,
            );
        }
        if host::set_response_header(hold::HOLD_HEADER, Some(hold::HOLD_CLOSED)).is_err() {
            count(s.metrics.hms.withheld(Withheld::Host), 1);
            return self.refuse(&reply::unaliasable("the response could not be held"));
        }
        self.state = State::Reading {
            headers,
            latin1,
            kind,
        };
        Action::Continue
    }

    /// Holds the body to its end, then encodes it (decoded first when it is
    /// content-encoded).
    pub(super) fn on_body(&mut self, s: &Stream, body_size: usize, end_of_stream: bool) -> Action {
        match self.state {
            State::Reading { .. } if !end_of_stream => return Action::Pause,
            State::Reading { .. } => {}
            State::Encoding { .. } => return Action::Pause,
            State::Idle => return Action::Continue,
        }
        let State::Reading {
            headers,
            latin1,
            kind,
        } = std::mem::replace(&mut self.state, State::Idle)
        else {
            return Action::Pause;
        };
        if s.config.enforce == Enforce::Shadow {
            // An unreadable body is forwarded as it is, counted as unreadable.
            let body = host::buffer(BufferType::HttpResponseBody, body_size).unwrap_or_default();
            return shadow_measure(s, headers, latin1, body, kind);
        }
        let Ok(body) = host::buffer(BufferType::HttpResponseBody, body_size) else {
            let removals = removals(names(&headers));
            return self.withhold(
                s,
                Withheld::Host,
                Some(body_size),
                removals,
                "the response body could not be read",
            );
        };
        match decoded(&headers, body, s.config.max_body_bytes) {
            Ok((body, held)) => self.encode(s, headers, latin1, body, held, kind, Headers::Held),
            Err(reason) => self.withhold(
                s,
                Withheld::Unreadable,
                Some(body_size),
                removals(names(&headers)),
                &reason,
            ),
        }
    }

    /// Trailers end the body without an end-of-stream body callback: it was
    /// never scanned, so it must not go on.
    pub(super) fn on_trailers(&mut self, s: &Stream) -> Action {
        if s.config.enforce == Enforce::Shadow {
            if matches!(self.state, State::Reading { .. }) {
                self.state = State::Idle;
                count(s.metrics.hms.shadow_withheld(Withheld::Trailers), 1);
            }
            return Action::Continue;
        }
        if matches!(self.state, State::Reading { .. }) {
            count(s.metrics.hms.withheld(Withheld::Trailers), 1);
            return self.refuse(&reply::unaliasable(
                "responses with trailers cannot be aliased",
            ));
        }
        Action::Continue
    }

    /// Handles the encode answer when `token` is the encode callout's.
    pub(super) fn on_call_response(&mut self, s: &Stream, token: u32, body_size: usize) {
        if !self.callout.claim(token) {
            return;
        }
        let action = match std::mem::replace(&mut self.state, State::Idle) {
            State::Encoding { job } => self.on_encoded(s, *job, callout::answer(body_size)),
            other => {
                self.state = other;
                Action::Pause
            }
        };
        self.callout.settle(action, StreamType::HttpResponse);
    }

    /// Scans a complete response and asks control to encode its ids.
    #[allow(clippy::too_many_arguments)]
    fn encode(
        &mut self,
        s: &Stream,
        headers: Vec<(String, String)>,
        latin1: Vec<bool>,
        body: Vec<u8>,
        held: Held,
        kind: BodyKind,
        hold: Headers,
    ) -> Action {
        let held_body = (hold == Headers::Held).then_some(held.len);
        let job = match Job::scan(s, &headers, latin1, body, held, kind, hold) {
            Ok(job) => Box::new(job),
            Err(reason) => {
                return self.withhold(
                    s,
                    Withheld::Unreadable,
                    held_body,
                    removals(names(&headers)),
                    &reason,
                )
            }
        };
        // A body with no structured id may still mention an id the session
        // learned from an earlier body (prose, text/plain, a URL): control
        // answers with the session's known ids, so it is asked whenever there
        // is a body. Only an empty body with no id skips the callout.
        if job.scan.is_empty() && job.body.is_empty() {
            return self.apply(s, *job, &[], &[]);
        }
        let question = WithTaxonomy::new(
            EncodeRequest {
                session: s.session.clone(),
                ids: job.scan.ids().to_vec(),
                prompt: false,
            },
            taxonomy(&s.config),
        );
        let Ok(payload) = serde_json::to_vec(&question) else {
            let removals = job.removals();
            return self.withhold(
                s,
                Withheld::Control,
                held_body,
                removals,
                "the encode request could not be built",
            );
        };
        self.state = State::Encoding { job };
        count(s.metrics.hms.response_callouts, 1);
        match self
            .callout
            .send(&s.config.control, "/v1/alias/encode", &payload)
        {
            Ok(Sent::Waiting) => Action::Pause,
            Ok(Sent::Answered(action)) => action,
            Err(e) => {
                log::warn!(
                    "keyhole.alias-dispatch context={} status={}",
                    s.context_id,
                    e.status
                );
                self.state = State::Idle;
                self.withhold(
                    s,
                    Withheld::Control,
                    held_body,
                    removals(names(&headers)),
                    "control unreachable",
                )
            }
        }
    }

    /// Applies control's encode answer.
    fn on_encoded(&mut self, s: &Stream, job: Job, answer: Answer<EncodeResponse>) -> Action {
        match answer {
            Answer::Ok(e) => self.apply(s, job, &e.aliases, &e.known),
            Answer::Failed(failure) => {
                let why = Withheld::of_code(failure.code);
                let reason = match why {
                    Withheld::Taxonomy => {
                        "the filter and control run different taxonomies".to_owned()
                    }
                    Withheld::Conflict => "conflicting ids for one record".to_owned(),
                    Withheld::Store => "alias store unavailable".to_owned(),
                    _ if failure.status == 0 => "control answered garbage".to_owned(),
                    _ => format!("control answered {}", failure.status),
                };
                self.withhold(s, why, job.held_body(), job.removals(), &reason)
            }
        }
    }

    /// Rewrites body and headers with `aliases` (parallel to the scan's ids)
    /// and `known` (the session's ids from earlier bodies, with their
    /// aliases), and hands the response on.
    fn apply(&mut self, s: &Stream, job: Job, aliases: &[String], known: &[KnownAlias]) -> Action {
        let (body, mut edits, headers) = match rewrite(&job, aliases, known) {
            Ok(rewritten) => rewritten,
            Err(reason) => {
                return self.withhold(
                    s,
                    Withheld::Unreadable,
                    job.held_body(),
                    job.removals(),
                    &reason,
                )
            }
        };
        // The last word: what is about to leave, read by a check that shares
        // nothing with the scan and the rewrite. A raw id it finds withholds
        // the response, counted and logged by reason (never the value).
        if let Some(found) = last_word(taxonomy(&s.config), &job, aliases, known, &body, &headers) {
            count(s.metrics.hms.last_word(found.reason), 1);
            let reason = format!(
                "last word: a raw id ({}) in the {}{}",
                found.reason.as_str(),
                found.place.as_str(),
                if found.decoded { ", encoded" } else { "" }
            );
            return self.withhold(
                s,
                Withheld::LastWord,
                job.held_body(),
                job.removals(),
                &reason,
            );
        }
        log::info!(
            "keyhole.alias-encode context={} session={} ids={} headers_rewritten={} bytes_in={} bytes_out={}",
            s.context_id,
            s.session,
            aliases.len(),
            edits.len(),
            job.body.len(),
            body.len()
        );
        self.state = State::Idle;
        let aliased = !aliases.is_empty() || !edits.is_empty() || body != job.body;
        if job.held.encoded {
            edits.push(HeaderEdit::Remove("content-encoding".to_owned()));
        }
        if job.held.transcoded {
            say_utf8(&job, &mut edits);
        }
        // A bodiless response has no body to replace.
        let new_body = (job.hold == Headers::Held).then_some(body.as_slice());
        match hand_on(
            Side::Response,
            job.hold,
            &Verdict::keep(edits),
            job.held.len,
            new_body,
        ) {
            Ok(()) => {}
            Err(HandOnError::Verdict(e)) => {
                return self.withhold(
                    s,
                    Withheld::Unreadable,
                    job.held_body(),
                    job.removals(),
                    &e.to_string(),
                )
            }
            Err(HandOnError::Header(_)) => {
                let reason = "a header could not be rewritten";
                return self.withhold(s, Withheld::Host, None, job.removals(), reason);
            }
            Err(HandOnError::Body(_)) => {
                count(s.metrics.hms.withheld(Withheld::Host), 1);
                return self.refuse(&reply::unaliasable(
                    "the response body could not be rewritten",
                ));
            }
        }
        if aliased {
            count(s.metrics.hms.responses_aliased, 1);
        }
        Action::Continue
    }

    /// Replaces the response with a 502 JSON error and makes `removals` (every
    /// scanned header that may hold an id). `held_body` is the length of the
    /// held body (`None` for a bodiless response, whose headers are paused
    /// here). `reason` must not quote the response.
    fn withhold(
        &mut self,
        s: &Stream,
        why: Withheld,
        held_body: Option<usize>,
        removals: Vec<HeaderEdit>,
        reason: &str,
    ) -> Action {
        log::warn!(
            "keyhole.alias-withheld context={} session={} why={} reason={reason:?}",
            s.context_id,
            s.session,
            why.as_str()
        );
        count(s.metrics.hms.withheld(why), 1);
        self.state = State::Idle;
        let reply = reply::unaliasable(reason);
        let verdict = Verdict {
            status: reply.status,
            names: Vec::new(),
            edits: removals,
        };
        let (hold, old_len, body) = match held_body {
            Some(old_len) => (Headers::Held, old_len, Some(reply.body.as_slice())),
            None => (Headers::Direct, 0, None),
        };
        match hand_on(Side::Response, hold, &verdict, old_len, body) {
            // The hold filter puts the 502 in place of the response.
            Ok(()) if hold == Headers::Held => Action::Continue,
            // Bodiless: the headers paused here are answered locally, the
            // removals made or not. Without a verdict, too.
            Ok(()) | Err(HandOnError::Header(_) | HandOnError::Verdict(_)) => self.refuse(&reply),
            Err(HandOnError::Body(_)) => self.refuse(&reply::unaliasable(
                "the response body could not be rewritten",
            )),
        }
    }

    /// Last resort: a local 502 while the response headers have not left
    /// Envoy (held or paused). The stream is never resumed afterwards, so the
    /// upstream response cannot follow.
    fn refuse(&mut self, reply: &LocalReply) -> Action {
        // Refused too, the response stays paused: still nothing leaves.
        let _ = host::send_json(reply.status, &reply.body, &[]);
        self.state = State::Idle;
        Action::Pause
    }
}

/// `enforce: shadow`: scans a response that goes on unchanged (`body` as
/// HMS sent it) and counts what `on` would have done with it: the ids it
/// would have aliased, by kind (`keyhole.hms_shadow.ids.<kind>`), and a
/// response it would have withheld because it cannot be read
/// (`keyhole.hms_shadow.withheld.unreadable`). No encode callout: no alias
/// is minted and no value stored, so the reasons that need control's answer
/// (a store down, a rewrite the last word refuses) are not measured.
fn shadow_measure(
    s: &Stream,
    headers: Vec<(String, String)>,
    latin1: Vec<bool>,
    body: Vec<u8>,
    kind: BodyKind,
) -> Action {
    count(s.metrics.hms.shadow_responses, 1);
    let scanned = decoded(&headers, body, s.config.max_body_bytes)
        .and_then(|(body, held)| Job::scan(s, &headers, latin1, body, held, kind, Headers::Held));
    let job = match scanned {
        Ok(job) => job,
        Err(reason) => {
            count(s.metrics.hms.shadow_withheld(Withheld::Unreadable), 1);
            log::info!(
                "keyhole.shadow-withheld context={} why=unreadable reason={reason:?}",
                s.context_id
            );
            return Action::Continue;
        }
    };
    let ids = job.scan.ids();
    if !ids.is_empty() {
        count(s.metrics.hms.shadow_with_ids, 1);
    }
    let mut by_kind: Vec<(&str, i64)> = Vec::new();
    for id in ids {
        let kind = id.kind.as_deref().unwrap_or("unknown");
        match by_kind.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => by_kind.push((kind, 1)),
        }
    }
    for (kind, n) in &by_kind {
        count_named(&format!("keyhole.hms_shadow.ids.{kind}"), *n);
    }
    log::info!(
        "keyhole.shadow-ids context={} ids={} kinds={}",
        s.context_id,
        ids.len(),
        by_kind.len()
    );
    Action::Continue
}

/// What the last word finds in a rewritten response (`body`, and every
/// scanned header as it will leave), if anything.
fn last_word(
    tax: &Taxonomy,
    job: &Job,
    aliases: &[String],
    known: &[KnownAlias],
    body: &[u8],
    headers: &[(String, String)],
) -> Option<lastword::Finding> {
    let raw = job.scan.raw_values(known);
    let given = aliases
        .iter()
        .map(String::as_str)
        .chain(known.iter().map(|k| k.alias.as_str()));
    let word = lastword::LastWord::new(tax, raw, given);
    if !body.is_empty() {
        let found = match job.kind {
            BodyKind::EventStream => word.check_event_stream(body),
            _ => word.check_body(body),
        };
        if found.is_some() {
            return found;
        }
    }
    headers
        .iter()
        .find_map(|(name, value)| word.check_header(name.as_bytes(), value.as_bytes()))
}

/// Every scanned header as it will leave: name and value, rewritten or not.
type FinalHeaders = Vec<(String, String)>;

/// One header name's values as rewritten (text, and whether it goes back as
/// bytes), and whether any of them changed.
type HeaderValues<'a> = (&'a str, Vec<(String, bool)>, bool);

/// The rewritten body, the header edits of `job` and its headers as they
/// will leave, or why the response cannot be aliased (never quoting it).
fn rewrite(
    job: &Job,
    aliases: &[String],
    known: &[KnownAlias],
) -> Result<(Vec<u8>, Vec<HeaderEdit>, FinalHeaders), String> {
    let rewriter = job
        .scan
        .rewriter(aliases, known)
        .map_err(|e| e.to_string())?;
    let body = match job.body_part {
        Some(part) => rewriter
            .rewrite(part, &job.body)
            .map_err(|e| e.to_string())?,
        None => Vec::new(),
    };
    // Per header name, in order of first appearance: every value, rewritten
    // (text, and whether it goes back as bytes), and whether any changed. A
    // repeated header (`Link` twice) is set to all its values again, so it
    // stays repeated.
    let mut values: Vec<HeaderValues<'_>> = Vec::new();
    for ((name, value, part), latin1) in job
        .headers
        .iter()
        .zip(job.latin1.iter().chain(std::iter::repeat(&false)))
    {
        let out = rewriter
            .rewrite(*part, value.as_bytes())
            .map_err(|e| e.to_string())?;
        let changed = out != value.as_bytes();
        let new =
            String::from_utf8(out).map_err(|_| "a header could not be rewritten".to_owned())?;
        match values.iter_mut().find(|(n, _, _)| *n == name.as_str()) {
            Some((_, all, any)) => {
                all.push((new, *latin1));
                *any |= changed;
            }
            None => values.push((name.as_str(), vec![(new, *latin1)], changed)),
        }
    }
    let finals = values
        .iter()
        .flat_map(|(name, all, _)| all.iter().map(|(v, _)| ((*name).to_owned(), v.clone())))
        .collect();
    let mut edits = Vec::new();
    for (name, all, changed) in values {
        if !changed {
            continue;
        }
        if all.iter().any(|(_, latin1)| *latin1) {
            // Written back byte for byte: only the alias changed.
            let bytes = all
                .into_iter()
                .map(|(v, latin1)| {
                    if latin1 {
                        charset::header_bytes(&v)
                    } else {
                        Some(v.into_bytes())
                    }
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| "a header could not be rewritten".to_owned())?;
            edits.extend(HeaderEdit::set_all_bytes(name, bytes));
        } else {
            edits.extend(HeaderEdit::set_all(
                name,
                all.into_iter().map(|(v, _)| v).collect(),
            ));
        }
    }
    Ok((body, edits, finals))
}
