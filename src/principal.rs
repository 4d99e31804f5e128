//! Who is on the other end of a connection, once it passed the peer gate:
//! shared vocabulary for every room from the listener down to the task table.

/// Who the peer of an accepted connection is, once it passed the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Unix { uid: u32, pid: i32 },
    Vsock { cid: u32, operator: bool },
}

impl Principal {
    /// The text recorded on tasks the peer creates: `unix:uid=1000`,
    /// `vsock:cid=3`.
    pub fn name(&self) -> String {
        let (kind, number) = self.name_parts();
        format!("{kind}{number}")
    }

    /// Whether `name` is this peer's [`name`](Self::name), compared
    /// without spelling it.
    pub fn is_named(&self, name: &str) -> bool {
        let (kind, number) = self.name_parts();
        name.strip_prefix(kind).is_some_and(|digits| {
            // Only the spelling `name` writes: no sign, no leading zero.
            let plain = digits.bytes().all(|b| b.is_ascii_digit()) && (digits == "0" || !digits.starts_with('0'));
            plain && digits.parse() == Ok(number)
        })
    }

    fn name_parts(&self) -> (&'static str, u32) {
        match self {
            Principal::Unix { uid, .. } => ("unix:uid=", *uid),
            Principal::Vsock { cid, .. } => ("vsock:cid=", *cid),
        }
    }

    /// Operators see every task. Every peer that passes the unix gate is
    /// one; a vsock peer only when its CID is in a2a.vsock_operator_cids.
    pub fn is_operator(&self) -> bool {
        match self {
            Principal::Unix { .. } => true,
            Principal::Vsock { operator, .. } => *operator,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_named_as_it_spells_its_name_and_no_other_way() {
        let peers = [
            Principal::Unix { uid: 0, pid: 1 },
            Principal::Unix { uid: 1000, pid: 1 },
            Principal::Vsock {
                cid: 3,
                operator: false,
            },
            Principal::Vsock {
                cid: u32::MAX,
                operator: true,
            },
        ];
        for p in &peers {
            assert!(p.is_named(&p.name()), "{p:?}");
            for q in &peers {
                assert_eq!(p.is_named(&q.name()), p.name() == q.name(), "{p:?} named as {q:?}");
            }
        }
        let uid_1000 = Principal::Unix { uid: 1000, pid: 1 };
        for not_it in [
            "unix:uid=01000",
            "unix:uid=+1000",
            "unix:uid=",
            "unix:uid=1000 ",
            "vsock:cid=1000",
            "",
        ] {
            assert!(!uid_1000.is_named(not_it), "{not_it:?}");
        }
        assert!(!Principal::Unix { uid: 0, pid: 1 }.is_named("unix:uid=00"));
    }
}
