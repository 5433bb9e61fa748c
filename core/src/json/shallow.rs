//! Reading parts of a JSON text that serde_json has already read whole,
//! without parsing what nobody asks for.
//!
//! A request body is checked once, by serde_json, from its first byte to its
//! last ([`crate::tools::format`] does this before anything else). After that, the
//! bytes of a value nobody reads (a tool's JSON Schema, most of an 84 KB
//! body) need not be parsed again value by value: its end is found by
//! matching brackets outside strings ([`value_end`]), several times faster,
//! or looked up in an [`Index`] of every container's end, built in one such
//! pass, when the same text is read at several depths (a tools array, then
//! each tool, then its function object). [`from_str`] and [`from_raw`]
//! deserialize any `serde::Deserialize` type this way: objects and arrays
//! are walked member by member, every scalar a visitor asks for is handed to
//! serde_json, and a value the type ignores (`IgnoredAny`, an unknown field)
//! is not looked at at all.
//!
//! # Contract
//! The text must be one JSON value that serde_json accepted (a slice of a
//! checked body). On anything else nothing panics, but the result is an
//! error or a reading of the text serde_json would not give: never use this
//! on bytes that have not been checked.
//!
//! What differs from `serde_json::from_str` on a checked text: nothing for
//! strings, numbers, literals, objects and arrays; map keys are strings only
//! (no integer keys); `&RawValue` is not supported (use [`Raw`], which reads
//! from both).

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;

/// The name [`Raw`] asks a deserializer for; [`Shallow`] answers it with
/// the value's bytes.
const RAW_TOKEN: &str = "$keyhole::shallow::Raw";

/// One JSON value, borrowed: its exact bytes in the text it was read from.
///
/// Deserializes from [`from_str`] (without looking inside the value) and from
/// serde_json (through `&RawValue`, which skips it value by value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// `text`, one JSON value serde_json has accepted (see the module's
    /// contract), without surrounding whitespace.
    pub fn from_checked(text: &'a str) -> Raw<'a> {
        Raw(text)
    }

    /// The value's bytes, without surrounding whitespace.
    pub fn get(&self) -> &'a str {
        self.0
    }
}

impl<'a> From<&'a RawValue> for Raw<'a> {
    fn from(raw: &'a RawValue) -> Self {
        Raw(raw.get())
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = Raw<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value borrowed from the text")
            }

            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Raw<'de>, E> {
                Ok(Raw(text))
            }

            fn visit_newtype_struct<D: Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Raw<'de>, D::Error> {
                <&'de RawValue>::deserialize(d).map(Raw::from)
            }
        }
        d.deserialize_newtype_struct(RAW_TOKEN, RawVisitor)
    }
}

/// Deserializes `T` from `text`, one JSON value serde_json has accepted (see
/// the module's contract).
pub(crate) fn from_str<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, serde_json::Error> {
    T::deserialize(Shallow {
        text: trim(text),
        index: None,
    })
}

/// [`from_str`] of `raw`; when it lies inside the text `index` covers, the
/// end of every object and array in it is looked up, not searched for.
pub(crate) fn from_raw<'a, T: Deserialize<'a>>(
    index: Option<&Index<'a>>,
    raw: Raw<'a>,
) -> Result<T, serde_json::Error> {
    T::deserialize(Shallow {
        text: raw.get(),
        index,
    })
}

/// Where each object and array of a checked JSON text ends, found in one
/// pass over it.
pub(crate) struct Index<'a> {
    text: &'a str,
    /// `(start, end)` of every container, by start; `end` just past it.
    ends: Vec<(u32, u32)>,
}

impl<'a> Index<'a> {
    /// Indexes `text` (see the module's contract). A text that is not as
    /// checked, or larger than 4 GiB, gets an empty index: every end is then
    /// searched for.
    pub fn new(text: &'a str) -> Index<'a> {
        let bytes = text.as_bytes();
        let mut ends: Vec<(u32, u32)> = Vec::new();
        let mut open: Vec<usize> = Vec::new();
        let mut at = 0;
        let complete = u32::try_from(bytes.len()).is_ok()
            && loop {
                let Some(&b) = bytes.get(at) else {
                    break open.is_empty();
                };
                match b {
                    b'"' => match string_end(bytes, at) {
                        Some(end) => {
                            at = end;
                            continue;
                        }
                        None => break false,
                    },
                    b'{' | b'[' => {
                        open.push(ends.len());
                        ends.push((at as u32, 0));
                    }
                    b'}' | b']' => match open.pop().and_then(|i| ends.get_mut(i)) {
                        Some(slot) => slot.1 = at as u32 + 1,
                        None => break false,
                    },
                    _ => {}
                }
                at += 1;
            };
        if !complete {
            ends.clear();
        }
        Index { text, ends }
    }

    /// The end of the container opening at `at` in `within` (a slice of the
    /// indexed text), relative to `within`.
    fn end_in(&self, within: &str, at: usize) -> Option<usize> {
        let base = (within.as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        let start = u32::try_from(base.checked_add(at)?).ok()?;
        let i = self.ends.binary_search_by_key(&start, |(s, _)| *s).ok()?;
        let (_, end) = self.ends.get(i)?;
        (*end as usize).checked_sub(base)
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn trim(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_ascii() && is_ws(c as u8))
}

/// Where the string literal opening at `open` (a `"`) ends: the index just
/// past its closing quote.
pub(crate) fn string_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut at = open + 1;
    loop {
        let found = at + memchr::memchr2(b'"', b'\\', bytes.get(at..)?)?;
        match bytes.get(found)? {
            b'\\' => at = found + 2,
            _ => return Some(found + 1),
        }
    }
}

/// Where the JSON value starting at `start` (its first byte, not whitespace)
/// ends: the index just past it. Objects and arrays end at their matching
/// bracket outside strings; scalars at the first byte that cannot continue
/// them. `None` when the text ends first, or no value starts at `start`.
pub(crate) fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    match bytes.get(start)? {
        b'"' => string_end(bytes, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut at = start;
            loop {
                match bytes.get(at)? {
                    b'"' => {
                        at = string_end(bytes, at)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            let rest = bytes.get(start..)?;
            let len = rest
                .iter()
                .position(|&b| is_ws(b) || matches!(b, b',' | b']' | b'}'))
                .unwrap_or(rest.len());
            (len > 0).then_some(start + len)
        }
    }
}

/// A deserializer over one checked JSON value.
struct Shallow<'a, 'i> {
    /// The value, without surrounding whitespace.
    text: &'a str,
    index: Option<&'i Index<'a>>,
}

/// Where the value at `at` in `text` ends: looked up in `index` when it is
/// a container the index covers, else searched for.
fn end_of(index: Option<&Index<'_>>, text: &str, at: usize) -> Option<usize> {
    let indexed = || index.and_then(|index| index.end_in(text, at));
    match text.as_bytes().get(at)? {
        b'{' | b'[' => indexed().or_else(|| value_end(text.as_bytes(), at)),
        _ => value_end(text.as_bytes(), at),
    }
}

fn broken() -> serde_json::Error {
    de::Error::custom("JSON text not as checked")
}

impl<'de> Deserializer<'de> for Shallow<'de, '_> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.text.as_bytes().first() {
            Some(b'{') => visitor.visit_map(Members {
                text: self.text,
                index: self.index,
                at: 1,
                value: None,
            }),
            Some(b'[') => visitor.visit_seq(Elements::open(self.text, self.index)?),
            _ => serde_json::Deserializer::from_str(self.text).deserialize_any(visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_unit()
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        if self.text == "null" {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        match name {
            RAW_TOKEN => visitor.visit_borrowed_str(self.text),
            // serde_json's own borrowed raw value: its protocol is private.
            "$serde_json::private::RawValue" => {
                Err(de::Error::custom("read a borrowed value as shallow::Raw"))
            }
            _ => visitor.visit_newtype_struct(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        serde_json::Deserializer::from_str(self.text).deserialize_enum(name, variants, visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// The members of an object, in text order.
struct Members<'a, 'i> {
    text: &'a str,
    index: Option<&'i Index<'a>>,
    /// Just past the `{` or the last value read.
    at: usize,
    /// The value of the key just read.
    value: Option<&'a str>,
}

impl<'a> Members<'a, '_> {
    fn skip_ws(&mut self) {
        while self.text.as_bytes().get(self.at).is_some_and(|b| is_ws(*b)) {
            self.at += 1;
        }
    }

    /// The next key and its value, or `None` after the last member.
    fn next_member(&mut self) -> Result<Option<(&'a str, &'a str)>, serde_json::Error> {
        let bytes = self.text.as_bytes();
        self.skip_ws();
        if bytes.get(self.at) == Some(&b',') {
            self.at += 1;
            self.skip_ws();
        }
        match bytes.get(self.at) {
            Some(b'}') => return Ok(None),
            Some(b'"') => {}
            _ => return Err(broken()),
        }
        let key_end = string_end(bytes, self.at).ok_or_else(broken)?;
        let key = self.text.get(self.at..key_end).ok_or_else(broken)?;
        self.at = key_end;
        self.skip_ws();
        if bytes.get(self.at) != Some(&b':') {
            return Err(broken());
        }
        self.at += 1;
        self.skip_ws();
        let value_end = end_of(self.index, self.text, self.at).ok_or_else(broken)?;
        let value = self.text.get(self.at..value_end).ok_or_else(broken)?;
        self.at = value_end;
        Ok(Some((key, value)))
    }
}

impl<'de> MapAccess<'de> for Members<'de, '_> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.next_member()? else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(Shallow {
            text: key,
            index: None,
        })
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let text = self.value.take().ok_or_else(broken)?;
        seed.deserialize(Shallow {
            text,
            index: self.index,
        })
    }
}

/// The elements of an array, in order.
struct Elements<'a, 'i> {
    text: &'a str,
    index: Option<&'i Index<'a>>,
    /// Just past the `[` or the last element read.
    at: usize,
}

impl<'a, 'i> Elements<'a, 'i> {
    /// The elements of the array `text`; an error when it is not an array.
    fn open(text: &'a str, index: Option<&'i Index<'a>>) -> Result<Self, serde_json::Error> {
        match text.as_bytes().first() {
            Some(b'[') => Ok(Elements { text, index, at: 1 }),
            _ => Err(de::Error::invalid_type(
                de::Unexpected::Other("a value that is not an array"),
                &"an array",
            )),
        }
    }

    fn next_raw(&mut self) -> Result<Option<Raw<'a>>, serde_json::Error> {
        let bytes = self.text.as_bytes();
        let skip_ws = |at: &mut usize| {
            while bytes.get(*at).is_some_and(|b| is_ws(*b)) {
                *at += 1;
            }
        };
        skip_ws(&mut self.at);
        if bytes.get(self.at) == Some(&b',') {
            self.at += 1;
            skip_ws(&mut self.at);
        }
        if bytes.get(self.at) == Some(&b']') {
            return Ok(None);
        }
        let end = end_of(self.index, self.text, self.at).ok_or_else(broken)?;
        let element = self.text.get(self.at..end).ok_or_else(broken)?;
        self.at = end;
        Ok(Some(Raw(element)))
    }
}

impl<'de> SeqAccess<'de> for Elements<'de, '_> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        match self.next_raw()? {
            Some(Raw(text)) => seed
                .deserialize(Shallow {
                    text,
                    index: self.index,
                })
                .map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests;
