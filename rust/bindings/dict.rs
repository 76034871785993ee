//! Records read from Python dicts through the record schema of `jsonl.rs`: a serde
//! `Deserializer` over Python objects, which hands out strs and bytes borrowed from them, not
//! copied (pythonize's copies each one).
//!
//! A dict maps to a map, a list or tuple to a sequence, an `os.PathLike` to its path; str,
//! bytes, int, float, bool and None to their like. One special case: a str `content` is read
//! apart from the rest, as the code units Python stores it in (`Wide`), because asking Python
//! for a non-ASCII str's UTF-8 copies it while holding the GIL (see `wide.rs`).

use std::cell::{Cell, RefCell};

use pyo3::prelude::*;
use pyo3::types::iter::{BoundDictIterator, BoundListIterator, BoundTupleIterator};
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyStringData, PyTuple,
};
use serde::de::{self, DeserializeSeed, Error as _, IntoDeserializer, Visitor};

use crate::jsonl::{self, ReadError};
use crate::record::{Content, Record, Timestamp};
use crate::wide::Wide;

use super::type_name;

type Read<T> = std::result::Result<T, ReadError>;

/// What the values read from one batch share.
pub(super) struct Batch<'py> {
    /// The objects records borrow from: kept alive, so unchanged (strs and bytes are
    /// immutable), until the batch's records are dropped.
    keep: RefCell<Vec<Bound<'py, PyAny>>>,
}

impl<'py> Batch<'py> {
    pub(super) fn with_capacity(records: usize) -> Self {
        Batch {
            keep: RefCell::new(Vec::with_capacity(records * 2)),
        }
    }

    /// Reads the record at `index` of the batch.
    pub(super) fn record(
        &self,
        index: usize,
        item: Bound<'py, PyAny>,
    ) -> crate::error::Result<Record<'py>> {
        let content = Cell::new(None);
        let value = Value {
            obj: item,
            batch: self,
            content: Some(&content),
        };
        jsonl::read_record(index, value, || content.take().map(Content::Wide))
    }

    /// Keeps `obj` alive as long as the batch.
    fn keep(&self, obj: Bound<'py, PyAny>) {
        self.keep.borrow_mut().push(obj);
    }
}

/// A `last_modified` value, read alone as a record's is.
pub(super) fn timestamp(obj: &Bound<'_, PyAny>) -> std::result::Result<Timestamp, String> {
    let alone = Batch::with_capacity(0);
    jsonl::read_timestamp(Value {
        obj: obj.clone(),
        batch: &alone,
        content: None,
    })
}

const SURROGATE: &str = "is not valid Unicode (it holds a lone surrogate)";

/// A str's UTF-8, borrowed. For an ASCII str it is its own storage; else Python makes it once
/// and keeps it with the object. Either lives as long as the object.
fn utf8<'py>(s: &Bound<'py, PyString>) -> Read<&'py str> {
    let text: *const str = s.to_str().map_err(|_| ReadError::custom(SURROGATE))?;
    // SAFETY: see above; the caller keeps the object for as long as the reference is used.
    Ok(unsafe { &*text })
}

/// A str's code units, borrowed, which the encoding threads make UTF-8 without the GIL.
fn wide<'py>(s: &Bound<'py, PyString>) -> Read<Wide<'py>> {
    // SAFETY: reads the str's PEP 393 header as pyo3 does for CPython on little-endian
    // targets, the ones fastfeed is built for (the round-trip tests check it).
    let data =
        unsafe { s.data() }.map_err(|e| ReadError::custom(format!("cannot be read: {e}")))?;
    // SAFETY: a str's code units never change and live as long as the object, which the
    // caller keeps.
    let wide = unsafe {
        match data {
            PyStringData::Ucs1(u) => Wide::Latin1(&*(u as *const [u8])),
            PyStringData::Ucs2(u) => Wide::Ucs2(&*(u as *const [u16])),
            PyStringData::Ucs4(u) => Wide::Ucs4(&*(u as *const [u32])),
        }
    };
    // Refused here, not when made UTF-8, so that a batch's first bad record is the one named.
    if wide.has_surrogate() {
        return Err(ReadError::custom(SURROGATE));
    }
    Ok(wide)
}

/// A Python object, as serde reads it.
struct Value<'a, 'py> {
    obj: Bound<'py, PyAny>,
    batch: &'a Batch<'py>,
    /// Where a record's str `content` goes; None below the record's own fields.
    content: Option<&'a Cell<Option<Wide<'py>>>>,
}

impl<'a, 'py> Value<'a, 'py> {
    fn nested(&self, obj: Bound<'py, PyAny>) -> Self {
        Value {
            obj,
            batch: self.batch,
            content: None,
        }
    }

    /// An object serde has no type for (a datetime, a set...).
    fn foreign(&self) -> ReadError {
        ReadError::custom(format!(
            "a {} is none of the JSON types: give a string, number, true or false, list or object",
            type_name(&self.obj)
        ))
    }
}

impl<'de> de::Deserializer<'de> for Value<'_, 'de> {
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Read<V::Value> {
        let obj = &self.obj;
        if let Ok(s) = obj.downcast::<PyString>() {
            let text = utf8(s)?;
            self.batch.keep(self.obj);
            visitor.visit_borrowed_str(text)
        } else if obj.is_none() {
            visitor.visit_unit()
        } else if let Ok(b) = obj.downcast::<PyBool>() {
            visitor.visit_bool(b.is_true())
        } else if obj.is_instance_of::<PyInt>() {
            if let Ok(n) = obj.extract::<i64>() {
                visitor.visit_i64(n)
            } else if let Ok(n) = obj.extract::<u64>() {
                visitor.visit_u64(n)
            } else {
                Err(ReadError::custom(format!("{obj} is too large an integer")))
            }
        } else if let Ok(f) = obj.downcast::<PyFloat>() {
            visitor.visit_f64(f.value())
        } else if let Ok(dict) = obj.downcast::<PyDict>() {
            visitor.visit_map(Map::new(&self, dict, "names"))
        } else if let Ok(list) = obj.downcast::<PyList>() {
            visitor.visit_seq(Seq {
                items: Items::List(list.iter()),
                at: 0,
                batch: self.batch,
            })
        } else if let Ok(tuple) = obj.downcast::<PyTuple>() {
            visitor.visit_seq(Seq {
                items: Items::Tuple(tuple.iter()),
                at: 0,
                batch: self.batch,
            })
        } else if let Ok(b) = obj.downcast::<PyBytes>() {
            let data: *const [u8] = b.as_bytes();
            self.batch.keep(self.obj);
            // SAFETY: bytes are immutable and the batch keeps the object.
            visitor.visit_borrowed_bytes(unsafe { &*data })
        } else if let Ok(b) = obj.downcast::<PyByteArray>() {
            // Mutable, so copied: another thread could change it while we encode.
            visitor.visit_byte_buf(b.to_vec())
        } else if let Ok(path) = obj.call_method0("__fspath__") {
            self.nested(path).deserialize_any(visitor)
        } else {
            Err(self.foreign())
        }
    }

    /// A str for a `String`: not borrowed, so not kept.
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Read<V::Value> {
        match self.obj.downcast::<PyString>() {
            Ok(s) => visitor.visit_str(utf8(s)?),
            Err(_) => self.deserialize_any(visitor),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Read<V::Value> {
        self.deserialize_string(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Read<V::Value> {
        if self.obj.is_none() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Read<V::Value> {
        visitor.visit_newtype_struct(self)
    }

    /// Only from a dict: serde would read a list field by field.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Read<V::Value> {
        match self.obj.downcast::<PyDict>() {
            Ok(dict) => visitor.visit_map(Map::new(&self, dict, "field names")),
            Err(_) => Err(ReadError::custom(format!(
                "expected an object, got {}",
                type_name(&self.obj)
            ))),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Read<V::Value> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str bytes byte_buf unit
        unit_struct seq tuple tuple_struct map enum
    }
}

/// A dict's items, read in order.
struct Map<'a, 'py> {
    items: BoundDictIterator<'py>,
    batch: &'a Batch<'py>,
    content: Option<&'a Cell<Option<Wide<'py>>>>,
    /// What its keys are, in errors.
    keys: &'static str,
    /// The key whose value is read next.
    key: Option<Bound<'py, PyString>>,
    /// Whether it is a record's `content`, which a str is read apart from.
    lift: bool,
    value: Option<Bound<'py, PyAny>>,
}

impl<'a, 'py> Map<'a, 'py> {
    fn new(of: &Value<'a, 'py>, dict: &Bound<'py, PyDict>, keys: &'static str) -> Self {
        Map {
            items: dict.iter(),
            batch: of.batch,
            content: of.content,
            keys,
            key: None,
            lift: false,
            value: None,
        }
    }
}

impl<'de> de::MapAccess<'de> for Map<'_, 'de> {
    type Error = ReadError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Read<Option<K::Value>> {
        let Some((key, value)) = self.items.next() else {
            return Ok(None);
        };
        let key = key.downcast_into::<PyString>().map_err(|e| {
            ReadError::custom(format!(
                "{} must be strings, got {}",
                self.keys,
                type_name(e.into_inner().as_any())
            ))
        })?;
        let name = utf8(&key).map_err(|_| {
            ReadError::custom(format!(
                "{} must be valid Unicode: one holds a lone surrogate",
                self.keys
            ))
        })?;
        self.lift = self.content.is_some() && name == "content";
        let read = seed.deserialize(name.into_deserializer())?;
        self.key = Some(key);
        self.value = Some(value);
        Ok(Some(read))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Read<V::Value> {
        let (Some(key), Some(value)) = (self.key.take(), self.value.take()) else {
            return Err(ReadError::custom("a value was asked for before its key"));
        };
        let read = || -> Read<V::Value> {
            if let (true, Some(content), Ok(s)) =
                (self.lift, self.content, value.downcast::<PyString>())
            {
                content.set(Some(wide(s)?));
                self.batch.keep(value.clone());
                return seed.deserialize(().into_deserializer());
            }
            let value = Value {
                obj: value,
                batch: self.batch,
                content: None,
            };
            seed.deserialize(value)
        };
        read().map_err(|e| e.in_key(&key.to_string_lossy()))
    }
}

/// A list's or tuple's items.
enum Items<'py> {
    List(BoundListIterator<'py>),
    Tuple(BoundTupleIterator<'py>),
}

struct Seq<'a, 'py> {
    items: Items<'py>,
    at: usize,
    batch: &'a Batch<'py>,
}

impl<'de> de::SeqAccess<'de> for Seq<'_, 'de> {
    type Error = ReadError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Read<Option<T::Value>> {
        let next = match &mut self.items {
            Items::List(items) => items.next(),
            Items::Tuple(items) => items.next(),
        };
        let Some(obj) = next else {
            return Ok(None);
        };
        let at = self.at;
        self.at += 1;
        let value = Value {
            obj,
            batch: self.batch,
            content: None,
        };
        seed.deserialize(value).map(Some).map_err(|e| e.in_item(at))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(match &self.items {
            Items::List(items) => items.len(),
            Items::Tuple(items) => items.len(),
        })
    }
}
