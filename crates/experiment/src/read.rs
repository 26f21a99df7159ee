//! Reading the experiment file's YAML tree into its types with every mistake found, not only
//! the first. The schema is the types alone: [`crate::config::Experiment`] and its sections
//! with their serde attributes (`deny_unknown_fields`, defaults, renames). This module knows no
//! key of the file: serde's derived code reads the tree through [`Node`], a deserializer that
//! knows where in the tree each value is. A mistake (an unknown key, which is
//! `deny_unknown_fields` at work, a value of the wrong type, a missing key) is noted with its
//! path in serde's words; the key it is in is then taken out of the tree and the tree read
//! again, so that each wrong key is reported once and none hides another. A key added to a
//! section is checked the moment it is declared.

use std::fmt;

use serde::de::{
    self, value::BorrowedStrDeserializer, DeserializeOwned, DeserializeSeed, Deserializer,
    MapAccess, SeqAccess, Visitor,
};
use serde_yaml_ng::{Mapping, Value};

/// One step down the tree: a mapping's key or a list's position.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Where a value is in the file: `load.rate_rps[1]`; empty at the top.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Path(Vec<Segment>);

impl Path {
    fn child(&self, segment: Segment) -> Path {
        let mut path = self.clone();
        path.0.push(segment);
        path
    }

    fn key(&self, key: &Value) -> Path {
        self.child(Segment::Key(match key {
            Value::String(s) => s.clone(),
            // A key that is not text (`1: x`): named as YAML writes it, for messages only.
            other => serde_yaml_ng::to_string(other)
                .map(|s| s.trim_end().to_string())
                .unwrap_or_else(|_| "?".into()),
        }))
    }

    /// The path down to its last key: what to take out of the tree for a mistake at `self`
    /// (the whole list for a mistake in one of its items). `None` at the top.
    fn to_last_key(&self) -> Option<Path> {
        let last = self.0.iter().rposition(|s| matches!(s, Segment::Key(_)))?;
        Some(Path(self.0[..=last].to_vec()))
    }

    /// Takes the value at `self` (a path ending with a key) out of `tree`; false if none was.
    fn remove_from(&self, tree: &mut Value) -> bool {
        let Some((Segment::Key(last), parents)) = self.0.split_last() else {
            return false;
        };
        let mut node = tree;
        for segment in parents {
            let next = match (segment, node) {
                (Segment::Key(k), Value::Mapping(m)) => m.get_mut(k.as_str()),
                (Segment::Index(i), Value::Sequence(s)) => s.get_mut(*i),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => return false,
            }
        }
        match node {
            Value::Mapping(m) => m.shift_remove(last.as_str()).is_some(),
            _ => false,
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(k) if i == 0 => f.write_str(k)?,
                Segment::Key(k) => write!(f, ".{k}")?,
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// What was wrong, in serde's terms.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// A key the section does not have (the section denies unknown fields).
    UnknownKey { expected: &'static [&'static str] },
    /// A key the section needs was not given.
    MissingKey(&'static str),
    /// Anything else serde says (a wrong type, an unknown variant...).
    Other(String),
}

/// A mistake in the file, with where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Mistake {
    pub path: Path,
    kind: Kind,
}

impl Mistake {
    /// One line for the user: `load.conections: unknown key; expected one of mode, rate_rps...`.
    pub fn message(&self) -> String {
        let path = self.path.to_string();
        match &self.kind {
            Kind::UnknownKey { expected } => format!(
                "{path}: unknown key; expected one of {}",
                expected.join(", ")
            ),
            Kind::MissingKey(key) => in_file_terms(&path, &format!("missing field `{key}`")),
            Kind::Other(message) => in_file_terms(&path, message),
        }
    }
}

/// serde's message with the Rust type names said in the file's terms, after its path.
pub(crate) fn in_file_terms(path: &str, message: &str) -> String {
    let message = message
        .replace("u64", "a whole number")
        .replace("u32", "a whole number")
        .replace("f64", "a number")
        .replace("a sequence", "a list");
    if path.is_empty() {
        message
    } else {
        format!("{path}: {message}")
    }
}

/// Reads `tree` as a `T`, or every mistake in it, in the order the file gives them.
pub fn every_mistake<T: DeserializeOwned>(mut tree: Value) -> Result<T, Vec<Mistake>> {
    let mut mistakes = Vec::new();
    // Keys taken out after a mistake: a required one then goes missing, which is no news.
    let mut taken_out: Vec<Path> = Vec::new();
    loop {
        let error = match T::deserialize(Node::top(&tree)) {
            Ok(value) if mistakes.is_empty() => return Ok(value),
            Ok(_) => return Err(mistakes),
            Err(error) => error,
        };
        let path = error.path.unwrap_or_default();
        let news = match error.kind {
            Kind::MissingKey(key) => !taken_out.contains(&path.child(Segment::Key(key.into()))),
            Kind::UnknownKey { .. } | Kind::Other(_) => true,
        };
        if news {
            mistakes.push(Mistake {
                path: path.clone(),
                kind: error.kind,
            });
        }
        // Read again without the key the mistake is in, so that the next reading goes past it.
        match path.to_last_key() {
            Some(key) if key.remove_from(&mut tree) => taken_out.push(key),
            _ => return Err(mistakes),
        }
    }
}

/// The error of one reading: what, and where (filled in on the way out of the node it is in).
#[derive(Debug)]
struct Error {
    path: Option<Path>,
    kind: Kind,
}

impl Error {
    fn at(mut self, path: &Path) -> Error {
        self.path.get_or_insert_with(|| path.clone());
        self
    }

    fn from_yaml(e: serde_yaml_ng::Error, path: &Path) -> Error {
        Error {
            path: Some(path.clone()),
            kind: Kind::Other(e.to_string()),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.clone().unwrap_or_default();
        f.write_str(
            &Mistake {
                path,
                kind: self.kind.clone(),
            }
            .message(),
        )
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error {
            path: None,
            kind: Kind::Other(msg.to_string()),
        }
    }

    fn unknown_field(_field: &str, expected: &'static [&'static str]) -> Self {
        Error {
            path: None,
            kind: Kind::UnknownKey { expected },
        }
    }

    fn missing_field(field: &'static str) -> Self {
        Error {
            path: None,
            kind: Kind::MissingKey(field),
        }
    }
}

/// A value of the tree and its path. Mappings, lists, options and newtypes are walked here,
/// so that every value inside knows its path and every section's mistakes come back typed;
/// scalars and enums are read by serde_yaml_ng's own deserializer, so that they mean what
/// they mean in any YAML file.
struct Node<'a> {
    value: &'a Value,
    path: Path,
}

impl<'a> Node<'a> {
    fn top(value: &'a Value) -> Node<'a> {
        Node {
            value,
            path: Path::default(),
        }
    }

    fn mapping<V: Visitor<'a>>(self, map: &'a Mapping, visitor: V) -> Result<V::Value, Error> {
        let mut entries = Entries {
            iter: map.iter(),
            value: None,
            path: self.path.clone(),
        };
        let read = visitor
            .visit_map(&mut entries)
            .map_err(|e| e.at(&self.path))?;
        match entries.iter.len() {
            0 => Ok(read),
            _ => Err(de::Error::invalid_length(
                map.len(),
                &"fewer elements in map",
            ))
            .map_err(|e: Error| e.at(&self.path)),
        }
    }

    fn sequence<V: Visitor<'a>>(self, list: &'a [Value], visitor: V) -> Result<V::Value, Error> {
        let mut items = Items {
            iter: list.iter().enumerate(),
            path: self.path.clone(),
        };
        let read = visitor
            .visit_seq(&mut items)
            .map_err(|e| e.at(&self.path))?;
        match items.iter.len() {
            0 => Ok(read),
            _ => Err(de::Error::invalid_length(
                list.len(),
                &"fewer elements in sequence",
            ))
            .map_err(|e: Error| e.at(&self.path)),
        }
    }
}

/// The deserializer methods handed to serde_yaml_ng's as they are.
macro_rules! by_yaml {
    ($($method:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {
        $(
            fn $method<V: Visitor<'a>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Error> {
                self.value
                    .$method($($arg,)* visitor)
                    .map_err(|e| Error::from_yaml(e, &self.path))
            }
        )*
    };
}

impl<'a> Deserializer<'a> for Node<'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Mapping(map) => self.mapping(map, visitor),
            Value::Sequence(list) => self.sequence(list, visitor),
            other => other
                .deserialize_any(visitor)
                .map_err(|e| Error::from_yaml(e, &self.path)),
        }
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        let path = self.path.clone();
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
        .map_err(|e| e.at(&path))
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        let path = self.path.clone();
        visitor.visit_newtype_struct(self).map_err(|e| e.at(&path))
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Sequence(list) => self.sequence(list, visitor),
            other => other
                .deserialize_seq(visitor)
                .map_err(|e| Error::from_yaml(e, &self.path)),
        }
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.value {
            Value::Mapping(map) => self.mapping(map, visitor),
            other => other
                .deserialize_map(visitor)
                .map_err(|e| Error::from_yaml(e, &self.path)),
        }
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.value {
            Value::Mapping(map) => self.mapping(map, visitor),
            other => other
                .deserialize_struct(name, fields, visitor)
                .map_err(|e| Error::from_yaml(e, &self.path)),
        }
    }

    by_yaml! {
        deserialize_bool(), deserialize_i8(), deserialize_i16(), deserialize_i32(),
        deserialize_i64(), deserialize_i128(), deserialize_u8(), deserialize_u16(),
        deserialize_u32(), deserialize_u64(), deserialize_u128(), deserialize_f32(),
        deserialize_f64(), deserialize_char(), deserialize_str(), deserialize_string(),
        deserialize_bytes(), deserialize_byte_buf(), deserialize_unit(),
        deserialize_unit_struct(name: &'static str),
        deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
        deserialize_identifier(), deserialize_ignored_any(),
    }
}

/// A mapping's entries, each value with its path.
struct Entries<'a> {
    iter: serde_yaml_ng::mapping::Iter<'a>,
    value: Option<(&'a Value, Path)>,
    path: Path,
}

impl<'a> MapAccess<'a> for Entries<'a> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        let path = self.path.key(key);
        self.value = Some((value, path.clone()));
        // A text key is read by serde's own string deserializer, so that a section's
        // `unknown_field` comes back as this module's error, with its list of keys.
        match key {
            Value::String(text) => seed.deserialize(BorrowedStrDeserializer::<Error>::new(text)),
            other => seed.deserialize(Node {
                value: other,
                path: path.clone(),
            }),
        }
        .map(Some)
        .map_err(|e| e.at(&path))
    }

    fn next_value_seed<S: DeserializeSeed<'a>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let (value, path) = self
            .value
            .take()
            .expect("serde reads a value after its key");
        seed.deserialize(Node { value, path })
    }
}

/// A list's items, each with its position.
struct Items<'a> {
    iter: std::iter::Enumerate<std::slice::Iter<'a, Value>>,
    path: Path,
}

impl<'a> SeqAccess<'a> for Items<'a> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'a>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some((index, value)) = self.iter.next() else {
            return Ok(None);
        };
        seed.deserialize(Node {
            value,
            path: self.path.child(Segment::Index(index)),
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Top {
        name: String,
        #[serde(default)]
        inner: Inner,
        #[serde(default)]
        list: Vec<Inner>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, default)]
    struct Inner {
        count: u32,
        #[serde(rename = "type")]
        kind: String,
    }

    fn mistakes(yaml: &str) -> Vec<String> {
        let tree: Value = serde_yaml_ng::from_str(yaml).unwrap();
        every_mistake::<Top>(tree)
            .unwrap_err()
            .iter()
            .map(Mistake::message)
            .collect()
    }

    #[test]
    fn a_good_tree_reads_as_serde_yaml_reads_it() {
        let yaml = "name: t\ninner: {count: 3, type: x}\nlist: [{count: 1}]\n";
        let tree: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let read: Top = every_mistake(tree).unwrap();
        assert_eq!(read, serde_yaml_ng::from_str::<Top>(yaml).unwrap());
    }

    #[test]
    fn every_mistake_comes_back_once_with_its_path_in_file_order() {
        let got = mistakes(
            "name: 7\nextra: 1\ninner: {count: x, kind: y, type: [1]}\nlist: [{count: 1}, {count: -1}]\n",
        );
        assert_eq!(
            got,
            [
                "name: invalid type: integer `7`, expected a string",
                "extra: unknown key; expected one of name, inner, list",
                "inner.count: invalid type: string \"x\", expected a whole number",
                "inner.kind: unknown key; expected one of count, type",
                "inner.type: invalid type: sequence, expected a string",
                "list[1].count: invalid value: integer `-1`, expected a whole number",
            ]
        );
    }

    #[test]
    fn a_missing_key_is_reported_unless_a_mistake_took_it_out() {
        assert_eq!(mistakes("inner: {}\n"), ["missing field `name`"]);
        assert_eq!(
            mistakes("name: [1]\n"),
            ["name: invalid type: sequence, expected a string"]
        );
    }
}
