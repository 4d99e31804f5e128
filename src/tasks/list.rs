//! ListTasks: filtering, the sort order and the page cursor.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::slot::Slot;
use super::TaskTable;
use crate::principal::Principal;
use crate::wire::{ListTasksResponse, TaskState};

/// A predicate on a task's metadata (ListTasks filters).
pub type MetadataFilter = Box<dyn Fn(Option<&Map<String, Value>>) -> bool + Send + Sync>;

/// What a ListTasks page asks for, validated.
pub struct ListQuery {
    pub context_id: Option<String>,
    pub status: Option<TaskState>,
    pub after_ms: Option<u64>,
    pub page_size: usize,
    pub cursor: Option<(u64, String)>,
    pub history_length: Option<usize>,
    pub include_artifacts: bool,
    /// Every listed task's metadata must pass it.
    pub metadata: Option<MetadataFilter>,
}

impl TaskTable {
    /// One page of the tasks `principal` may see, newest status first.
    pub fn list(&self, principal: &Principal, q: &ListQuery) -> ListTasksResponse {
        let slots: Vec<Arc<Slot>> = self
            .index()
            .tasks
            .values()
            .filter(|s| s.may_see(principal))
            .cloned()
            .collect();
        let mut rows: Vec<(u64, Arc<Slot>)> = slots
            .into_iter()
            .filter(|s| q.context_id.as_ref().is_none_or(|c| **c == *s.context_id))
            .filter_map(|s| {
                let e = s.lock();
                let keep = q.status.is_none_or(|st| st == e.state())
                    && q.after_ms.is_none_or(|t| e.status_ms >= t)
                    && q.metadata.as_ref().is_none_or(|f| f(e.metadata.as_deref()));
                let ms = e.status_ms;
                drop(e);
                keep.then_some((ms, s))
            })
            .collect();
        rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
        let total = rows.len();
        let start = match &q.cursor {
            None => 0,
            // The first row after the cursor in the sort order (newest
            // status first, then id): tasks that changed since keep their
            // place by their new timestamp, none is skipped or repeated.
            Some((ms, id)) => rows
                .iter()
                .position(|(at, s)| *at < *ms || (*at == *ms && *s.id > **id))
                .unwrap_or(total),
        };
        let page = &rows[start.min(total)..(start + q.page_size).min(total)];
        let next = match page.last() {
            Some((ms, s)) if start + page.len() < total => encode_cursor(*ms, &s.id),
            _ => String::new(),
        };
        ListTasksResponse {
            tasks: page
                .iter()
                .map(|(_, s)| {
                    let view = s.lock().view(q.history_length, q.include_artifacts);
                    s.render(view)
                })
                .collect(),
            next_page_token: next,
            page_size: q.page_size as i32,
            total_size: total as i32,
        }
    }
}

/// Parses a ListTasks `pageToken` (hex of `MS:ID`).
pub fn decode_cursor(token: &str) -> Option<(u64, String)> {
    if token.len() % 2 != 0 || token.len() > 512 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let (ms, id) = text.split_once(':')?;
    Some((ms.parse().ok()?, id.to_string()))
}

pub(super) fn encode_cursor(ms: u64, id: &str) -> String {
    format!("{ms}:{id}").bytes().map(|b| format!("{b:02x}")).collect()
}
