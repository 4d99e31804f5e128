//! The public agent card, built once at start-up from the config and the
//! listeners, and served with an `ETag`, a `Last-Modified` (its build time)
//! and `Cache-Control`.

use serde::Serialize;
use serde_json::Value;

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
        let json = serde_json::to_vec(&card_json(cfg, listeners, streaming)).unwrap_or_default();
        let etag = format!("\"{:016x}\"", fnv1a(&json));
        Card {
            json,
            etag,
            built_ms: crate::clock::now_ms(),
        }
    }
}

// The card's shape, serialized as it is (typed: a json! tree of it was
// 8 KB of code in the static binary).

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AgentCard<'a> {
    name: &'a str,
    description: String,
    supported_interfaces: Vec<Interface<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<Provider<'a>>,
    version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    documentation_url: Option<&'a str>,
    capabilities: Capabilities,
    default_input_modes: &'a [String],
    default_output_modes: &'a [String],
    skills: [Skill<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Interface<'a> {
    url: String,
    protocol_binding: &'a str,
    protocol_version: &'static str,
}

#[derive(Serialize)]
struct Provider<'a> {
    organization: &'a str,
    url: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Capabilities {
    streaming: bool,
    push_notifications: bool,
    extended_agent_card: bool,
    extensions: Value,
}

#[derive(Serialize)]
struct Skill<'a> {
    id: &'a str,
    name: &'a str,
    description: String,
    tags: Vec<String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    examples: &'a [String],
}

fn card_json<'a>(cfg: &'a Config, listeners: &[Address], streaming: bool) -> AgentCard<'a> {
    let c = &cfg.card;
    let mut interfaces: Vec<Interface> = listeners
        .iter()
        .map(|a| Interface {
            url: a.to_string(),
            protocol_binding: a.binding_uri(),
            protocol_version: PROTOCOL_VERSION,
        })
        .collect();
    interfaces.extend(cfg.advertise.iter().map(|(binding, url)| Interface {
        url: url.clone(),
        protocol_binding: binding,
        protocol_version: PROTOCOL_VERSION,
    }));
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
    let skill = Skill {
        id: c.skill_id.as_deref().unwrap_or(runner),
        name: c.skill_name.as_deref().unwrap_or(runner),
        description: c.skill_description.clone().unwrap_or(default_skill_desc),
        tags: if c.skill_tags.is_empty() {
            vec![runner.to_string()]
        } else {
            c.skill_tags.clone()
        },
        examples: &c.skill_examples,
    };
    AgentCard {
        name: &c.name,
        description: c.description.clone().unwrap_or(default_desc),
        supported_interfaces: interfaces,
        provider: match (&c.provider_organization, &c.provider_url) {
            (Some(organization), Some(url)) => Some(Provider { organization, url }),
            _ => None,
        },
        version: &c.version,
        documentation_url: c.documentation_url.as_deref(),
        capabilities: Capabilities {
            streaming,
            push_notifications: false,
            extended_agent_card: false,
            extensions: crate::ext::card_entries(&cfg.ext_required),
        },
        default_input_modes: &c.input_modes,
        default_output_modes: &c.output_modes,
        skills: [skill],
    }
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
