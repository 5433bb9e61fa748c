//! One pass over a JSON body: which strings and numbers are ids, of which
//! kind, grouped by the object they belong to. The values themselves are
//! read in [`values`].

use crate::alias::id::KindId;
use crate::alias::shape::{self, TextHit};
use crate::alias::taxonomy::KeyRole;
use crate::json::lexer::{text_of, Event, JsonError, Lexer, Lit};
use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use super::*;

mod values;

/// A member of an object waiting for the object's kind.
#[derive(Debug)]
struct Member<'a> {
    role: Option<KeyRole>,
    /// For id fields: the field's kind. For references: none (see `kinds`).
    field_kind: Option<KindId>,
    /// Resource-type kinds of a self-reference.
    kinds: Vec<KindId>,
    value: Cow<'a, str>,
    loc: Loc,
    /// An `id` that is an id only if its object is a FHIR resource (a
    /// word, or an element id inside a resource).
    weak: bool,
}

#[derive(Debug, Default)]
struct Obj<'a> {
    /// The key the object sits under.
    key: Option<KeyInfo>,
    primary: bool,
    resource_type: Option<Cow<'a, str>>,
    /// The key of the member being read.
    cur_key: Option<KeyInfo>,
    /// Where the object's own ids start in [`Walker::members`].
    members_from: usize,
    /// How many occurrences the part had when the object began (see
    /// [`Walker::insert_occ`]).
    occs_from: usize,
    /// The kind its `system` member names as a business identifier system.
    identifier_kind: Option<KindId>,
    /// Its `value` member, a string: with a business identifier system,
    /// an id of that kind.
    identifier_value: Option<(Cow<'a, str>, Loc)>,
}

#[derive(Debug)]
enum Frame<'a> {
    Obj(Obj<'a>),
    Arr {
        /// The key the array sits under.
        key: Option<KeyInfo>,
        primary: bool,
    },
}

/// Walks one JSON document into `part`: its ids, literals and numbers.
pub(crate) fn walk(
    scan: &mut ResponseScan<'_>,
    src: &str,
    root_kind: Option<KindId>,
    part: Part,
) -> Result<Part, JsonError> {
    let mut w = Walker {
        scan,
        src,
        root_kind,
        frames: Vec::new(),
        hits: Vec::new(),
        members: Vec::new(),
        part,
        keys: HashMap::with_capacity_and_hasher(32, FixedState::default()),
    };
    w.run()?;
    Ok(w.part)
}

/// One pass over a JSON body.
struct Walker<'s, 't, 'a> {
    scan: &'s mut ResponseScan<'t>,
    src: &'a str,
    root_kind: Option<KindId>,
    frames: Vec<Frame<'a>>,
    hits: Vec<TextHit<'t>>,
    /// The own ids of the open objects, innermost last (see
    /// [`Obj::members_from`]): one vector for the whole walk.
    members: Vec<Member<'a>>,
    part: Part,
    /// What each unescaped key of this document means: keys repeat in
    /// every element of a list, the answer does not.
    keys: HashMap<&'a str, KeyInfo, FixedState>,
}

/// What a key means for scanning, and what its text holds: worked out once
/// per distinct key and carried by the frames, so a value or a container
/// under the key asks nothing of the taxonomy again.
#[derive(Debug, Clone, Copy)]
struct KeyInfo {
    /// [`Taxonomy::key_role`].
    role: Option<KeyRole>,
    /// [`Taxonomy::id_named_kind`].
    field_kind: Option<KindId>,
    /// [`Taxonomy::object_key_kind`]: the kind of an object under the key.
    object_kind: Option<KindId>,
    /// [`Taxonomy::is_envelope_key`]: at the root, the key holds the
    /// primary record(s).
    envelope: bool,
    /// The key is `resourceType`.
    resource_type: bool,
    /// The key's own text holds no id and no escape.
    clean: bool,
    /// Its values are clinical content ([`crate::alias::fhir::is_clinical_value_key`]).
    clinical: bool,
    /// It names no record when inside a FHIR resource
    /// ([`crate::alias::fhir::is_non_record_id_key`]).
    non_record_in_resource: bool,
    /// It is a FHIR `Identifier`'s `system` or `value`.
    identifier: Option<IdentifierPart>,
}

/// The members of a FHIR `Identifier` that make a business identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdentifierPart {
    System,
    Value,
}

impl<'t, 'a> Walker<'_, 't, 'a> {
    fn run(&mut self) -> Result<(), JsonError> {
        let mut lx = Lexer::new(self.src);
        while let Some(ev) = lx.next_event()? {
            match ev {
                Event::StartObject => {
                    let (key, primary) = self.child_context();
                    self.frames.push(Frame::Obj(Obj {
                        key,
                        primary,
                        members_from: self.members.len(),
                        occs_from: self.part.occs.len(),
                        ..Obj::default()
                    }));
                }
                Event::StartArray => {
                    let (key, primary) = self.child_context();
                    self.frames.push(Frame::Arr { key, primary });
                }
                Event::EndObject => {
                    if let Some(Frame::Obj(obj)) = self.frames.pop() {
                        self.finish_object(obj);
                    }
                }
                Event::EndArray => {
                    self.frames.pop();
                }
                Event::Key(lit) => {
                    let (text, loc) = self.literal(&lit)?;
                    let known = match &text {
                        Cow::Borrowed(k) => self.keys.get(k).copied(),
                        Cow::Owned(_) => None,
                    };
                    let info = match known {
                        // Scanned before: no hit then, none now.
                        Some(info) if info.clean => {
                            if let Some(l) = self.part.lits.last_mut() {
                                l.clean = true;
                            }
                            info
                        }
                        _ => {
                            self.scan_text(&text, &loc, None);
                            let clean = self.part.lits.last().is_some_and(|l| l.clean);
                            let info = known.unwrap_or_else(|| self.key_info(&text, clean));
                            if let (Cow::Borrowed(k), None) = (&text, known) {
                                self.keys.insert(k, info);
                            }
                            info
                        }
                    };
                    if let Some(Frame::Obj(o)) = self.frames.last_mut() {
                        o.cur_key = Some(info);
                    }
                }
                Event::Str(lit) => {
                    let (text, loc) = self.literal(&lit)?;
                    self.string_value(text, loc);
                }
                Event::Scalar => {
                    let span = lx.scalar_span();
                    self.scalar_value(span);
                }
            }
        }
        Ok(())
    }

    /// The key a new container sits under and whether it holds the primary
    /// record(s): the root, or the value of an envelope key of the root.
    fn child_context(&self) -> (Option<KeyInfo>, bool) {
        match self.frames.last() {
            None => (None, true),
            Some(Frame::Obj(o)) => {
                let primary = self.frames.len() == 1 && o.cur_key.is_some_and(|k| k.envelope);
                (o.cur_key, primary)
            }
            Some(Frame::Arr { key, primary }) => (*key, *primary),
        }
    }

    /// The key a value sits under (its array's key inside an array) and
    /// whether it is an object's member.
    fn value_context(&self) -> (Option<KeyInfo>, bool) {
        let (key, member) = match self.frames.last() {
            Some(Frame::Obj(o)) => (o.cur_key, true),
            Some(Frame::Arr { key, .. }) => (*key, false),
            None => (None, false),
        };
        // A FHIR `…Id` element that names no record: no id position there.
        let key = key.map(|mut k| {
            if k.non_record_in_resource && self.in_resource() {
                k.role = None;
                k.field_kind = None;
            }
            k
        });
        (key, member)
    }

    /// Whether an open object is a FHIR resource (has a `resourceType`).
    fn in_resource(&self) -> bool {
        self.frames
            .iter()
            .any(|f| matches!(f, Frame::Obj(o) if o.resource_type.is_some()))
    }

    /// Marks the literal just registered at `loc` as clinical content.
    fn protect(&mut self, loc: &Loc) {
        match loc {
            Loc::Raw(r) => {
                if let Some(l) = self.part.lits.last_mut().filter(|l| l.range == *r) {
                    l.protected = true;
                }
            }
            Loc::Esc { lit, .. } => {
                if let Some(e) = self.part.escaped.get_mut(*lit) {
                    e.protected = true;
                }
            }
        }
    }

    fn key_info(&self, key: &str, clean: bool) -> KeyInfo {
        let tax = self.scan.tax;
        let meaning = tax.key_meaning(key);
        // `linkId` and its kin label items; they name no record anywhere.
        let link = crate::alias::fhir::is_link_id_key(key);
        KeyInfo {
            role: meaning.role.filter(|_| !link),
            field_kind: meaning.id_kind.filter(|_| !link),
            object_kind: meaning.object_kind,
            envelope: tax.is_envelope_key(key),
            resource_type: key == "resourceType",
            clean,
            clinical: crate::alias::fhir::is_clinical_value_key(key),
            non_record_in_resource: crate::alias::fhir::is_non_record_id_key(key, true),
            identifier: match key {
                "system" => Some(IdentifierPart::System),
                "value" => Some(IdentifierPart::Value),
                _ => None,
            },
        }
    }

    /// Registers a literal and returns its text and location.
    // Inlined: its result, returned through memory, was read back wider
    // than it was written, and the load waited for the stores.
    #[inline(always)]
    fn literal(&mut self, lit: &Lit) -> Result<(Cow<'a, str>, Loc), JsonError> {
        let text = text_of(self.src, lit)?;
        if lit.escaped {
            self.part.escaped.push(EscLit {
                span: lit.span.clone(),
                text: text.clone().into_owned(),
                occs: Vec::new(),
                protected: false,
            });
            let idx = self.part.escaped.len() - 1;
            Ok((
                text,
                Loc::Esc {
                    lit: idx,
                    range: 0..0,
                },
            ))
        } else {
            let inner = lit.inner();
            self.part.lits.push(LitSpan {
                range: inner.clone(),
                clean: false,
                protected: false,
            });
            Ok((text, Loc::Raw(inner)))
        }
    }

    /// Inserts an occurrence found late (an object's own id, known when the
    /// object ends) among those since the object began (`from`), where its
    /// range puts it: the part's occurrences stay in order, and the sort
    /// after the walk finds nothing to do.
    fn insert_occ(&mut self, from: usize, range: Range<usize>, value: usize) {
        let occs = &mut self.part.occs;
        let from = from.min(occs.len());
        let key = occ_order(&range);
        let at = from
            + occs
                .get(from..)
                .map_or(0, |tail| tail.partition_point(|(r, _)| occ_order(r) <= key));
        occs.insert(at, (range, value));
    }

    fn push_occ(&mut self, loc: &Loc, sub: Range<usize>, value: usize) {
        match loc {
            Loc::Raw(r) => self
                .part
                .occs
                .push((r.start + sub.start..r.start + sub.end, value)),
            Loc::Esc { lit, .. } => {
                if let Some(e) = self.part.escaped.get_mut(*lit) {
                    e.occs.push((sub, value));
                }
            }
        }
    }

    fn sub_loc(loc: &Loc, sub: Range<usize>) -> Loc {
        match loc {
            Loc::Raw(r) => Loc::Raw(r.start + sub.start..r.start + sub.end),
            Loc::Esc { lit, .. } => Loc::Esc {
                lit: *lit,
                range: sub,
            },
        }
    }

    /// Pattern-scans a string; each hit is an entity alone.
    fn scan_text(&mut self, text: &str, loc: &Loc, ctx: Option<KindId>) {
        let mut hits = std::mem::take(&mut self.hits);
        shape::find_in_text(self.scan.tax, text.as_bytes(), &mut hits);
        for h in &hits {
            let Some(value) = text.get(h.range.clone()) else {
                continue;
            };
            let (kind, form) = self.scan.hit_meta(h, text.as_bytes(), ctx);
            let v = self.scan.value(value, kind, form);
            self.push_occ(loc, h.range.clone(), v);
        }
        let clean = hits.is_empty();
        self.hits = hits;
        let decoded = self.scan.learn_decoded(text.as_bytes(), ctx);
        if clean && !decoded {
            // The literal just registered (`literal` runs right before).
            if let (Loc::Raw(r), Some(l)) = (loc, self.part.lits.last_mut()) {
                if l.range == *r {
                    l.clean = true;
                }
            }
        }
    }
}
