//! The public agent card, built once at start-up from the config and the
//! listeners, and served with an `ETag`, a `Last-Modified` (its build time)
//! and `Cache-Control`.

use serde_json::{json, Map, Value};

use crate::config::{Config, Runner};
use crate::transport::Address;

/// The card as served: its bytes and their validators.
pub struct Card {
    pub json: Vec<u8>,
    pub etag: String,
    /// When it was built (the daemon's start, when the config was read):
    /// its `Last-Modified`, in ms since the epoch.
    pub built_ms: u64,
}

/// The A2A protocol version every interface of ours speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

impl Card {
    pub fn build(cfg: &Config, listeners: &[Address], streaming: bool) -> Card {
        let value = card_value(cfg, listeners, streaming);
        let json = serde_json::to_vec(&value).unwrap_or_default();
        let etag = format!("\"{:016x}\"", fnv1a(&json));
        Card {
            json,
            etag,
            built_ms: crate::clock::now_ms(),
        }
    }
}

fn card_value(cfg: &Config, listeners: &[Address], streaming: bool) -> Value {
    let c = &cfg.card;
    let mut interfaces: Vec<Value> = listeners
        .iter()
        .map(|a| json!({"url": a.to_string(), "protocolBinding": a.binding_uri(), "protocolVersion": PROTOCOL_VERSION}))
        .collect();
    interfaces.extend(
        cfg.advertise
            .iter()
            .map(|(binding, url)| json!({"url": url, "protocolBinding": binding, "protocolVersion": PROTOCOL_VERSION})),
    );
    let (default_desc, default_skill_desc) = match &cfg.runner {
        Runner::Echo => (
            "agentd's built-in echo agent: every task answers with the message it was given.".to_string(),
            "Answers with the text it was sent.".to_string(),
        ),
        Runner::Exec { argv } => (
            format!("Runs `{}` for every task, supervised by agentd.", argv.join(" ")),
            format!("Sends the message to `{}` and returns what it prints.", argv.join(" ")),
        ),
        Runner::Peer { address } => (
            format!("Delegates every task to the A2A agent at {address}."),
            format!("Whatever the agent at {address} does."),
        ),
    };
    let runner = cfg.runner.name();
    let mut skill = Map::new();
    skill.insert("id".into(), json!(c.skill_id.as_deref().unwrap_or(runner)));
    skill.insert("name".into(), json!(c.skill_name.as_deref().unwrap_or(runner)));
    skill.insert(
        "description".into(),
        json!(c.skill_description.clone().unwrap_or(default_skill_desc)),
    );
    let tags = if c.skill_tags.is_empty() {
        vec![runner.to_string()]
    } else {
        c.skill_tags.clone()
    };
    skill.insert("tags".into(), json!(tags));
    if !c.skill_examples.is_empty() {
        skill.insert("examples".into(), json!(c.skill_examples));
    }
    let mut card = Map::new();
    card.insert("name".into(), json!(c.name));
    card.insert(
        "description".into(),
        json!(c.description.clone().unwrap_or(default_desc)),
    );
    card.insert("supportedInterfaces".into(), Value::Array(interfaces));
    if let (Some(org), Some(url)) = (&c.provider_organization, &c.provider_url) {
        card.insert("provider".into(), json!({"organization": org, "url": url}));
    }
    card.insert("version".into(), json!(c.version));
    if let Some(doc) = &c.documentation_url {
        card.insert("documentationUrl".into(), json!(doc));
    }
    card.insert(
        "capabilities".into(),
        json!({
            "streaming": streaming,
            "pushNotifications": false,
            "extendedAgentCard": false,
            "extensions": crate::ext::card_entries(&cfg.ext_required),
        }),
    );
    card.insert("defaultInputModes".into(), json!(c.input_modes));
    card.insert("defaultOutputModes".into(), json!(c.output_modes));
    card.insert("skills".into(), json!([Value::Object(skill)]));
    Value::Object(card)
}

/// FNV-1a, 64-bit: a stable content hash for the ETag (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_listeners_first_then_advertised_and_declares_no_security() {
        let mut cfg = Config::default();
        cfg.set("a2a.advertise", "JSONRPC http://127.0.0.1:8080/").unwrap();
        let card = Card::build(&cfg, &[Address::Unix("/run/a.sock".into())], false);
        let v: Value = serde_json::from_slice(&card.json).unwrap();
        assert_eq!(v["supportedInterfaces"][0]["url"], "unix:///run/a.sock");
        assert_eq!(
            v["supportedInterfaces"][0]["protocolBinding"],
            "https://agentd.dev/a2a/binding/jsonrpc-unix"
        );
        assert_eq!(v["supportedInterfaces"][1]["protocolBinding"], "JSONRPC");
        assert_eq!(v["supportedInterfaces"][1]["protocolVersion"], "1.0");
        assert!(v.get("securitySchemes").is_none());
        assert_eq!(v["capabilities"]["pushNotifications"], false);
        assert_eq!(v["skills"][0]["tags"][0], "echo");
        assert!(card.etag.starts_with('"') && card.etag.len() == 18);
    }
}
