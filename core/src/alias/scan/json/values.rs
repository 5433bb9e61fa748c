//! What the JSON walker does with a value: a string, a scalar, a finished
//! object and its members.

use crate::alias::id::Form;
use crate::alias::id::KindId;
use crate::alias::shape::{self};
use crate::alias::taxonomy::KeyRole;
use std::borrow::Cow;
use std::ops::Range;

use super::*;

impl<'t, 'a> Walker<'_, 't, 'a> {
    pub(super) fn string_value(&mut self, text: Cow<'a, str>, loc: Loc) {
        let tax = self.scan.tax;
        let max = tax.max_id_len();
        let (key, in_object) = self.value_context();
        let Some(key) = key else {
            self.scan_text(&text, &loc, None);
            return;
        };
        if let (Some(part), true) = (key.identifier, in_object) {
            let kind = match part {
                IdentifierPart::System => tax.identifier_system_kind(&text),
                IdentifierPart::Value => None,
            };
            if let Some(Frame::Obj(o)) = self.frames.last_mut() {
                match part {
                    IdentifierPart::System => o.identifier_kind = kind,
                    IdentifierPart::Value => o.identifier_value = Some((text.clone(), loc.clone())),
                }
            }
        }
        if key.clinical {
            // A code, system, display or name: an id shape in it (a UUID, a
            // reference of a configured type) is an id, but an id learned
            // elsewhere is never replaced in it (`hl7` of `Organization/hl7`
            // in `http://terminology.hl7.org/…`). Verification reads it: a
            // learned id left there withholds the body.
            self.protect(&loc);
            self.scan_text(&text, &loc, None);
            return;
        }
        // A scalar under a key that names a record (`"patient": "482913"`)
        // is that record's id; a string needs a digit (`"encounter":
        // "ambulatory-visit"` is a word).
        let (role, field_kind) = (
            key.role,
            key.field_kind.or(key
                .object_kind
                .filter(|_| text.bytes().any(|b| b.is_ascii_digit()))),
        );
        if in_object {
            if key.resource_type {
                if let Some(Frame::Obj(o)) = self.frames.last_mut() {
                    o.resource_type = Some(text);
                }
                return;
            }
            if role == Some(KeyRole::Reference) {
                if let Some(local) = contained_ref(&text) {
                    // `#p1`: a contained resource of this one, whose `id`
                    // is aliased where it stands; the two are rewritten
                    // together, as one value.
                    let v = self.scan.value(local, tax.fallback_kind(), Form::Fhir);
                    self.push_occ(&loc, 1..text.len(), v);
                    return;
                }
            }
            let member = match role {
                Some(KeyRole::Reference) => {
                    shape::parse_reference(tax, &text).map(|(kinds, id)| {
                        let start = text.len() - id.len();
                        let sub = start..text.len();
                        let value = match &text {
                            Cow::Borrowed(s) => Cow::Borrowed(s.get(start..).unwrap_or_default()),
                            Cow::Owned(s) => {
                                Cow::Owned(s.get(start..).unwrap_or_default().to_owned())
                            }
                        };
                        Member {
                            role: Some(KeyRole::Reference),
                            field_kind: None,
                            kinds: kinds.to_vec(),
                            value,
                            loc: Self::sub_loc(&loc, sub),
                            weak: false,
                        }
                    })
                }
                Some(role) if shape::is_identifier(&text, max) => {
                    let sub = 0..text.len();
                    Some(Member {
                        role: Some(role),
                        field_kind: None,
                        kinds: Vec::new(),
                        value: text.clone(),
                        loc: Self::sub_loc(&loc, sub),
                        weak: false,
                    })
                }
                // A FHIR resource's id may be a word (`example`,
                // `referral`): an id when the object turns out to be a
                // resource, text otherwise.
                Some(KeyRole::Id) if shape::is_fhir_id(&text) => Some(Member {
                    role: Some(KeyRole::Id),
                    field_kind: None,
                    kinds: Vec::new(),
                    value: text.clone(),
                    loc: Self::sub_loc(&loc, 0..text.len()),
                    weak: true,
                }),
                Some(_) => None,
                None => field_kind
                    .filter(|_| shape::is_identifier(&text, max))
                    .map(|k| {
                        let sub = 0..text.len();
                        Member {
                            role: None,
                            field_kind: Some(k),
                            kinds: Vec::new(),
                            value: text.clone(),
                            loc: Self::sub_loc(&loc, sub),
                            weak: false,
                        }
                    }),
            };
            if let Some(m) = member {
                self.members.push(m);
                return;
            }
        } else if let Some(k) = field_kind.filter(|_| shape::is_identifier(&text, max)) {
            let v = self.scan.value(&text, k, shape::classify(&text));
            self.push_occ(&loc, 0..text.len(), v);
            return;
        }
        // An opaque cursor that carries an id, whole or in a link, is an id
        // itself (`shape::Pattern::Cursor`): the model gets an alias, and the
        // request side decodes it back.
        self.scan_text(&text, &loc, field_kind);
    }

    /// A number: an id when it is an integer under an id-named key.
    pub(super) fn scalar_value(&mut self, span: Range<usize>) {
        let Some(text) = self.src.get(span.clone()) else {
            return;
        };
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return;
        }
        let tax = self.scan.tax;
        let (key, in_object) = self.value_context();
        let Some(key) = key else {
            return;
        };
        // A number under a key that names a record is that record's id.
        let (role, field_kind) = (key.role, key.field_kind.or(key.object_kind));
        let role = if in_object { role } else { None };
        if role.is_none() && field_kind.is_none() {
            return;
        }
        self.part.numbers.push(span.clone());
        let value = Cow::Borrowed(text);
        match role {
            Some(role @ (KeyRole::Id | KeyRole::Fhir | KeyRole::Slug)) => {
                self.members.push(Member {
                    role: Some(role),
                    field_kind: None,
                    kinds: Vec::new(),
                    value,
                    loc: Loc::Raw(span),
                    weak: false,
                });
            }
            _ => {
                let k = field_kind.unwrap_or(tax.fallback_kind());
                if in_object {
                    self.members.push(Member {
                        role: None,
                        field_kind: Some(k),
                        kinds: Vec::new(),
                        value,
                        loc: Loc::Raw(span),
                        weak: false,
                    });
                } else {
                    let v = self.scan.value(text, k, Form::Slug);
                    self.part.occs.push((span, v));
                }
            }
        }
    }

    /// Resolves an object's kind and groups its own ids into one entity.
    pub(super) fn finish_object(&mut self, obj: Obj<'a>) {
        if let (Some(kind), Some((value, loc))) = (obj.identifier_kind, &obj.identifier_value) {
            self.identifier(&obj, kind, value, loc);
        }
        if self.members.len() == obj.members_from {
            // No own ids: nothing to resolve or group.
            return;
        }
        let mut all = std::mem::take(&mut self.members);
        let mut own = all.split_off(obj.members_from.min(all.len()));
        // The `id` of an element inside a FHIR resource (`result[0].id`,
        // an extension's or an item's id) names no record; nor does a
        // word under `id` outside a resource. Such a text is read for id
        // shapes like any other.
        // An embedded record (under a kind's key, or with a FHIR id or a
        // slug of its own beside its `id`) keeps its `id`.
        let element = obj.resource_type.is_none()
            && obj.key.is_none_or(|k| k.object_kind.is_none())
            && !own
                .iter()
                .any(|m| matches!(m.role, Some(KeyRole::Fhir | KeyRole::Slug)))
            && self.in_resource();
        let resource = obj.resource_type.is_some();
        let mut texts = Vec::new();
        own.retain(|m| {
            let keep = if m.role == Some(KeyRole::Id) && element {
                false
            } else {
                !m.weak || resource
            };
            if !keep {
                texts.push((m.value.clone(), m.loc.clone()));
            }
            keep
        });
        for (text, loc) in texts {
            let loc = match loc {
                Loc::Raw(r) => Loc::Raw(r),
                Loc::Esc { lit, .. } => Loc::Esc { lit, range: 0..0 },
            };
            self.scan_text(&text, &loc, None);
        }
        self.finish_members(&obj, &own);
        self.members = all;
    }

    /// A business identifier (`{system, value}` of a configured system): its
    /// value is an id of the system's kind, replaced whole where it stands.
    fn identifier(&mut self, obj: &Obj<'a>, kind: KindId, value: &str, loc: &Loc) {
        let value = value.trim();
        if value.is_empty() || value.len() > self.scan.tax.max_id_len() {
            return;
        }
        let v = self.scan.value(value, kind, shape::classify(value));
        match loc {
            Loc::Raw(r) => {
                // The literal's text is the value, up to the spaces trimmed.
                let text = self.src.get(r.clone()).unwrap_or_default();
                let start = r.start + (text.len() - text.trim_start().len());
                self.insert_occ(obj.occs_from, start..start + value.len(), v);
            }
            Loc::Esc { lit, range } => {
                if let Some(e) = self.part.escaped.get_mut(*lit) {
                    let text = e.text.get(range.clone()).unwrap_or_default();
                    let start = range.start + (text.len() - text.trim_start().len());
                    e.occs.push((start..start + value.len(), v));
                }
            }
        }
    }

    /// [`Self::finish_object`] with the object's own ids.
    fn finish_members(&mut self, obj: &Obj<'a>, members: &[Member<'a>]) {
        let tax = self.scan.tax;
        let fhir_prefix_kinds = |v: &str| {
            v.split_once('-')
                .and_then(|(p, _)| tax.fhir_prefix_kinds(p))
        };
        let candidates: &[KindId] = obj
            .resource_type
            .as_deref()
            .and_then(|t| tax.resource_type_kinds(t))
            .or_else(|| {
                members
                    .iter()
                    .find(|m| m.role == Some(KeyRole::Fhir))
                    .and_then(|m| fhir_prefix_kinds(&m.value))
            })
            .or_else(|| {
                members
                    .iter()
                    .find(|m| m.role == Some(KeyRole::Id) && shape::is_fhir_like(&m.value))
                    .and_then(|m| fhir_prefix_kinds(&m.value))
            })
            .or_else(|| {
                members
                    .iter()
                    .find(|m| m.role == Some(KeyRole::Reference))
                    .map(|m| m.kinds.as_slice())
            })
            .unwrap_or(&[]);
        let parent = obj.key.and_then(|k| k.object_kind);
        let root = if obj.primary { self.root_kind } else { None };
        let kind = choose(candidates, parent, root).unwrap_or(tax.fallback_kind());

        let mut group: [Option<(usize, Form)>; FORMS] = [None; FORMS];
        let mut forms = 0;
        for m in members {
            let (member_kind, form, joins) = match m.role {
                Some(KeyRole::Id) => {
                    let form = if shape::is_uuid(m.value.as_bytes()) {
                        Form::Uuid
                    } else if obj.resource_type.is_some() || shape::is_fhir_like(&m.value) {
                        Form::Fhir
                    } else {
                        Form::Slug
                    };
                    (kind, form, true)
                }
                Some(KeyRole::Fhir) => (kind, Form::Fhir, true),
                Some(KeyRole::Slug) => (kind, Form::Slug, true),
                Some(KeyRole::Reference) => {
                    if m.kinds.contains(&kind) {
                        (kind, Form::Fhir, true)
                    } else {
                        (
                            choose(&m.kinds, None, None).unwrap_or(tax.fallback_kind()),
                            Form::Fhir,
                            false,
                        )
                    }
                }
                None => {
                    let k = m.field_kind.unwrap_or(tax.fallback_kind());
                    (k, shape::classify(&m.value), k == kind)
                }
            };
            let v = self.scan.value(&m.value, member_kind, form);
            match &m.loc {
                Loc::Raw(r) => self.insert_occ(obj.occs_from, r.clone(), v),
                Loc::Esc { lit, range } => {
                    if let Some(e) = self.part.escaped.get_mut(*lit) {
                        e.occs.push((range.clone(), v));
                    }
                }
            }
            if !joins || group.iter().flatten().any(|(g, _)| *g == v) {
                continue;
            }
            // One value per form: a second, different value of a form stays an
            // entity of its own rather than a self-inflicted conflict.
            if group.iter().flatten().all(|(_, f)| *f != form) {
                if let Some(slot) = group.get_mut(forms) {
                    *slot = Some((v, form));
                    forms += 1;
                }
            }
        }
        if forms > 1 {
            if let Some(found) = group.get_mut(..forms) {
                found.sort();
            }
            self.scan.groups.push(Group {
                kind,
                members: group,
            });
        }
    }
}
