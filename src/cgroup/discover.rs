//! Which cgroups are ours and which of them agentd uses, read from
//! /proc/self/cgroup and /proc/self/mountinfo (pure parsing, tested here).

use std::path::PathBuf;

use super::{Kind, Limits};

/// Of our own cgroups, the ones agentd uses: v2 (containment, and limits
/// where it has the controllers), a v1 pids or memory hierarchy only when
/// that limit is set, and the v1 freezer as containment only when there is
/// no v2 (dropped in [`Isolation::detect`](super::Isolation::detect) once v2 works).
pub(super) fn wanted(own: &[(Kind, PathBuf)], limits: Limits) -> Vec<(Kind, PathBuf)> {
    let used = own.iter().filter(|(kind, _)| match kind {
        Kind::V2 | Kind::V1Freezer => true,
        Kind::V1Pids => limits.pids_max > 0,
        Kind::V1Memory => limits.memory_max_bytes > 0,
    });
    // v2 first: whether it works decides whether the freezer is needed.
    let (mut out, v1): (Vec<_>, Vec<_>) = used.cloned().partition(|(kind, _)| *kind == Kind::V2);
    out.extend(v1);
    out
}

/// Our own cgroups that agentd could use (from /proc/self/cgroup and
/// /proc/self/mountinfo): the v2 one, and the v1 pids, memory and freezer
/// ones, each joined to where its hierarchy is mounted.
pub(super) fn own_cgroups(cgroups: &str, mounts: &str) -> Vec<(Kind, PathBuf)> {
    let mut out = Vec::new();
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let kind = match controllers {
            "" => Kind::V2,
            c if c.split(',').any(|x| x == "pids") => Kind::V1Pids,
            c if c.split(',').any(|x| x == "memory") => Kind::V1Memory,
            c if c.split(',').any(|x| x == "freezer") => Kind::V1Freezer,
            _ => continue,
        };
        if let Some(mount) = mount_of(mounts, kind) {
            out.push((kind, mount.join(path.trim_start_matches('/'))));
        }
    }
    out
}

/// The mount point of a hierarchy, from /proc/self/mountinfo.
fn mount_of(mountinfo: &str, kind: Kind) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mount_point = pre.split_whitespace().nth(4)?;
        let mut post = post.split_whitespace();
        let fstype = post.next()?;
        let options = post.nth(1).unwrap_or("");
        let wanted = match kind {
            Kind::V2 => fstype == "cgroup2",
            Kind::V1Pids => fstype == "cgroup" && options.split(',').any(|o| o == "pids"),
            Kind::V1Memory => fstype == "cgroup" && options.split(',').any(|o| o == "memory"),
            Kind::V1Freezer => fstype == "cgroup" && options.split(',').any(|o| o == "freezer"),
        };
        wanted.then(|| PathBuf::from(mount_point))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn finds_each_hierarchy_mount() {
        assert_eq!(mount_of(MOUNTINFO, Kind::V2), Some("/sys/fs/cgroup/unified".into()));
        assert_eq!(mount_of(MOUNTINFO, Kind::V1Pids), Some("/sys/fs/cgroup/pids".into()));
        assert_eq!(
            mount_of(MOUNTINFO, Kind::V1Memory),
            Some("/sys/fs/cgroup/memory".into())
        );
        assert_eq!(mount_of("", Kind::V2), None);
    }

    const HYBRID_CGROUP: &str = "\
8:pids:/
6:freezer:/
4:memory:/svc/x
0::/
";

    fn v1_mounts() -> String {
        MOUNTINFO.replace(
            "39 31 0:36",
            "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n39 31 0:36",
        )
    }

    #[test]
    fn a_hybrid_host_uses_v2_and_v1_only_for_a_set_limit() {
        let own = own_cgroups(HYBRID_CGROUP, &v1_mounts());
        assert_eq!(
            own,
            vec![
                (Kind::V1Pids, "/sys/fs/cgroup/pids".into()),
                (Kind::V1Freezer, "/sys/fs/cgroup/freezer".into()),
                (Kind::V1Memory, "/sys/fs/cgroup/memory/svc/x".into()),
                (Kind::V2, "/sys/fs/cgroup/unified".into()),
            ]
        );
        // No limit: v2 only (the freezer is dropped once v2 works).
        let kinds = |l| wanted(&own, l).into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(kinds(Limits::default()), vec![Kind::V2, Kind::V1Freezer]);
        // A pids limit only where it is free never asks for v1.
        let free_only = Limits {
            pids_max_where_free: 1024,
            ..Limits::default()
        };
        assert_eq!(kinds(free_only), vec![Kind::V2, Kind::V1Freezer]);
        let pids = Limits {
            pids_max: 64,
            ..Limits::default()
        };
        assert_eq!(kinds(pids), vec![Kind::V2, Kind::V1Pids, Kind::V1Freezer]);
        let both = Limits {
            pids_max: 64,
            memory_max_bytes: 1 << 30,
            pids_max_where_free: 0,
        };
        assert_eq!(
            kinds(both),
            vec![Kind::V2, Kind::V1Pids, Kind::V1Freezer, Kind::V1Memory]
        );
    }

    #[test]
    fn a_pure_v2_host_and_a_v1_only_host() {
        let v2 = "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let own = own_cgroups("0::/system.slice/agentd.service\n", v2);
        assert_eq!(
            own,
            vec![(Kind::V2, "/sys/fs/cgroup/system.slice/agentd.service".into())]
        );
        let limits = Limits {
            pids_max: 64,
            memory_max_bytes: 1 << 30,
            pids_max_where_free: 0,
        };
        assert_eq!(wanted(&own, limits), own, "v2 enforces the limits itself");
        // v1 only: the freezer contains; no v2 line, or v2 not mounted.
        let mounts = v1_mounts().replace(
            "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
            "",
        );
        let own = own_cgroups(HYBRID_CGROUP, &mounts);
        let kinds: Vec<Kind> = wanted(&own, Limits::default()).into_iter().map(|(k, _)| k).collect();
        assert_eq!(kinds, vec![Kind::V1Freezer]);
        assert!(own_cgroups("", "").is_empty());
    }
}
