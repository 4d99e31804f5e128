//! The two deployments the examples ship, run under a real container runtime
//! (podman with runc) the way the examples say:
//!
//! - the `FROM scratch` image built from `examples/docker/Dockerfile`, run with
//!   the commands its comments give: a daemon container on a named volume and
//!   a client container on the same volume, as the image's USER; and once more
//!   on a volume made the way Docker makes one (a copy of the image's
//!   directory, ownership and mode included), where podman would chown it;
//! - the pod of `examples/kubernetes/pod.yaml`: its two containers with the
//!   args read from the file (the worker's program swapped for the built-in
//!   echo agent), as its uid, read-only, with no capabilities, on a directory
//!   laid out as kubelet lays out an emptyDir (root's, 0777; and with an
//!   fsGroup, group 10001 and 2777).
//!
//! Needs podman and runc (`.ci/run` installs them from Debian) and the musl
//! target. The two host settings this sandbox needs (runc, since crun refuses
//! its hybrid cgroups; no raised rlimits, since it lacks CAP_SYS_RESOURCE) are
//! given to podman in a containers.conf of the test's own (`CONTAINERS_CONF`);
//! nothing on the host is changed. Without podman the test skips loudly,
//! except under CI, where it fails.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const READY_DEADLINE: Duration = Duration::from_secs(30);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn skip_or_fail(why: &str) {
    common::skip_or_fail("the deployment tests (podman + runc)", why);
}

/// podman with the test's containers.conf, and names of the test's own
/// (`agentd-deploy-PID-…`) so nothing of anyone else's is touched.
struct Podman {
    conf: PathBuf,
    prefix: String,
    work: common::TempDir,
    /// Containers, volumes and images made, removed on drop.
    made: std::cell::RefCell<Vec<(&'static str, String)>>,
}

impl Podman {
    fn new(test: &str) -> Podman {
        let work = common::TempDir::new("deploy");
        let conf = work.0.join("containers.conf");
        std::fs::write(
            &conf,
            "[containers]\ndefault_ulimits = []\n[engine]\nruntime = \"runc\"\n",
        )
        .unwrap();
        Podman {
            conf,
            prefix: format!("agentd-deploy-{}-{test}", std::process::id()),
            work,
            made: Default::default(),
        }
    }

    fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.prefix)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", &self.conf);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.cmd().args(args).output().expect("podman runs");
        assert!(
            out.status.success(),
            "podman {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn made(&self, kind: &'static str, name: &str) {
        self.made.borrow_mut().push((kind, name.to_string()));
    }

    fn logs(&self, container: &str) -> String {
        let out = self.cmd().args(["logs", container]).output().expect("podman logs");
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for (kind, name) in self.made.borrow().iter().rev() {
            if std::thread::panicking() && *kind == "container" {
                eprintln!("--- {name} ---\n{}", self.logs(name));
            }
            let args: &[&str] = match *kind {
                "container" => &["rm", "-f", "-t", "5"],
                "volume" => &["volume", "rm", "-f"],
                _ => &["rmi", "-f"],
            };
            let _ = self.cmd().args(args).arg(name).output();
        }
    }
}

/// Whether podman can run a container here at all.
fn podman_usable() -> Result<(), String> {
    match Command::new("podman").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => return Err(format!("podman --version: {}", String::from_utf8_lossy(&o.stderr))),
        Err(e) => return Err(format!("podman: {e}")),
    }
    if Command::new("runc").arg("--version").output().is_err() {
        return Err("runc is not installed".into());
    }
    if !common::musl_target_installed() {
        return Err("rustup has no x86_64-unknown-linux-musl target".into());
    }
    Ok(())
}

/// The image, built from the Dockerfile as its comments say, in a context
/// that holds only what it copies (the static binary at the path the
/// Dockerfile names).
fn build_image(p: &Podman) -> String {
    let ctx = p.work.0.join("context");
    let bin_dir = ctx.join("target/x86_64-unknown-linux-musl/release");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::fs::copy(common::static_agentd(), bin_dir.join("agentd")).unwrap();
    let image = format!("localhost/{}:test", p.prefix);
    let dockerfile = repo().join("examples/docker/Dockerfile");
    let build = dockerfile_commands()
        .into_iter()
        .find(|c| c.get(1).map(String::as_str) == Some("build"))
        .expect("the Dockerfile says how to build the image");
    // `docker build -f examples/docker/Dockerfile -t agentd .`, in our names.
    let args: Vec<String> = build[1..]
        .iter()
        .map(|a| match a.as_str() {
            "examples/docker/Dockerfile" => dockerfile.display().to_string(),
            "agentd" => image.clone(),
            "." => ctx.display().to_string(),
            other => other.to_string(),
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    p.made("image", &image);
    p.run(&args);
    image
}

/// The `docker …` commands in the Dockerfile's comments, split into words
/// (they use no quotes), with `\` continuations joined.
fn dockerfile_commands() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(repo().join("examples/docker/Dockerfile")).unwrap();
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let Some(body) = line.strip_prefix("#   ") else {
            continue;
        };
        let body = body.trim();
        if current.is_empty() && !body.starts_with("docker ") {
            continue;
        }
        current.push(' ');
        match body.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(body);
                commands.push(current.split_whitespace().map(str::to_string).collect());
                current.clear();
            }
        }
    }
    commands
}

/// The image's USER as (uid, gid).
fn image_user(p: &Podman, image: &str) -> (u32, u32) {
    let out = p.run(&["image", "inspect", "--format", "{{.Config.User}}", image]);
    let user = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (u, g) = user.split_once(':').unwrap_or((&user, &user));
    (
        u.parse().unwrap_or_else(|_| panic!("USER {user} is not numeric")),
        g.parse().unwrap_or_else(|_| panic!("USER {user} is not numeric")),
    )
}

/// (uid, gid, mode) of a path inside the image.
fn stat_in_image(p: &Podman, image: &str, path: &str) -> Option<(u32, u32, u32)> {
    let out = p.run(&["image", "mount", image]);
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let meta = std::fs::symlink_metadata(root.join(path.trim_start_matches('/')));
    let _ = p.cmd().args(["image", "unmount", image]).output();
    let meta = meta.ok()?;
    assert!(meta.is_dir(), "{path} in the image is not a directory");
    Some((meta.uid(), meta.gid(), meta.mode() & 0o7777))
}

/// Polls for a socket file to appear on the host side of a mount.
fn wait_for_socket(p: &Podman, path: &Path, container: &str) {
    let seen = common::wait_for(READY_DEADLINE, || {
        std::fs::symlink_metadata(path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
    });
    assert!(
        seen,
        "{} never appeared; {container} says:\n{}",
        path.display(),
        p.logs(container)
    );
}

/// A client container, as the Dockerfile says: the same image, the same
/// volume, the USER's uid. Returns what `send` printed.
fn send_from_container(p: &Podman, image: &str, mount: &str, uid: u32, endpoint: &str, text: &str) -> String {
    let user = uid.to_string();
    let out = p.run(&[
        "run",
        "--rm",
        "-v",
        mount,
        "--user",
        &user,
        image,
        "send",
        endpoint,
        text,
        "--timeout",
        "20",
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_scratch_image_serves_on_a_named_volume_as_its_comments_say() {
    if let Err(why) = podman_usable() {
        return skip_or_fail(&why);
    }
    let p = Podman::new("image");
    let image = build_image(&p);
    let (uid, gid) = image_user(&p, &image);
    assert_ne!(uid, 0, "the image runs as a user, not root");

    // The image carries its socket directory, owned by its USER, 0700: a new
    // Docker volume is a copy of it, so agentd can create its socket there.
    let (d_uid, _, d_mode) = stat_in_image(&p, &image, "/run/agentd")
        .expect("the image has no /run/agentd: a new Docker volume would be root's");
    assert_eq!(
        d_uid, uid,
        "/run/agentd is owned by uid {d_uid}, not the image's USER {uid}"
    );
    assert_eq!(
        d_mode & 0o022,
        0,
        "/run/agentd is group- or other-writable ({d_mode:04o})"
    );
    assert_eq!(d_mode, 0o700, "/run/agentd mode {d_mode:04o}");
    let (r_uid, _, _) = stat_in_image(&p, &image, "/run").unwrap();
    assert_eq!(r_uid, 0, "/run stays root's: only /run/agentd is the USER's");

    // The commands of the Dockerfile's comments, in this test's names.
    let volume = p.name("run");
    let daemon = p.name("daemon");
    let commands = dockerfile_commands();
    let words: Vec<String> = commands.iter().map(|c| c[1].clone()).collect();
    assert_eq!(words, ["build", "volume", "run", "run"], "{commands:?}");
    let rename = |a: &str| -> String {
        match a {
            "agentd" => image.clone(),
            "agentd-run" => volume.clone(),
            _ => match a.strip_prefix("agentd-run:") {
                Some(rest) => format!("{volume}:{rest}"),
                None => a.to_string(),
            },
        }
    };
    // `docker volume create agentd-run`
    p.made("volume", &volume);
    let create: Vec<String> = commands[1][1..].iter().map(|a| rename(a)).collect();
    p.run(&create.iter().map(String::as_str).collect::<Vec<_>>());
    // `docker run -d --name agentd -v agentd-run:/run/agentd agentd`
    let mut start: Vec<String> = commands[2][1..].iter().map(|a| rename(a)).collect();
    let name_at = start.iter().position(|a| a == "--name").expect("the daemon is named") + 1;
    start[name_at] = daemon.clone();
    p.made("container", &daemon);
    p.run(&start.iter().map(String::as_str).collect::<Vec<_>>());
    // The socket, seen through the volume's mount point on the host.
    let out = p.run(&["volume", "inspect", "--format", "{{.Mountpoint}}", &volume]);
    let host_dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    wait_for_socket(&p, &host_dir.join("agentd.sock"), &daemon);
    // `docker run --rm -v agentd-run:/run/agentd --user 10001 agentd send … hello`
    let mut client: Vec<String> = commands[3][1..].iter().map(|a| rename(a)).collect();
    *client.last_mut().unwrap() = "hello-scratch".into();
    let out = p.run(&client.iter().map(String::as_str).collect::<Vec<_>>());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("hello-scratch"), "the echo agent answered: {said}");

    // `docker stop` is SIGTERM: a clean stop, exit 0, the socket removed.
    p.run(&["stop", "-t", "10", &daemon]);
    let out = p.run(&["inspect", "--format", "{{.State.ExitCode}}", &daemon]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{}", p.logs(&daemon));
    assert!(
        !host_dir.join("agentd.sock").exists(),
        "the socket is removed on a clean stop"
    );

    // Docker's new volume, which podman would have chowned: a directory with
    // the image's /run/agentd's owner and mode, mounted in its place.
    let docker_like = p.work.0.join("docker-volume");
    std::fs::create_dir(&docker_like).unwrap();
    std::os::unix::fs::chown(&docker_like, Some(d_uid), Some(gid)).unwrap();
    std::fs::set_permissions(&docker_like, std::fs::Permissions::from_mode(d_mode)).unwrap();
    let mount = format!("{}:/run/agentd", docker_like.display());
    let daemon2 = p.name("daemon-docker");
    p.made("container", &daemon2);
    p.run(&["run", "-d", "--name", &daemon2, "-v", &mount, &image]);
    wait_for_socket(&p, &docker_like.join("agentd.sock"), &daemon2);
    let said = send_from_container(
        &p,
        &image,
        &mount,
        uid,
        "unix:///run/agentd/agentd.sock",
        "hello-docker",
    );
    assert!(said.contains("hello-docker"), "{said}");
}

/// One container of pod.yaml: its `args`, and the pod's user and mount.
struct PodContainer {
    name: String,
    args: Vec<String>,
}

/// What `pod.yaml` says, read from the file (its args are JSON arrays).
struct Pod {
    uid: u32,
    gid: u32,
    fs_group: u32,
    mount_path: String,
    containers: Vec<PodContainer>,
    read_only: bool,
    drop_all_caps: bool,
    no_new_privileges: bool,
}

fn read_pod() -> Pod {
    let text = std::fs::read_to_string(repo().join("examples/kubernetes/pod.yaml")).unwrap();
    let field = |key: &str| -> String {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("pod.yaml has no {key}"));
        line.trim_start()[key.len()..].trim().to_string()
    };
    let mount_path = {
        let at = text.find("mountPath:").expect("a volume mount");
        let rest = &text[at + "mountPath:".len()..];
        rest.split([' ', '}', '\n'])
            .find(|w| !w.is_empty())
            .unwrap()
            .to_string()
    };
    let mut containers = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("- name: ") {
        rest = &rest[at + "- name: ".len()..];
        let name = rest.lines().next().unwrap().trim().to_string();
        let Some(args_at) = rest.find("args: [") else { break };
        // Only a container's own args: before the next list item.
        if rest[..args_at].contains("- name: ") {
            continue;
        }
        let body = &rest[args_at + "args: ".len()..];
        let end = body.find(']').unwrap();
        let flat: String = body[..=end].lines().map(str::trim).collect::<Vec<_>>().join(" ");
        let args: Vec<String> = serde_json::from_str(&flat).unwrap_or_else(|e| panic!("args of {name}: {e}"));
        containers.push(PodContainer { name, args });
        rest = &body[end..];
    }
    Pod {
        uid: field("runAsUser:").parse().unwrap(),
        gid: field("runAsGroup:").parse().unwrap(),
        fs_group: field("fsGroup:").parse().unwrap(),
        mount_path,
        containers,
        read_only: text.contains("readOnlyRootFilesystem: true"),
        drop_all_caps: text.contains("drop: [\"ALL\"]"),
        no_new_privileges: text.contains("allowPrivilegeEscalation: false"),
    }
}

/// The worker's program is the operator's; the image has only agentd, so
/// the worker runs the built-in echo agent instead.
fn with_echo_agent(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--exec" || a == "--exec-protocol" {
            it.next();
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// The address a container's args listen on, as a path inside it.
fn listen_path(args: &[String]) -> String {
    let at = args.iter().position(|a| a == "--listen").expect("--listen") + 1;
    args[at].strip_prefix("unix://").expect("a unix listener").to_string()
}

fn run_pod(p: &Podman, image: &str, empty_dir: &Path, fs_group: Option<u32>, tag: &str) {
    let pod = read_pod();
    assert_eq!(
        pod.containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["worker", "front"]
    );
    let mount = format!("{}:{}", empty_dir.display(), pod.mount_path);
    let user = format!("{}:{}", pod.uid, pod.gid);
    let mut started = Vec::new();
    for c in &pod.containers {
        let name = p.name(&format!("{tag}-{}", c.name));
        let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--name".into(), name.clone()];
        args.extend(["--user".into(), user.clone(), "-v".into(), mount.clone()]);
        if let Some(g) = fs_group {
            args.extend(["--group-add".into(), g.to_string()]);
        }
        if pod.read_only {
            args.push("--read-only".into());
        }
        if pod.drop_all_caps {
            args.push("--cap-drop=ALL".into());
        }
        if pod.no_new_privileges {
            args.push("--security-opt=no-new-privileges".into());
        }
        args.push(image.into());
        args.extend(with_echo_agent(&c.args));
        p.made("container", &name);
        p.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        started.push((name, listen_path(&c.args)));
    }
    // Each listens in a directory of its own below the emptyDir.
    for (name, path) in &started {
        let inside = Path::new(path).strip_prefix(&pod.mount_path).unwrap();
        let host = empty_dir.join(inside);
        wait_for_socket(p, &host, name);
        let dir = std::fs::metadata(host.parent().unwrap()).unwrap();
        assert_eq!(dir.uid(), pod.uid, "{name}'s socket directory");
        assert_eq!(
            dir.mode() & 0o077,
            0,
            "{name}'s socket directory is 0700: {:o}",
            dir.mode()
        );
    }
    let (front, front_path) = &started[1];
    let said = send_from_container(p, image, &mount, pod.uid, &format!("unix://{front_path}"), "hello-pod");
    assert!(
        said.contains("hello-pod"),
        "the front answered: {said}\n{}",
        p.logs(front)
    );
    let worker_log = p.logs(&started[0].0);
    assert!(
        worker_log.contains("task.end") && worker_log.contains("state=completed"),
        "the worker ran the task:\n{worker_log}"
    );
}

#[test]
fn the_pod_serves_on_an_empty_dir_as_kubelet_makes_it() {
    if let Err(why) = podman_usable() {
        return skip_or_fail(&why);
    }
    let p = Podman::new("pod");
    let image = build_image(&p);
    let pod = read_pod();

    // kubelet: a root-owned directory, mode 0777.
    let plain = p.work.0.join("empty-dir");
    std::fs::create_dir(&plain).unwrap();
    std::os::unix::fs::chown(&plain, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o777)).unwrap();
    run_pod(&p, &image, &plain, None, "plain");

    // With an fsGroup: the group is fsGroup, with the setgid bit (2777), and
    // the containers get the group as a supplementary one.
    let grouped = p.work.0.join("empty-dir-fsgroup");
    std::fs::create_dir(&grouped).unwrap();
    std::os::unix::fs::chown(&grouped, Some(0), Some(pod.fs_group)).unwrap();
    std::fs::set_permissions(&grouped, std::fs::Permissions::from_mode(0o2777)).unwrap();
    run_pod(&p, &image, &grouped, Some(pod.fs_group), "fsgroup");
}
