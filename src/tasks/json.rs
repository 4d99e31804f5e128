//! A task written to JSON straight from what the table holds: the same
//! JSON as `wire::Task`'s, with no deep copy in between. A blocking
//! SendMessage and GetTask answer with a [`Snapshot`](super::Snapshot)'s
//! reference counts; rendering a `Task` first would copy every message,
//! part and metadata map only to drop them once written.
//!
//! The one difference from the rendered `Task`: the task's cost is written
//! in [`Cost`]'s field order (as the manual shows it), not the sorted order
//! of a `serde_json::Value` — JSON objects have no order.

use std::sync::Arc;

use serde::ser::{SerializeMap, SerializeSeq, SerializeStruct, Serializer};
use serde::Serialize;
use serde_json::{Map, Value};

use super::entry::{Stored, View};
use crate::cost::{Cost, COST_KEY};
use crate::wire::{Artifact, JoinedText, Message, Part};

/// [`View`] as a task's JSON, under the task's ids.
pub(super) struct TaskJson<'a> {
    pub id: &'a str,
    pub context_id: &'a str,
    pub view: &'a View,
}

impl Serialize for TaskJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.view;
        let metadata = Metadata {
            map: v.metadata.as_deref(),
            cost: v.cost,
        };
        // The fields and the order of `wire::Task`'s derive.
        let mut st = s.serialize_struct("Task", 6)?;
        st.serialize_field("id", self.id)?;
        st.serialize_field("contextId", self.context_id)?;
        st.serialize_field("status", &*v.status)?;
        if v.artifacts.is_empty() {
            st.skip_field("artifacts")?;
        } else {
            st.serialize_field("artifacts", &Artifacts(&v.artifacts))?;
        }
        if v.history.is_empty() {
            st.skip_field("history")?;
        } else {
            st.serialize_field("history", &History(&v.history))?;
        }
        if metadata.is_empty() {
            st.skip_field("metadata")?;
        } else {
            st.serialize_field("metadata", &metadata)?;
        }
        st.end()
    }
}

struct History<'a>(&'a [Arc<Message>]);

impl Serialize for History<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for m in self.0 {
            seq.serialize_element(&**m)?;
        }
        seq.end()
    }
}

struct Artifacts<'a>(&'a [Arc<Stored>]);

impl Serialize for Artifacts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for stored in self.0 {
            match stored.chunks.as_slice() {
                // One chunk is the artifact as it is.
                [only] => seq.serialize_element(&**only)?,
                // Several are written as `Stored::render` joins them,
                // without joining them first.
                _ => seq.serialize_element(&Joined(stored))?,
            }
        }
        seq.end()
    }
}

/// An artifact of several chunks, written as [`Stored::render`] would join
/// them (the first chunk's fields, every chunk's parts, a run of text parts
/// as one), without the join: a program's large output is escaped once,
/// straight from the chunks it came in, and never copied whole.
struct Joined<'a>(&'a Stored);

impl Serialize for Joined<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Some(first) = self.0.chunks.first() else {
            return self.0.render().serialize(s);
        };
        // The fields and the order of `wire::Artifact`'s derive.
        let mut st = s.serialize_struct("Artifact", 6)?;
        st.serialize_field("artifactId", &first.artifact_id)?;
        match &first.name {
            Some(name) => st.serialize_field("name", name)?,
            None => st.skip_field("name")?,
        }
        match &first.description {
            Some(d) => st.serialize_field("description", d)?,
            None => st.skip_field("description")?,
        }
        st.serialize_field("parts", &JoinedParts(merged_parts(&self.0.chunks)))?;
        match &first.metadata {
            Some(md) => st.serialize_field("metadata", md)?,
            None => st.skip_field("metadata")?,
        }
        if first.extensions.is_empty() {
            st.skip_field("extensions")?;
        } else {
            st.serialize_field("extensions", &first.extensions)?;
        }
        st.end()
    }
}

/// A part, and the text of the parts joined onto it.
type MergedPart<'a> = (&'a Part, Vec<&'a str>);

/// The parts of an artifact's chunks as `entry::merge_parts` joins them:
/// the first chunk's as they are, then each later part either joined onto
/// the text part before it (a text part without metadata) or on its own.
fn merged_parts(chunks: &[Arc<Artifact>]) -> Vec<MergedPart<'_>> {
    let mut chunks = chunks.iter();
    let mut out: Vec<MergedPart<'_>> = chunks
        .next()
        .map(|c| c.parts.iter().map(|p| (p, Vec::new())).collect())
        .unwrap_or_default();
    for part in chunks.flat_map(|c| &c.parts) {
        match (out.last_mut(), part.as_text()) {
            (Some((last, more)), Some(text)) if last.as_text().is_some() && part.metadata.is_none() => more.push(text),
            _ => out.push((part, Vec::new())),
        }
    }
    out
}

struct JoinedParts<'a>(Vec<MergedPart<'a>>);

impl Serialize for JoinedParts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for (part, more) in &self.0 {
            match part.as_text() {
                Some(text) if !more.is_empty() => seq.serialize_element(&JoinedTextPart { part, text, more })?,
                _ => seq.serialize_element(*part)?,
            }
        }
        seq.end()
    }
}

/// A text part with more text joined on: `wire::Part`'s JSON, its text
/// the pieces written as one string (`wire::JoinedText`).
struct JoinedTextPart<'a> {
    part: &'a Part,
    text: &'a str,
    more: &'a [&'a str],
}

impl Serialize for JoinedTextPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let pieces: Vec<&str> = std::iter::once(self.text).chain(self.more.iter().copied()).collect();
        m.serialize_entry("text", &JoinedText(&pieces))?;
        if let Some(md) = &self.part.metadata {
            m.serialize_entry("metadata", md)?;
        }
        if let Some(f) = &self.part.filename {
            m.serialize_entry("filename", f)?;
        }
        if let Some(mt) = &self.part.media_type {
            m.serialize_entry("mediaType", mt)?;
        }
        m.end()
    }
}

/// The task's metadata with its cost under [`COST_KEY`] (agentd's own key:
/// whatever a client sent under it is not written), in the map's key order.
struct Metadata<'a> {
    map: Option<&'a Map<String, Value>>,
    cost: Option<Cost>,
}

impl Metadata<'_> {
    fn entries(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.map.into_iter().flatten().filter(|(k, _)| *k != COST_KEY)
    }

    fn is_empty(&self) -> bool {
        self.cost.is_none() && self.entries().next().is_none()
    }
}

impl Serialize for Metadata<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        let mut cost = self.cost.as_ref();
        for (k, v) in self.entries() {
            if let Some(c) = cost.filter(|_| k.as_str() > COST_KEY) {
                map.serialize_entry(COST_KEY, c)?;
                cost = None;
            }
            map.serialize_entry(k, v)?;
        }
        if let Some(c) = cost {
            map.serialize_entry(COST_KEY, c)?;
        }
        map.end()
    }
}

/// Whether `key` is in any metadata map the view would write: the task's,
/// its status message's, its history's and its artifacts' (and their parts').
pub(super) fn mentions(view: &View, key: &str) -> bool {
    let map_has = |m: &Option<Map<String, Value>>| m.as_ref().is_some_and(|m| m.contains_key(key));
    let parts_have = |parts: &[Part]| parts.iter().any(|p| map_has(&p.metadata));
    let message_has = |m: &Message| map_has(&m.metadata) || parts_have(&m.parts);
    let artifact_has = |a: &Artifact| map_has(&a.metadata) || parts_have(&a.parts);
    view.metadata.as_deref().is_some_and(|m| m.contains_key(key))
        || view.status.message.as_deref().is_some_and(message_has)
        || view.history.iter().any(|m| message_has(m))
        || view.artifacts.iter().any(|s| s.chunks.iter().any(|a| artifact_has(a)))
}
