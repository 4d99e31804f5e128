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
        match self {
            Principal::Unix { uid, .. } => format!("unix:uid={uid}"),
            Principal::Vsock { cid, .. } => format!("vsock:cid={cid}"),
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
