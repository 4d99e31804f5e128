//! The A2A Part: one piece of a message or an artifact (text, raw bytes,
//! a URL or JSON data), with its metadata, file name and media type.

use std::fmt;

use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::LongText;

/// The content of a Part: exactly one of these keys on the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum PartContent {
    Text(String),
    /// base64 text, kept as sent.
    Raw(String),
    Url(String),
    Data(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub content: PartContent,
    pub metadata: Option<Map<String, Value>>,
    pub filename: Option<String>,
    pub media_type: Option<String>,
}

impl Part {
    pub fn text(t: impl Into<String>) -> Part {
        Part {
            content: PartContent::Text(t.into()),
            metadata: None,
            filename: None,
            media_type: None,
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match &self.content {
            PartContent::Text(t) => Some(t),
            _ => None,
        }
    }
}

impl Serialize for Part {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        match &self.content {
            PartContent::Text(t) => m.serialize_entry("text", &LongText(t))?,
            PartContent::Raw(r) => m.serialize_entry("raw", r)?,
            PartContent::Url(u) => m.serialize_entry("url", u)?,
            PartContent::Data(d) => m.serialize_entry("data", d)?,
        }
        if let Some(md) = &self.metadata {
            m.serialize_entry("metadata", md)?;
        }
        if let Some(f) = &self.filename {
            m.serialize_entry("filename", f)?;
        }
        if let Some(mt) = &self.media_type {
            m.serialize_entry("mediaType", mt)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Part {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(PartMembers)
    }
}

/// The members of a Part that mean something; any other is skipped.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum PartKey {
    Text,
    Raw,
    Url,
    Data,
    Metadata,
    Filename,
    MediaType,
    #[serde(rename = "media_type")]
    MediaTypeSnake,
    #[serde(other)]
    Other,
}

/// Reads a Part member by member, keeping each known member's last value
/// (as a JSON object read whole would), without a map of the whole object
/// in between: parts are read on every request and every frame, and that
/// map was a tree of allocations each time.
struct PartMembers;

impl<'de> Visitor<'de> for PartMembers {
    type Value = Part;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a part (an object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Part, A::Error> {
        let [mut text, mut raw, mut url, mut data, mut metadata, mut filename, mut media, mut media_snake] =
            [(); 8].map(|()| None::<Value>);
        while let Some(key) = map.next_key::<PartKey>()? {
            let slot = match key {
                PartKey::Text => &mut text,
                PartKey::Raw => &mut raw,
                PartKey::Url => &mut url,
                PartKey::Data => &mut data,
                PartKey::Metadata => &mut metadata,
                PartKey::Filename => &mut filename,
                PartKey::MediaType => &mut media,
                PartKey::MediaTypeSnake => &mut media_snake,
                PartKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = Some(map.next_value()?);
        }
        // A present `null` is not set, except for `data` (a
        // google.protobuf.Value, where `null` is a value).
        let set = |v: Option<Value>| v.filter(|v| !v.is_null());
        let string_of = |v: Value, key: &str| match v {
            Value::String(s) => Ok(s),
            _ => Err(A::Error::custom(format!("part `{key}` must be a string"))),
        };
        let mut content = None;
        let mut kinds = 0;
        let found = [
            (set(text), "text", PartContent::Text as fn(String) -> PartContent),
            (set(raw), "raw", PartContent::Raw),
            (set(url), "url", PartContent::Url),
        ];
        for (value, key, kind) in found {
            if let Some(v) = value {
                kinds += 1;
                content = Some(kind(string_of(v, key)?));
            }
        }
        if let Some(v) = data {
            kinds += 1;
            content = Some(PartContent::Data(v));
        }
        let (Some(content), 1) = (content, kinds) else {
            return Err(A::Error::custom(
                "a part must have exactly one of `text`, `raw`, `url`, `data`",
            ));
        };
        let metadata = match set(metadata) {
            None => None,
            Some(Value::Object(m)) => Some(m),
            Some(_) => return Err(A::Error::custom("part `metadata` must be an object")),
        };
        let opt_string = |v: Option<Value>, key: &str| set(v).map(|v| string_of(v, key)).transpose();
        // `mediaType` given at all (even as null) wins over `media_type`.
        Ok(Part {
            content,
            metadata,
            filename: opt_string(filename, "filename")?,
            media_type: opt_string(media.or(media_snake), "mediaType")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn part(v: Value) -> Result<Part, String> {
        serde_json::from_value(v.clone())
            .and_then(|a: Part| {
                // The same from text, as requests and frames are read.
                let b: Part = serde_json::from_str(&v.to_string())?;
                assert_eq!(a, b);
                Ok(a)
            })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn members_are_read_one_by_one_with_the_last_of_a_repeated_one_kept() {
        let p = part(json!({"text": "hi", "mediaType": "text/plain", "filename": "a.txt",
                            "metadata": {"k": [1, {"deep": true}]}, "other": {"x": [1, 2]}}))
        .unwrap();
        assert_eq!(p.content, PartContent::Text("hi".into()));
        assert_eq!(p.media_type.as_deref(), Some("text/plain"));
        assert_eq!(p.filename.as_deref(), Some("a.txt"));
        assert_eq!(p.metadata.unwrap()["k"], json!([1, {"deep": true}]));
        let p: Part = serde_json::from_str(r#"{"text": "first", "text": "last"}"#).unwrap();
        assert_eq!(p.content, PartContent::Text("last".into()));
        // A later null unsets an earlier value, as in a JSON object read whole.
        let e = serde_json::from_str::<Part>(r#"{"text": "first", "text": null}"#).unwrap_err();
        assert!(e.to_string().contains("exactly one of"), "{e}");
    }

    #[test]
    fn each_kind_of_content_and_the_snake_case_media_type_are_read() {
        assert_eq!(
            part(json!({"raw": "aGk="})).unwrap().content,
            PartContent::Raw("aGk=".into())
        );
        assert_eq!(part(json!({"url": "u"})).unwrap().content, PartContent::Url("u".into()));
        assert_eq!(
            part(json!({"data": {"a": 1}})).unwrap().content,
            PartContent::Data(json!({"a": 1}))
        );
        assert_eq!(
            part(json!({"data": null})).unwrap().content,
            PartContent::Data(Value::Null)
        );
        let snake = part(json!({"text": "t", "media_type": "text/csv"})).unwrap();
        assert_eq!(snake.media_type.as_deref(), Some("text/csv"));
        // `mediaType` given, even as null, wins over `media_type`.
        let both = part(json!({"text": "t", "mediaType": null, "media_type": "text/csv"})).unwrap();
        assert_eq!(both.media_type, None);
        // Null members are unset.
        let nulls = part(json!({"text": "t", "raw": null, "metadata": null, "filename": null})).unwrap();
        assert_eq!((nulls.metadata, nulls.filename), (None, None));
    }

    #[test]
    fn a_bad_part_gets_an_error_that_names_the_member() {
        let cases = [
            (json!({"text": 3}), "part `text` must be a string"),
            (json!({"url": ["u"]}), "part `url` must be a string"),
            (json!({"text": "t", "metadata": 1}), "part `metadata` must be an object"),
            (json!({"text": "t", "filename": 1}), "part `filename` must be a string"),
            (
                json!({"text": "t", "mediaType": {}}),
                "part `mediaType` must be a string",
            ),
            (json!({"text": "t", "data": 1}), "exactly one of"),
            (json!({"metadata": {}}), "exactly one of"),
            (json!("text"), "expected a part (an object)"),
            (json!(["text", "t"]), "expected a part (an object)"),
        ];
        for (v, want) in cases {
            let e = part(v.clone()).unwrap_err();
            assert!(e.contains(want), "{v}: {e}");
        }
    }
}
