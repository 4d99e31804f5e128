//! End to end inside a real VM guest: the static musl agentd is the
//! guest's `/init` and serves A2A on vsock; the host reaches it through
//! vhost-device-vsock's hybrid unix socket with agentd's own client
//! (`vsock+uds://`). The card, a completed task, and a cancelled task whose
//! process is gone, all over vsock. The host (CID 2) is not an operator:
//! a task the guest's own client (CID 1, over vsock loopback, an operator)
//! started is unknown to it, it lists only its own, and its command is
//! refused, while the guest's client sees and cancels every task; real vsock
//! peers, judged by the CID the kernel tells. The test waits for agentd's readiness
//! notification, sent to the host over vsock (`NOTIFY_SOCKET=vsock:2:PORT`
//! on the kernel command line, as systemd's VM interface does), not by
//! polling the card. Then the guest is stopped from inside (a task's
//! program sends SIGTERM to process 1): agentd drains, syncs and powers
//! the machine off, and qemu exits by itself. A second guest whose module
//! cannot be loaded powers off at once, without serving.
//!
//! Needs what `tests/vm/setup.sh` installs (qemu, a Debian cloud kernel,
//! vhost-device-vsock, busybox); `.ci/run` runs it first. Without them the
//! test skips loudly, except under CI, where it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const PORT: u32 = 5000;
/// The host port the guest's `READY=1` goes to (vhost-device-vsock hands a
/// guest's connection to host port P to the unix socket `<uds-path>_P`).
const NOTIFY_PORT: u32 = 5001;
const BOOT_DEADLINE: Duration = Duration::from_secs(180);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn skip_or_fail(test: &str, why: &str) {
    common::skip_or_fail(test, &format!("{why} (run tests/vm/setup.sh to install what it needs)"));
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Stops the guest (qemu and vhost-device-vsock) however the test ends.
struct Guest {
    work: PathBuf,
}

impl Drop for Guest {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let console = std::fs::read_to_string(self.work.join("console.log")).unwrap_or_default();
            eprintln!("--- guest console ---\n{console}");
        }
        let _ = Command::new(repo().join("tests/vm/stop-guest.sh"))
            .arg(&self.work)
            .status();
    }
}

fn client(endpoint: &str, args: &[&str]) -> Output {
    Command::new(common::BIN)
        .args([args[0], endpoint])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .expect("run the agentd client")
}

fn json_out(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "client failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

fn write(path: &Path, text: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The static agentd and busybox, or None (the test skipped) where the VM
/// tools are missing.
fn guest_tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    let vm = common::vm_dir();
    let busybox = vm.join("busybox/bin/busybox");
    let vhost = vm.join("tools/bin/vhost-device-vsock");
    let have_qemu = Command::new("qemu-system-x86_64").arg("--version").output().is_ok();
    if !have_qemu || !busybox.exists() || !vhost.exists() || !vm.join("kernel").exists() {
        skip_or_fail(test, "qemu, the guest kernel, vhost-device-vsock or busybox is missing");
        return None;
    }
    if !common::musl_target_installed() {
        skip_or_fail(test, "the x86_64-unknown-linux-musl target is not installed");
        return None;
    }
    Some((common::static_agentd(), busybox))
}

/// A client command the guest's agentd refuses: exit 1, and the JSON-RPC
/// error (`--json` prints it).
fn refused(o: &Output) -> Value {
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "expected a refusal: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    v["error"].clone()
}

/// Runs agentd's client inside the guest against the guest itself (vsock
/// loopback: CID 1), through a task the host sends; returns what it printed.
fn as_guest(endpoint: &str, command: &str) -> Value {
    let sent = json_out(&client(endpoint, &["send", "--json", &format!("as-guest {command}")]));
    let task = &sent["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_COMPLETED",
        "as-guest {command}: {sent}"
    );
    let text = task["artifacts"][0]["parts"][0]["text"].as_str().unwrap_or_default();
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("as-guest {command}: not JSON ({e}): {sent}"))
}

fn task_ids(list: &Value) -> Vec<String> {
    list["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("not a task list: {list}"))
        .iter()
        .map(|t| t["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The kernel's module `name` as shipped (compressed or not), for the
/// initramfs: agentd's init loads either.
fn kernel_module(vm: &Path, name: &str) -> PathBuf {
    let found = std::fs::read_dir(vm.join("kernel/lib/modules"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|release| {
            ["ko", "ko.xz", "ko.zst"].map(|ext| release.path().join(format!("kernel/net/vmw_vsock/{name}.{ext}")))
        })
        .find(|p| p.exists());
    found.unwrap_or_else(|| panic!("no {name} module under {}/kernel (run tests/vm/setup.sh)", vm.display()))
}

/// The initramfs of a guest whose /init is `agentd` with `conf` as
/// /etc/agentd.conf and `agent` as /etc/agent.sh, busybox as its shell,
/// and `extra` files (`HOST_PATH:GUEST_PATH`).
fn initramfs(work: &Path, agentd: &Path, busybox: &Path, conf: &str, agent: &str, extra: &[String]) -> PathBuf {
    let stage = work.join("files");
    std::fs::create_dir_all(&stage).unwrap();
    write(&stage.join("agent.sh"), agent, 0o755);
    write(&stage.join("agentd.conf"), conf, 0o644);
    let initramfs = work.join("initramfs.cpio");
    let bb = busybox.display().to_string();
    run(Command::new(repo().join("tests/vm/mkinitramfs.sh"))
        .args([
            agentd.to_str().unwrap(),
            initramfs.to_str().unwrap(),
            &format!("{bb}:/bin/busybox"),
            &format!("{bb}:/bin/sh"),
            &format!("{bb}:/bin/sleep"),
            &format!("{}:/etc/agent.sh", stage.join("agent.sh").display()),
            &format!("{}:/etc/agentd.conf", stage.join("agentd.conf").display()),
        ])
        .args(extra));
    initramfs
}

/// The pid of the guest's qemu (run-guest.sh wrote it).
fn qemu_pid(run_dir: &Path) -> i32 {
    std::fs::read_to_string(run_dir.join("qemu.pid"))
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .expect("run-guest.sh wrote qemu.pid")
}

/// Waits up to `within` for the guest's qemu to exit by itself (it runs
/// with -no-reboot: a guest that powers off, or panics, ends it); how long
/// that took, or None.
fn qemu_exits(qemu: i32, within: Duration) -> Option<Duration> {
    let t = Instant::now();
    common::wait_for(within, || !common::alive(qemu)).then(|| t.elapsed())
}

/// What the guest's console shows of a clean power-off by agentd (not a
/// kernel panic, which also ends qemu): agentd's line, then the kernel's.
fn assert_powered_off(console: &str, exit_code: i32) {
    let said = console
        .find(&format!("agentd.poweroff exit_code={exit_code}"))
        .unwrap_or_else(|| panic!("agentd did not say agentd.poweroff exit_code={exit_code}:\n{console}"));
    assert!(
        console[said..].contains("reboot: Power down"),
        "no power-off after agentd.poweroff:\n{console}"
    );
    assert!(!console.contains("Kernel panic"), "{console}");
}

#[test]
fn agentd_as_guest_init_serves_a2a_over_vsock() {
    let Some((agentd, busybox)) = guest_tools("agentd_as_guest_init_serves_a2a_over_vsock") else {
        return;
    };
    let work = common::TempDir::new("vm");
    // The guest's agent: echoes, unless asked to sleep (then it is
    // cancelled), to stop the machine (SIGTERM to process 1, agentd), or to
    // be the guest's own client (`as-guest COMMAND ARGS…`: agentd's client,
    // run against the guest itself over vsock loopback).
    let agent = format!(
        "#!/bin/sh\nread -r line\ncase \"$line\" in\nsleep*) exec sleep 600 ;;\n\
         poweroff*) kill -TERM 1; echo \"stopping\" ;;\n\
         as-guest\\ *) set -- ${{line#as-guest }}; cmd=$1; shift; exec /init \"$cmd\" vsock://1:{PORT} \"$@\" ;;\n\
         *) echo \"guest says: $line\" ;;\nesac\n"
    );
    let loopback = kernel_module(&common::vm_dir(), "vsock_loopback");
    let loopback_name = loopback.file_name().unwrap().to_string_lossy().into_owned();
    let modules = [
        "vsock",
        "vmw_vsock_virtio_transport_common",
        "vmw_vsock_virtio_transport",
    ];
    let mut conf = format!("a2a.listen: vsock://-1:{PORT}\nagent.exec: /bin/sh /etc/agent.sh\n");
    conf.push_str("tasks.cancel_grace_ms: 200\ntasks.term_grace_ms: 300\n");
    // The host is CID 2 and the guest's own client CID 1: the only peers
    // allowed in. Only CID 1 is an operator, so the host sees just its own.
    conf.push_str("a2a.vsock_allow_cids: 1,2\na2a.vsock_operator_cids: 1\n");
    for m in modules {
        conf.push_str(&format!("init.modules: /lib/modules/{m}.ko\n"));
    }
    conf.push_str(&format!("init.modules: /lib/modules/{loopback_name}\n"));
    let extra = [format!("{}:/lib/modules/{loopback_name}", loopback.display())];
    let initramfs = initramfs(&work.0, &agentd, &busybox, &conf, &agent, &extra);

    let run_dir = work.0.join("run");
    let started = Instant::now();
    let out = run(Command::new(repo().join("tests/vm/run-guest.sh"))
        .args([
            run_dir.to_str().unwrap(),
            initramfs.to_str().unwrap(),
            &PORT.to_string(),
        ])
        // `NAME=value` before `--` on the kernel command line is init's
        // environment; everything after `--` is its argv.
        .env(
            "VM_APPEND",
            format!("NOTIFY_SOCKET=vsock:2:{NOTIFY_PORT} -- serve --config /etc/agentd.conf"),
        ));
    let _guest = Guest { work: run_dir.clone() };
    let hybrid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let endpoint = format!("vsock+uds://{hybrid}:{PORT}");

    // The host's ear for the guest's notifications: one connection per
    // message (vsock has no datagrams). Bound while the guest still boots.
    let ear = std::os::unix::net::UnixListener::bind(format!("{hybrid}_{NOTIFY_PORT}")).unwrap();
    let (notes_tx, notes) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::Read;
        for conn in ear.incoming() {
            let mut text = String::new();
            if conn.and_then(|mut c| c.read_to_string(&mut text)).is_ok() && notes_tx.send(text).is_err() {
                return;
            }
        }
    });
    let ready = loop {
        let left = BOOT_DEADLINE.saturating_sub(started.elapsed());
        match notes.recv_timeout(left) {
            Ok(m) if m.lines().any(|l| l == "READY=1") => break m,
            Ok(_) => continue,
            Err(_) => panic!("the guest's agentd sent no READY=1 over vsock within {BOOT_DEADLINE:?}"),
        }
    };
    eprintln!(
        "guest notified READY=1 over vsock {:.1} s after qemu started",
        started.elapsed().as_secs_f64()
    );
    assert!(
        ready.contains(&format!("STATUS=listening on vsock://-1:{PORT}")),
        "{ready}"
    );

    // Ready means serving: the card answers at the first try.
    let card = json_out(&client(&endpoint, &["card", "--json"]));
    let iface = &card["supportedInterfaces"][0];
    assert_eq!(iface["protocolBinding"], "https://agentd.dev/a2a/binding/jsonrpc-vsock");
    assert_eq!(iface["url"], format!("vsock://3:{PORT}"), "the guest names its own CID");

    // A task that completes.
    let done = json_out(&client(&endpoint, &["send", "--json", "hello from the host"]));
    assert_eq!(done["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["task"]["artifacts"][0]["parts"][0]["text"],
        "guest says: hello from the host\n"
    );
    let ours = done["task"]["id"].as_str().unwrap().to_string();

    // A second vsock peer, the guest's own client (CID 1), starts a task:
    // to the host, not an operator, it is unknown; the host lists only its
    // own tasks, and its command is refused.
    let theirs = as_guest(&endpoint, "send --json --no-wait sleep please");
    let theirs = theirs["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{theirs}"))
        .to_string();
    for command in ["get", "cancel"] {
        let err = refused(&client(&endpoint, &[command, "--json", &theirs]));
        assert_eq!(err["code"], -32001, "the host's {command} of CID 1's task: {err}");
    }
    let listed = task_ids(&json_out(&client(&endpoint, &["list", "--json"])));
    assert!(listed.contains(&ours), "the host lists its own task: {listed:?}");
    assert!(!listed.contains(&theirs), "the host lists CID 1's task: {listed:?}");
    let err = refused(&client(&endpoint, &["command", "--json", "status"]));
    assert_eq!(err["code"], -31403, "the host's command: {err}");
    assert_eq!(err["data"][0]["metadata"]["principal"], "vsock:cid=2", "{err}");
    // The operator sees every task.
    let listed = task_ids(&as_guest(&endpoint, "list --json"));
    assert!(
        listed.contains(&ours) && listed.contains(&theirs),
        "CID 1, an operator, lists the host's task and its own: {listed:?}"
    );

    // A task that is cancelled: CANCELED, and its process gone.
    let sleeping = json_out(&client(&endpoint, &["send", "--json", "--no-wait", "sleep please"]));
    let id = sleeping["task"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = json_out(&client(&endpoint, &["get", "--json", &id]));
        if t["status"]["state"] == "TASK_STATE_WORKING" {
            break;
        }
        assert!(Instant::now() < deadline, "the sleeping task never started: {t}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let canceled = json_out(&client(&endpoint, &["cancel", "--json", &id]));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    // The operator cancels the host's peer's task too, and asks for status.
    let canceled = as_guest(&endpoint, &format!("cancel --json {theirs}"));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    let status = as_guest(&endpoint, "command --json status");
    assert_eq!(
        status["tasks"]["running"], 1,
        "nothing runs in the guest but the task asking: {status}"
    );
    assert!(status["isolation"].as_str().unwrap().starts_with("process-group"));
    // The events feed from the guest's boot on: the cancelled task's worker
    // exited, after the SIGKILL rung if it came to that; and nothing of CID
    // 1's task, created before it, reaches the host.
    // (`timeout`: should the record be missing, the feed would wait forever)
    let mut feed = Command::new("timeout")
        .args(["30", common::BIN, "events", &endpoint, "--json", "--from", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut exited = false;
    {
        use std::io::{BufRead, BufReader};
        for line in BufReader::new(feed.stdout.take().unwrap()).lines() {
            let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
            let e = &v["event"];
            assert_ne!(e["taskId"], theirs.as_str(), "the host's feed shows CID 1's task: {e}");
            if e["kind"] == "worker.exit" && e["taskId"] == id.as_str() {
                exited = true;
                break;
            }
        }
    }
    let _ = feed.kill();
    let _ = feed.wait();
    assert!(exited, "the events feed shows the cancelled task's worker exit");
    let console = std::fs::read_to_string(run_dir.join("console.log")).unwrap_or_default();
    assert!(
        console.contains("agentd.ready"),
        "agentd logged to the guest console:\n{console}"
    );

    // Stopped from inside: a task's program sends SIGTERM to process 1.
    // agentd drains (the ladder takes 0.5 s here, answers 2 s at most),
    // syncs and powers off; qemu, with -no-reboot, exits by itself.
    let qemu = qemu_pid(&run_dir);
    let stop = json_out(&client(&endpoint, &["send", "--json", "--no-wait", "poweroff please"]));
    assert!(stop["task"]["id"].is_string(), "{stop}");
    let took = qemu_exits(qemu, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the guest still runs 60 s after its agentd was sent SIGTERM"));
    let console = std::fs::read_to_string(run_dir.join("console.log")).unwrap_or_default();
    let stopping = console
        .find("agentd.stopping signal=SIGTERM")
        .unwrap_or_else(|| panic!("agentd did not drain on SIGTERM:\n{console}"));
    assert!(
        console[stopping..].contains("agentd.stopped"),
        "agentd did not finish its drain before powering off:\n{console}"
    );
    assert_powered_off(&console[stopping..], 0);
    eprintln!(
        "guest powered off {:.1} s after its agentd was asked to stop; VM test done in {:.1} s",
        took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// "a failed mount or module load logs the error and powers off at once":
/// a guest whose agentd is told to load a module that is not there says
/// why on the console and powers the machine off, before it serves.
#[test]
fn a_guest_whose_module_cannot_be_loaded_powers_off_at_once() {
    let Some((agentd, busybox)) = guest_tools("a_guest_whose_module_cannot_be_loaded_powers_off_at_once") else {
        return;
    };
    let work = common::TempDir::new("vm-fail");
    let conf = format!(
        "a2a.listen: vsock://-1:{PORT}\nagent.exec: /bin/sh /etc/agent.sh\ninit.modules: /lib/modules/missing.ko\n"
    );
    let initramfs = initramfs(&work.0, &agentd, &busybox, &conf, "#!/bin/sh\ncat\n", &[]);
    let run_dir = work.0.join("run");
    run(Command::new(repo().join("tests/vm/run-guest.sh"))
        .args([
            run_dir.to_str().unwrap(),
            initramfs.to_str().unwrap(),
            &PORT.to_string(),
        ])
        .env("VM_APPEND", "-- serve --config /etc/agentd.conf"));
    let _guest = Guest { work: run_dir.clone() };
    let qemu = qemu_pid(&run_dir);
    // Its boot takes 3-15 s here (see tests/vm/README.md).
    let within = Duration::from_secs(60);
    let took = qemu_exits(qemu, within).unwrap_or_else(|| panic!("the guest still runs {within:?} after it started"));
    let console = std::fs::read_to_string(run_dir.join("console.log")).unwrap_or_default();
    let error = console
        .find("agentd: init: cannot open module /lib/modules/missing.ko")
        .unwrap_or_else(|| panic!("agentd did not say why on the console:\n{console}"));
    // At once: nothing is served, no drain, straight to the power-off.
    for never in ["agentd.ready", "a2a.listen", "agentd.stopping"] {
        assert!(!console.contains(never), "{never} before the power-off:\n{console}");
    }
    assert!(
        console[error..].contains("reboot: Power down"),
        "no power-off after the error:\n{console}"
    );
    assert!(!console.contains("Kernel panic"), "{console}");
    eprintln!(
        "a guest whose module is missing powered off {:.1} s after qemu started",
        took.as_secs_f64()
    );
}
