//! A request's header fields, as sent: names as they came, values trimmed
//! of spaces and tabs. One string holds them all, with where each field is:
//! two allocations per request instead of two per field.

use std::fmt;
use std::ops::Range;

#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers {
    text: String,
    /// Each field's name and value, as ranges of `text`, in order.
    fields: Vec<(Range<usize>, Range<usize>)>,
}

impl Headers {
    /// Room for `fields` fields holding `bytes` bytes of names and values.
    pub fn with_capacity(fields: usize, bytes: usize) -> Headers {
        Headers {
            text: String::with_capacity(bytes),
            fields: Vec::with_capacity(fields),
        }
    }

    pub fn push(&mut self, name: &str, value: &str) {
        let n = self.text.len()..self.text.len() + name.len();
        self.text.push_str(name);
        let v = self.text.len()..self.text.len() + value.len();
        self.text.push_str(value);
        self.fields.push((n, v));
    }

    /// Every field, in order: (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields
            .iter()
            .map(|(n, v)| (&self.text[n.clone()], &self.text[v.clone()]))
    }

    /// The first field named `name`, compared case-insensitively.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> FromIterator<(&'a str, &'a str)> for Headers {
    fn from_iter<I: IntoIterator<Item = (&'a str, &'a str)>>(fields: I) -> Headers {
        let mut h = Headers::default();
        for (n, v) in fields {
            h.push(n, v);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_keep_their_order_and_names_compare_without_case() {
        let h: Headers = [("X-Mixed", "a b"), ("x-mixed", "2"), ("Host", "")]
            .into_iter()
            .collect();
        assert_eq!(h.len(), 3);
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            [("X-Mixed", "a b"), ("x-mixed", "2"), ("Host", "")]
        );
        assert_eq!(h.get("X-MIXED"), Some("a b"), "the first of two");
        assert_eq!(h.get("host"), Some(""));
        assert_eq!(h.get("nope"), None);
        assert!(Headers::default().is_empty());
    }
}
