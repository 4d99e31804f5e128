//! The built-in `echo` runner: the message's parts come back as the task's
//! one artifact. It is the default agent, so `agentd serve` works as is.

use super::{Done, Link};
use crate::control::{Cause, FromWorker, Outcome};
use crate::wire::{Artifact, Message, Part};

/// Answers at once, so it reads no control frame while it runs (no
/// thread, no channel: a cancel that comes now finds the task done, and
/// the worker gone, as with any task that ends first).
pub fn run(message: &Message, link: &Link) -> Done {
    let parts = if message.parts.is_empty() {
        vec![Part::text("")]
    } else {
        message.parts.clone()
    };
    // `done` follows at once (worker::run): both go in one write.
    let sent = link.hold(&FromWorker::Artifact {
        artifact: Box::new(Artifact {
            artifact_id: crate::ids::new_id(),
            name: Some("echo".into()),
            description: None,
            parts,
            metadata: None,
            extensions: Vec::new(),
        }),
        append: false,
        last_chunk: true,
    });
    if let Err(e) = sent {
        return Done {
            outcome: Outcome::Failed,
            cause: Cause::Failed,
            text: Some(format!("the echo does not fit the control channel: {e}")),
        };
    }
    Done {
        outcome: Outcome::Completed,
        cause: Cause::Completed,
        text: None,
    }
}
