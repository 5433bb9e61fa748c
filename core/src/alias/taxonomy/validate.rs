//! Validation: a [`TaxonomyConfig`] as written becomes a [`Taxonomy`]. The
//! built-in kinds ([`builtin`]) are merged in first, then every rule is
//! checked and the lookup tables built; an error names the field at fault
//! (`kinds[3].prefix: ...`, `default kind "visit".idFields[0]: ...` for a
//! built-in kind an operator's kind clashes with).

use super::builtin;
use super::digest::digest_of;
use super::lookup::{KeyRole, Kind, Taxonomy, WordPairs};
use super::norm::{bare_system, norm_key};
use super::schema::{err, KindConfig, TaxonomyConfig, TaxonomyError};
use super::table::Table;
use crate::alias::id::KindId;

/// The configuration with the built-in kinds merged in
/// ([`TaxonomyConfig::kinds`]): `replace_defaults` is then `true`. Each
/// kind comes with the path an error about it names: `kinds[i]` for the
/// file's `i`-th kind, `default kind "visit"` for a built-in one.
///
/// Fails when the built-in file does not parse ([`builtin::kinds`]).
fn merged(raw: TaxonomyConfig) -> Result<(TaxonomyConfig, Vec<String>), TaxonomyError> {
    let mut kinds: Vec<(Option<usize>, KindConfig)> = if raw.replace_defaults {
        Vec::new()
    } else {
        builtin::kinds()?.into_iter().map(|k| (None, k)).collect()
    };
    for (i, k) in raw.kinds.into_iter().enumerate() {
        match kinds
            .iter_mut()
            .find(|(from, d)| from.is_none() && d.name == k.name)
        {
            Some(slot) => *slot = (Some(i), k),
            None => kinds.push((Some(i), k)),
        }
    }
    let at = kinds
        .iter()
        .map(|(from, k)| match from {
            Some(i) => format!("kinds[{i}]"),
            None => format!("default kind {:?}", k.name),
        })
        .collect();
    let merged = TaxonomyConfig {
        replace_defaults: true,
        kinds: kinds.into_iter().map(|(_, k)| k).collect(),
        ..raw
    };
    Ok((merged, at))
}

/// `[a-z][a-z0-9]*`: one segment of a prefix, an infix or a FHIR prefix.
fn valid_segment(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn valid_prefix(s: &str) -> bool {
    s.split('-').all(valid_segment)
}

/// Inserts `key → kind` into a one-kind-per-key table, failing on a clash.
fn insert_unique(
    table: &mut Table<KindId>,
    key: &str,
    kind: KindId,
    field: &str,
    names: &[Kind],
) -> Result<(), TaxonomyError> {
    if key.is_empty() {
        return Err(err(field, "must not be empty"));
    }
    if let Some(other) = table.insert(norm_key(key), kind) {
        if other != kind {
            let other_name = names
                .get(usize::from(other.0))
                .map_or("?", |k| k.name.as_str());
            return Err(err(
                field,
                format!("{key:?} is already used by kind {other_name:?}"),
            ));
        }
    }
    Ok(())
}

impl TryFrom<TaxonomyConfig> for Taxonomy {
    type Error = TaxonomyError;

    /// Merges the built-in kinds in ([`TaxonomyConfig::kinds`]), validates
    /// the result and builds the lookup tables.
    ///
    /// Fails with a [`TaxonomyError`] naming the field (`kinds[0].prefix`, or
    /// `default kind "visit".idFields[0]` for a built-in kind a file kind
    /// clashes with) when a rule is broken, or naming `builtin.json` when the
    /// built-in file does not parse.
    fn try_from(raw: TaxonomyConfig) -> Result<Self, Self::Error> {
        let (merged, at) = merged(raw)?;
        let digest = digest_of(&merged);
        let mut t = Taxonomy::validate(merged, &at)?;
        t.digest = digest;
        Ok(t)
    }
}

impl Taxonomy {
    /// Validates a merged configuration; `at[i]` is the path of kind `i`.
    fn validate(raw: TaxonomyConfig, at: &[String]) -> Result<Taxonomy, TaxonomyError> {
        let kind_at = |i: usize| at.get(i).cloned().unwrap_or_else(|| format!("kinds[{i}]"));
        if raw.kinds.is_empty() {
            return Err(err("kinds", "must list at least one kind"));
        }
        if raw.kinds.len() > usize::from(u16::MAX) {
            return Err(err("kinds", "too many kinds"));
        }
        let mut t = Taxonomy {
            kinds: Vec::with_capacity(raw.kinds.len()),
            fallback: KindId(0),
            by_prefix: Table::default(),
            by_name: Table::default(),
            fhir_prefix: Table::default(),
            resource_type: Table::default(),
            id_field: Table::default(),
            object_key: Table::default(),
            path_segment: Table::default(),
            key_role: Table::default(),
            identifier_system: Table::default(),
            pairs: WordPairs::default(),
            by_norm_name: Table::default(),
            fallback_only: Vec::new(),
            envelope_keys: raw.envelope_keys,
            repair_infixes: Vec::new(),
            max_aliases: raw.max_aliases_per_session,
            max_id_len: raw.max_id_len,
            digest: String::new(),
        };
        for (i, k) in raw.kinds.iter().enumerate() {
            let at = kind_at(i);
            let id = KindId(u16::try_from(i).map_err(|_| err(&at, "too many kinds"))?);
            if !valid_prefix(&k.name) {
                return Err(err(
                    format!("{at}.name"),
                    format!("must be lowercase words joined by '-', got {:?}", k.name),
                ));
            }
            if !valid_prefix(&k.prefix) {
                return Err(err(
                    format!("{at}.prefix"),
                    format!(
                        "must be lowercase segments [a-z][a-z0-9]* joined by '-', got {:?}",
                        k.prefix
                    ),
                ));
            }
            if k.description
                .as_deref()
                .is_some_and(|d| d.trim().is_empty())
            {
                return Err(err(
                    format!("{at}.description"),
                    "must not be blank when given",
                ));
            }
            if t.by_name.insert(k.name.clone(), id).is_some() {
                return Err(err(
                    format!("{at}.name"),
                    format!("kind {:?} is listed twice", k.name),
                ));
            }
            if t.by_prefix.insert(k.prefix.clone(), id).is_some() {
                return Err(err(
                    format!("{at}.prefix"),
                    format!("prefix {:?} is used by two kinds", k.prefix),
                ));
            }
            t.kinds.push(Kind {
                name: k.name.clone(),
                prefix: k.prefix.clone(),
                preferred_form: k.preferred_form,
                readable_in_text: k.readable_in_text,
            });
        }
        for (i, k) in raw.kinds.iter().enumerate() {
            let at = kind_at(i);
            let id = KindId(u16::try_from(i).map_err(|_| err(&at, "too many kinds"))?);
            for (j, p) in k.fhir_prefixes.iter().enumerate() {
                if !valid_segment(p) {
                    return Err(err(
                        format!("{at}.fhirPrefixes[{j}]"),
                        format!("must match [a-z][a-z0-9]*, got {p:?}"),
                    ));
                }
                t.fhir_prefix.entry(p.clone()).or_default().push(id);
            }
            for (j, r) in k.resource_types.iter().enumerate() {
                let ok = r.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
                    && r.bytes().all(|b| b.is_ascii_alphanumeric());
                if !ok {
                    return Err(err(
                        format!("{at}.resourceTypes[{j}]"),
                        format!("must be a FHIR type name, got {r:?}"),
                    ));
                }
                t.resource_type.entry(r.clone()).or_default().push(id);
            }
            for (j, f) in k.id_fields.iter().enumerate() {
                insert_unique(
                    &mut t.id_field,
                    f,
                    id,
                    &format!("{at}.idFields[{j}]"),
                    &t.kinds,
                )?;
            }
            for (j, f) in k.object_keys.iter().enumerate() {
                insert_unique(
                    &mut t.object_key,
                    f,
                    id,
                    &format!("{at}.objectKeys[{j}]"),
                    &t.kinds,
                )?;
            }
            for (j, f) in k.path_segments.iter().enumerate() {
                insert_unique(
                    &mut t.path_segment,
                    f,
                    id,
                    &format!("{at}.pathSegments[{j}]"),
                    &t.kinds,
                )?;
            }
            for (j, system) in k.identifier_systems.iter().enumerate() {
                let field = format!("{at}.identifierSystems[{j}]");
                let bare = bare_system(system);
                if bare.is_empty() || bare.bytes().any(|b| b.is_ascii_whitespace() || b == b'|') {
                    return Err(err(
                        field,
                        format!("must be a URI or an OID without spaces or '|', got {system:?}"),
                    ));
                }
                if let Some(other) = t.identifier_system.insert(bare.to_owned(), id) {
                    let name = t
                        .kinds
                        .get(usize::from(other.0))
                        .map_or("", |k| k.name.as_str());
                    return Err(err(
                        field,
                        format!("system {system:?} is listed for kind {name:?} too"),
                    ));
                }
            }
        }
        for (id, k) in t.kinds.iter().enumerate() {
            if let Ok(id) = u16::try_from(id) {
                t.by_norm_name.insert(norm_key(&k.name), KindId(id));
            }
        }
        t.fallback = *t.by_name.get(&raw.fallback_kind).ok_or_else(|| {
            err(
                "fallbackKind",
                format!("names no kind: {:?}", raw.fallback_kind),
            )
        })?;
        t.fallback_only = vec![t.fallback];
        let roles = [
            ("selfIdKeys", &raw.self_id_keys, KeyRole::Id),
            ("fhirIdKeys", &raw.fhir_id_keys, KeyRole::Fhir),
            ("slugKeys", &raw.slug_keys, KeyRole::Slug),
            ("referenceKeys", &raw.reference_keys, KeyRole::Reference),
        ];
        for (field, keys, role) in roles {
            for (j, key) in keys.iter().enumerate() {
                if key.is_empty() {
                    return Err(err(format!("{field}[{j}]"), "must not be empty"));
                }
                if t.key_role
                    .insert(norm_key(key), role)
                    .is_some_and(|r| r != role)
                {
                    return Err(err(
                        format!("{field}[{j}]"),
                        format!("key {key:?} has two roles"),
                    ));
                }
            }
        }
        for (j, infix) in raw.repair_infixes.iter().enumerate() {
            if !valid_segment(infix) {
                return Err(err(
                    format!("repairInfixes[{j}]"),
                    format!("must match [a-z][a-z0-9]*, got {infix:?}"),
                ));
            }
        }
        t.repair_infixes = raw.repair_infixes;
        if !(1..=1_000_000).contains(&t.max_aliases) {
            return Err(err(
                "maxAliasesPerSession",
                format!("must be between 1 and 1000000, got {}", t.max_aliases),
            ));
        }
        if !(36..=4096).contains(&t.max_id_len) {
            return Err(err(
                "maxIdLen",
                format!("must be between 36 and 4096, got {}", t.max_id_len),
            ));
        }
        t.pairs = WordPairs::of(&t);
        Ok(t)
    }
}

impl Default for Taxonomy {
    /// The default HMS taxonomy: the built-in kinds of `builtin.json` and
    /// every other field at its default. Unit tests parse and validate the
    /// shipped file; were it ever to fail, this returns a one-kind taxonomy
    /// rather than panicking.
    fn default() -> Self {
        Taxonomy::try_from(TaxonomyConfig::default()).unwrap_or_else(|_| Taxonomy::minimal())
    }
}

impl Taxonomy {
    /// Parses and validates a taxonomy from JSON (a taxonomy file).
    ///
    /// Fails with a [`TaxonomyError`] naming the field when the JSON is
    /// malformed, has an unknown field, or breaks a rule.
    pub fn from_json(bytes: &[u8]) -> Result<Taxonomy, TaxonomyError> {
        Taxonomy::try_from(TaxonomyConfig::from_json(bytes)?)
    }

    /// One kind (`record`, prefix `ref`) and the `id` key: what
    /// [`Taxonomy::default`] falls back to.
    pub(super) fn minimal() -> Taxonomy {
        let kind = Kind {
            name: "record".into(),
            prefix: "ref".into(),
            preferred_form: None,
            readable_in_text: false,
        };
        let config = TaxonomyConfig {
            replace_defaults: true,
            kinds: vec![KindConfig {
                name: kind.name.clone(),
                prefix: kind.prefix.clone(),
                fhir_prefixes: Vec::new(),
                resource_types: Vec::new(),
                id_fields: Vec::new(),
                object_keys: Vec::new(),
                path_segments: Vec::new(),
                preferred_form: None,
                description: None,
                identifier_systems: Vec::new(),
                readable_in_text: false,
            }],
            fallback_kind: kind.name.clone(),
            self_id_keys: vec!["id".into()],
            fhir_id_keys: Vec::new(),
            slug_keys: Vec::new(),
            reference_keys: Vec::new(),
            envelope_keys: Vec::new(),
            repair_infixes: Vec::new(),
            max_aliases_per_session: 5000,
            max_id_len: 128,
        };
        let mut t = Taxonomy {
            by_prefix: Table::from_iter([(kind.prefix.clone(), KindId(0))]),
            by_name: Table::from_iter([(kind.name.clone(), KindId(0))]),
            kinds: vec![kind],
            fallback: KindId(0),
            fhir_prefix: Table::default(),
            resource_type: Table::default(),
            id_field: Table::default(),
            object_key: Table::default(),
            path_segment: Table::default(),
            key_role: Table::from_iter([("id".to_owned(), KeyRole::Id)]),
            identifier_system: Table::default(),
            pairs: WordPairs::default(),
            by_norm_name: Table::default(),
            fallback_only: vec![KindId(0)],
            envelope_keys: Vec::new(),
            repair_infixes: Vec::new(),
            max_aliases: 5000,
            max_id_len: 128,
            digest: digest_of(&config),
        };
        t.pairs = WordPairs::of(&t);
        t
    }
}
