//! The field names a struct's `Deserialize` declares, read by asking it to deserialize from a
//! deserializer that only records them: the list then cannot drift from the struct.

use serde::{
    Deserialize,
    de::{self, Visitor},
};

/// The names `T` deserializes from, in declaration order (renames applied).
pub fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut names = None;
    let _ = T::deserialize(Names(&mut names));
    names.expect("a struct asks for its fields")
}

struct Names<'a>(&'a mut Option<&'static [&'static str]>);

#[derive(Debug)]
struct Recorded;

impl std::fmt::Display for Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names recorded")
    }
}

impl std::error::Error for Recorded {}

impl de::Error for Recorded {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        Recorded
    }
}

impl<'de> de::Deserializer<'de> for Names<'_> {
    type Error = Recorded;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Recorded> {
        *self.0 = Some(fields);
        Err(Recorded)
    }

    /// An optional body (`Option<T>`) has the fields of its `T`.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Recorded> {
        visitor.visit_some(self)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Recorded> {
        Err(Recorded)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
