//! The fields of a harness's run-log line that its events need, read in one pass over the line's
//! text: strings are borrowed from the line where they have no escapes, every other field is
//! skipped without being built (no `serde_json::Value` tree of the whole line, which cost about
//! twice what storing the events does). Only a tool call's `input` (and Codex's `command`,
//! `changes`, `arguments`, `query`) is a `Value`, because the event keeps it as one.
//!
//! Each field reads any JSON value and answers as the `Value` accessor the parser used before
//! would have ([`J::as_str`] is `Value::as_str`, [`Obj`] an object or not, present or not), so a
//! field of an unexpected type never fails the line: it reads as `Value` would have read it.
//! What this reader refuses (a duplicated key: `Value` keeps the last one) fails the fast read,
//! and the caller reads the line into a `Value` and these same types from it
//! (`Line::deserialize(&value)`), which gives `Value`'s answer: one parser logic either way.
//! `tests/parse_golden.rs` pins the events on every seed and tens of thousands of mutations.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// A scalar field, as a `Value` would hold it (objects and arrays are skipped, not kept).
#[derive(Debug, Default, Clone)]
pub(crate) enum J<'a> {
    /// Not in the object.
    #[default]
    Missing,
    Null,
    Bool(bool),
    /// A non-negative integer (`Value`'s `PosInt`).
    U64(u64),
    /// A negative integer (`Value`'s `NegInt`).
    I64(i64),
    F64(f64),
    Str(Cow<'a, str>),
    /// An object or an array.
    Composite,
}

impl<'a> J<'a> {
    /// `Value::as_str`.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The string, owned (borrowed ones are copied once).
    pub(crate) fn into_str(self) -> Option<String> {
        match self {
            J::Str(s) => Some(s.into_owned()),
            _ => None,
        }
    }

    /// `Value::as_bool`.
    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            J::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// `Value::as_u64`.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            J::U64(n) => Some(*n),
            _ => None,
        }
    }

    /// `Value::as_i64`.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        match self {
            J::U64(n) => i64::try_from(*n).ok(),
            J::I64(n) => Some(*n),
            _ => None,
        }
    }

    /// `Value::as_f64`.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            J::U64(n) => Some(*n as f64),
            J::I64(n) => Some(*n as f64),
            J::F64(f) => Some(*f),
            _ => None,
        }
    }

    /// In the object and not `null`.
    pub(crate) fn is_set(&self) -> bool {
        !matches!(self, J::Missing | J::Null)
    }
}

/// The visitor of every field type here: each JSON value becomes `T` through `on`, objects and
/// arrays through `map` / `seq` (by default skipped).
trait Lenient<'de>: Sized {
    fn scalar(j: J<'de>) -> Self;
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        IgnoredAny.visit_map(map)?;
        Ok(Self::scalar(J::Composite))
    }
    fn seq<A: SeqAccess<'de>>(seq: A) -> Result<Self, A::Error> {
        IgnoredAny.visit_seq(seq)?;
        Ok(Self::scalar(J::Composite))
    }
}

struct LenientVisitor<T>(PhantomData<T>);

impl<'de, T: Lenient<'de>> Visitor<'de> for LenientVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
        Ok(T::scalar(J::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        // `Value` keeps a non-negative i64 as a `PosInt`.
        Ok(T::scalar(match u64::try_from(v) {
            Ok(u) => J::U64(u),
            Err(_) => J::I64(v),
        }))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Ok(T::scalar(J::U64(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        // `Value` makes a float that is not finite `null`.
        Ok(T::scalar(if v.is_finite() { J::F64(v) } else { J::Null }))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<T, E> {
        Ok(T::scalar(J::Str(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        Ok(T::scalar(J::Str(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<T, E> {
        Ok(T::scalar(J::Str(Cow::Owned(v))))
    }
    fn visit_unit<E: de::Error>(self) -> Result<T, E> {
        Ok(T::scalar(J::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<T, E> {
        Ok(T::scalar(J::Null))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::map(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        T::seq(seq)
    }
}

fn lenient<'de, D: Deserializer<'de>, T: Lenient<'de>>(d: D) -> Result<T, D::Error> {
    d.deserialize_any(LenientVisitor(PhantomData))
}

impl<'de> Lenient<'de> for J<'de> {
    fn scalar(j: J<'de>) -> Self {
        j
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for J<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient::<D, J<'de>>(d)
    }
}

/// A field that matters when it is an object (`T`, its fields); otherwise what it was.
#[derive(Debug)]
pub(crate) enum Obj<'a, T> {
    Object(T),
    /// Anything else (an array reads as [`J::Composite`]).
    Other(J<'a>),
}

impl<T> Default for Obj<'_, T> {
    fn default() -> Self {
        Obj::Other(J::Missing)
    }
}

impl<'a, T> Obj<'a, T> {
    /// The object's fields, if it is one.
    pub(crate) fn object(self) -> Option<T> {
        match self {
            Obj::Object(t) => Some(t),
            Obj::Other(_) => None,
        }
    }

    /// Whether the field is in the object at all (`null` included), as `Value::get` is `Some`.
    pub(crate) fn present(&self) -> bool {
        !matches!(self, Obj::Other(J::Missing))
    }

    /// `Value::as_str` of the field.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Obj::Other(j) => j.as_str(),
            Obj::Object(_) => None,
        }
    }
}

impl<'de, T: Deserialize<'de>> Lenient<'de> for Obj<'de, T> {
    fn scalar(j: J<'de>) -> Self {
        Obj::Other(j)
    }
    fn map<A: MapAccess<'de>>(map: A) -> Result<Self, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(Obj::Object)
    }
}

impl<'de: 'a, 'a, T: Deserialize<'de>> Deserialize<'de> for Obj<'a, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient::<D, Obj<'de, T>>(d)
    }
}

/// A field that matters when it is an array (of `T`).
#[derive(Debug, Default)]
pub(crate) enum Arr<T> {
    Array(Vec<T>),
    /// Anything else, or not there.
    #[default]
    Other,
}

impl<'de, T: Deserialize<'de>> Lenient<'de> for Arr<T> {
    fn scalar(_: J<'de>) -> Self {
        Arr::Other
    }
    fn seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
        let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(t) = seq.next_element()? {
            v.push(t);
        }
        Ok(Arr::Array(v))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Arr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient::<D, Arr<T>>(d)
    }
}

/// A Claude Code or Codex line: the union of the fields any of their events reads (a field
/// another line type uses is read too, and ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Line<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) ty: J<'a>,
    #[serde(borrow)]
    pub(crate) subtype: J<'a>,
    #[serde(borrow)]
    pub(crate) session_id: J<'a>,
    #[serde(borrow)]
    pub(crate) thread_id: J<'a>,
    /// Claude Code's message (its `content`), or Codex's `error` message text.
    #[serde(borrow)]
    pub(crate) message: Obj<'a, Message<'a>>,
    #[serde(rename = "isSynthetic", borrow)]
    pub(crate) is_synthetic: J<'a>,
    #[serde(rename = "isMeta", borrow)]
    pub(crate) is_meta: J<'a>,
    #[serde(borrow)]
    pub(crate) parent_tool_use_id: J<'a>,
    #[serde(borrow)]
    pub(crate) is_error: J<'a>,
    #[serde(borrow)]
    pub(crate) usage: Obj<'a, Usage<'a>>,
    #[serde(borrow)]
    pub(crate) total_cost_usd: J<'a>,
    #[serde(borrow)]
    pub(crate) result: J<'a>,
    #[serde(borrow)]
    pub(crate) errors: Arr<J<'a>>,
    /// Claude Code's why a `result` ended (`completed`, `aborted_streaming`, `aborted_tools`).
    #[serde(borrow)]
    pub(crate) terminal_reason: J<'a>,
    #[serde(borrow)]
    pub(crate) item: Obj<'a, Item<'a>>,
    #[serde(borrow)]
    pub(crate) error: Obj<'a, ErrorField<'a>>,
}

/// Claude Code's `message`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Message<'a> {
    #[serde(borrow)]
    pub(crate) content: Content<'a>,
}

/// A `content`: a string, or a list of blocks (objects, or anything else, which no event reads).
#[derive(Debug, Default)]
pub(crate) enum Content<'a> {
    Str(Cow<'a, str>),
    Blocks(Vec<Obj<'a, Block<'a>>>),
    #[default]
    Other,
}

impl<'de> Lenient<'de> for Content<'de> {
    fn scalar(j: J<'de>) -> Self {
        match j {
            J::Str(s) => Content::Str(s),
            _ => Content::Other,
        }
    }
    fn seq<A: SeqAccess<'de>>(seq: A) -> Result<Self, A::Error> {
        match Arr::<Obj<'de, Block<'de>>>::seq(seq)? {
            Arr::Array(v) => Ok(Content::Blocks(v)),
            Arr::Other => Ok(Content::Other),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        lenient::<D, Content<'de>>(d)
    }
}

/// A content block (or a part of a tool result's content): text, tool use, tool result, image...
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Block<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) ty: J<'a>,
    #[serde(borrow)]
    pub(crate) text: J<'a>,
    #[serde(borrow)]
    pub(crate) id: J<'a>,
    #[serde(borrow)]
    pub(crate) name: J<'a>,
    pub(crate) input: Option<Value>,
    #[serde(borrow)]
    pub(crate) tool_use_id: J<'a>,
    #[serde(borrow)]
    pub(crate) content: Content<'a>,
    #[serde(borrow)]
    pub(crate) is_error: J<'a>,
}

/// Token counts (Claude Code's `result` and Codex's `turn.completed`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Usage<'a> {
    #[serde(borrow)]
    pub(crate) input_tokens: J<'a>,
    #[serde(borrow)]
    pub(crate) output_tokens: J<'a>,
    #[serde(borrow)]
    pub(crate) cache_read_input_tokens: J<'a>,
    #[serde(borrow)]
    pub(crate) cache_creation_input_tokens: J<'a>,
    #[serde(borrow)]
    pub(crate) cached_input_tokens: J<'a>,
}

/// A Codex item.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Item<'a> {
    #[serde(rename = "type", borrow)]
    pub(crate) ty: J<'a>,
    #[serde(borrow)]
    pub(crate) id: J<'a>,
    pub(crate) command: Option<Value>,
    pub(crate) changes: Option<Value>,
    #[serde(borrow)]
    pub(crate) server: J<'a>,
    #[serde(borrow)]
    pub(crate) tool: J<'a>,
    pub(crate) arguments: Option<Value>,
    pub(crate) query: Option<Value>,
    #[serde(borrow)]
    pub(crate) text: J<'a>,
    #[serde(borrow)]
    pub(crate) status: J<'a>,
    #[serde(borrow)]
    pub(crate) exit_code: J<'a>,
    #[serde(borrow)]
    pub(crate) aggregated_output: J<'a>,
}

/// Codex's `error` object.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ErrorField<'a> {
    #[serde(borrow)]
    pub(crate) message: J<'a>,
}
