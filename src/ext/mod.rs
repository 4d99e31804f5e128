//! agentd's three A2A extensions. Each is declared in the card
//! (`capabilities.extensions`), active for a request only when the client
//! names its URI in `A2A-Extensions` (requested ∩ declared), echoed in the
//! response's `A2A-Extensions`, and otherwise invisible.
//!
//! | URI | what |
//! |---|---|
//! | `https://agentd.dev/a2a/ext/events` | method `agentd.events/SubscribeToEvents`: every task's lifecycle as one resumable SSE feed |
//! | `https://agentd.dev/a2a/ext/command` | operator operations (status, drain, resume, limits) as one data part of a message |
//! | `https://agentd.dev/a2a/ext/task-annotations` | `key: value` labels attached at send time, kept on the task, filterable in ListTasks |

pub mod annotations;
pub mod command;
pub mod events;

use serde_json::{json, Value};

pub const EVENTS: &str = "https://agentd.dev/a2a/ext/events";
pub const COMMAND: &str = "https://agentd.dev/a2a/ext/command";
pub const ANNOTATIONS: &str = "https://agentd.dev/a2a/ext/task-annotations";

/// Every extension agentd declares, in card order.
pub const DECLARED: [&str; 3] = [EVENTS, COMMAND, ANNOTATIONS];

/// The events extension's one method.
pub const EVENTS_METHOD: &str = "agentd.events/SubscribeToEvents";

/// The card's `capabilities.extensions`, with `required` set for the URIs
/// the operator listed in `ext.required`.
pub fn card_entries(required: &[String]) -> Value {
    let describe = |uri: &str| {
        match uri {
        EVENTS => "Every task's lifecycle across the daemon as one SSE feed (method agentd.events/SubscribeToEvents), resumable from a sequence number.",
        COMMAND => "Operator operations (status, drain, resume, limits) sent as one data part of a message; answered with a data part.",
        _ => "Labels (key: value strings) attached to a task at send time, returned in task metadata and usable as ListTasks filters.",
    }
    };
    Value::Array(
        DECLARED
            .iter()
            .map(|uri| json!({"uri": uri, "description": describe(uri), "required": required.iter().any(|r| r == uri)}))
            .collect(),
    )
}

/// The extensions active for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Active(Vec<&'static str>);

impl Active {
    /// Parses an `A2A-Extensions` header (comma-separated URIs) and keeps
    /// the ones agentd declares; unknown ones are ignored, never an error.
    pub fn from_header(header: Option<&str>) -> Active {
        let requested: Vec<&str> = header
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        Active(DECLARED.iter().copied().filter(|d| requested.contains(d)).collect())
    }

    pub fn has(&self, uri: &str) -> bool {
        self.0.contains(&uri)
    }

    /// The response's `A2A-Extensions` value (empty = send no header).
    pub fn echo(&self) -> Vec<String> {
        self.0.iter().map(|s| s.to_string()).collect()
    }

    /// The first required extension this request did not activate.
    pub fn missing<'a>(&self, required: &'a [String]) -> Option<&'a str> {
        required.iter().map(String::as_str).find(|r| !self.has(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_is_requested_intersect_declared() {
        let a = Active::from_header(Some(&format!(" {EVENTS} , https://example.com/ext/v1,{ANNOTATIONS}")));
        assert!(a.has(EVENTS) && a.has(ANNOTATIONS) && !a.has(COMMAND));
        assert_eq!(a.echo(), vec![EVENTS.to_string(), ANNOTATIONS.to_string()]);
        assert_eq!(Active::from_header(None).echo(), Vec::<String>::new());
        assert_eq!(a.missing(&[COMMAND.to_string()]), Some(COMMAND));
        assert_eq!(a.missing(&[EVENTS.to_string()]), None);
    }

    #[test]
    fn card_marks_required() {
        let entries = card_entries(&[COMMAND.to_string()]);
        assert_eq!(entries[1]["uri"], COMMAND);
        assert_eq!(entries[1]["required"], true);
        assert_eq!(entries[0]["required"], false);
    }
}
