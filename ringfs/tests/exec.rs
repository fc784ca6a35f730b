//! `ringfs exec` through real mounts (issue 15): receipts checked against
//! what the command really did (created, modified, removed, hard links,
//! renames, local-only paths apart), exit codes and signals passed
//! through, a child that outlives the command, `--timeout`, bounded
//! output capture, `--checkpoint` + restore undoing the call, `--commit`,
//! the library form, and the sandbox's escapes refused (write outside,
//! open the store, signal the daemon, mount, network, the control socket).
//! Mount arguments come from RINGFS_TEST_MOUNT_ARGS (both transports).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// `ringfs exec MP ARGS… --json -- CMD…`: (exit code, receipt).
fn exec_json(m: &TestMount, flags: &[&str], cmd: &[&str]) -> (i32, Value) {
    let mut c = Command::new(RINGFS);
    c.arg("exec")
        .arg(mp(m))
        .args(flags)
        .arg("--json")
        .arg("--")
        .args(cmd);
    let o = run_timeout(&mut c, Duration::from_secs(50));
    let (out, err) = out_str(&o);
    let v: Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("exec {flags:?} {cmd:?}: no JSON ({e}): {out} / {err}"));
    (o.status.code().unwrap_or(-1), v)
}

fn sh(m: &TestMount, flags: &[&str], script: &str) -> (i32, Value) {
    exec_json(m, flags, &["sh", "-c", script])
}

/// The receipt's changes as sorted "A path" / "M path" / "D path" lines.
fn changes(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v["changes"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let k = match c["change"].as_str().unwrap() {
                "added" => "A",
                "removed" => "D",
                _ => "M",
            };
            format!("{k} {}", c["path"].as_str().unwrap())
        })
        .collect();
    out.sort();
    out
}

fn path_of<'a>(v: &'a Value, p: &str) -> &'a Value {
    v["changes"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == p)
        .unwrap_or_else(|| panic!("{p} not in {v}"))
}

#[test]
fn receipt_matches_what_the_command_did() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("echo aaaa > a.txt && echo bbbb > b.txt && mkdir dir && echo cccc > dir/c && echo keep > same.txt");
    // A first call settles the tree the second starts from.
    let (code, _) = sh(&m, &[], "true");
    assert_eq!(code, 0);
    let (code, v) = sh(&m, &[], "echo new > n.txt; echo more >> a.txt; rm b.txt; ln same.txt hl; mv dir/c dir/d; mkdir e; head -c 300000 /dev/urandom > big");
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        changes(&v),
        vec!["A big", "A dir/d", "A e", "A hl", "A n.txt", "D b.txt", "D dir/c", "M a.txt"],
        "{v:#}"
    );
    let c = &v["changes"];
    assert_eq!(
        (
            c["added"].as_u64(),
            c["modified"].as_u64(),
            c["removed"].as_u64()
        ),
        (Some(5), Some(1), Some(2))
    );
    let a = path_of(&v, "a.txt");
    assert_eq!(
        (a["old"]["size"].as_u64(), a["new"]["size"].as_u64()),
        (Some(5), Some(10))
    );
    assert_eq!(path_of(&v, "big")["new"]["size"].as_u64(), Some(300_000));
    assert_eq!(path_of(&v, "b.txt")["new"], Value::Null);
    // The big file's content was new to the store; the hard link's was not.
    assert!(c["bytes_new"].as_u64().unwrap() >= 300_000, "{c}");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["durability"]["local"], true);
    assert_eq!(v["durability"]["remote"], "no remote");
    let req = &v["requests"];
    assert!(
        req["total"].as_u64().unwrap() > 0 && req["bytes_to_daemon"].as_u64().unwrap() > 0, // writes may bypass the daemon (passthrough)
        "{req}"
    );
    assert!(
        req["by_opcode"]
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.contains("CREATE") || k.contains("MKNOD")),
        "{req}"
    );
    let t = &v["time"];
    let (wall, cmd, over) = (
        t["wall_ms"].as_f64().unwrap(),
        t["command_ms"].as_f64().unwrap(),
        t["overhead_ms"].as_f64().unwrap(),
    );
    assert!(wall >= cmd && (wall - cmd - over).abs() < 0.01, "{t}");
    assert!(v["peak_rss_kib"].as_u64().unwrap() > 0);
    // Nothing changed: an empty receipt.
    let (_, v) = sh(&m, &[], "cat a.txt > /dev/null");
    assert_eq!(changes(&v), Vec::<String>::new(), "{v:#}");
}

#[test]
fn exit_codes_and_signals_pass_through() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let (code, v) = sh(&m, &[], "exit 3");
    assert_eq!((code, v["exit_code"].as_i64()), (3, Some(3)));
    let (code, v) = sh(&m, &[], "kill -TERM $$");
    assert_eq!(
        (code, v["exit_code"].as_i64(), v["signal"].as_i64()),
        (143, Some(143), Some(15))
    );
    let o = ringfs(&["exec", mp(&m), "--", "no-such-program-ringfs"]);
    assert_eq!(o.status.code(), Some(127), "{:?}", out_str(&o));
    let o = ringfs(&["exec", mp(&m), "--cwd", "/etc", "--", "true"]);
    let (_, err) = out_str(&o);
    assert_eq!(o.status.code(), Some(125));
    assert!(err.contains("outside the workspace"), "{err}");
    m.sh_ok("mkdir -p sub/deeper");
    let (code, v) = exec_json(&m, &["--cwd", "sub"], &["sh", "-c", "pwd > here; exit 0"]);
    assert_eq!(code, 0);
    assert_eq!(changes(&v), vec!["A sub/here"]);
    assert_eq!(m.sh_ok("cat sub/here").trim(), m.p("sub").to_str().unwrap());
    // Human receipt on stderr, the command's stdout untouched on stdout.
    let o = ringfs(&[
        "exec",
        mp(&m),
        "--",
        "sh",
        "-c",
        "echo out; echo new > h.txt",
    ]);
    let (out, err) = out_str(&o);
    assert_eq!(out, "out\n");
    assert!(
        err.contains("1 added, 0 modified, 0 removed") && err.contains("durable: yes"),
        "{err}"
    );
}

#[test]
fn children_that_outlive_the_command_and_timeouts() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let (code, v) = sh(
        &m,
        &[],
        "(sleep 1; echo late > late.txt) & echo now > now.txt",
    );
    assert_eq!(code, 0);
    assert_eq!(changes(&v), vec!["A now.txt"]);
    assert!(v["orphans"].as_u64().unwrap() >= 1, "{v}");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !m.p("late.txt").exists(),
        "a child the command left ran on after the receipt"
    );
    let (code, v) = sh(
        &m,
        &["--timeout", "0.5"],
        "echo a > t1; sleep 30; echo b > t2",
    );
    assert_eq!(code, 137, "{v}");
    assert_eq!(v["timed_out"], true);
    assert_eq!(changes(&v), vec!["A t1"]);
    assert!(v["time"]["command_ms"].as_f64().unwrap() < 20_000.0);
    // What the timeout killed besides the command is counted (issue 41:
    // a fork bomb under --timeout said `orphans: 0`).
    let (code, v) = sh(&m, &["--timeout", "0.5"], "for i in 1 2 3 4 5 6; do sleep 30 & done; wait");
    assert_eq!(code, 137, "{v}");
    assert!(v["orphans"].as_u64().unwrap() >= 6, "{v}");
}

#[test]
fn output_capture_is_bounded() {
    let m = TestMount::new(Backend::Memory);
    let (code, v) = sh(
        &m,
        &["--output-limit", "10"],
        "head -c 1000 /dev/zero | tr '\\0' a; echo err >&2",
    );
    assert_eq!(code, 0);
    assert_eq!(v["stdout"]["text"], "aaaaaaaaaa");
    assert_eq!(
        (v["stdout"]["bytes"].as_u64(), v["stdout"]["cut"].as_u64()),
        (Some(1000), Some(990))
    );
    assert_eq!(v["stderr"]["text"], "err\n");
    // Without --output-limit, --json still captures stdout (1 MiB).
    let (_, v) = sh(&m, &[], "echo hello");
    assert_eq!(v["stdout"]["text"], "hello\n");
    assert!(v["stdout"].get("text_b64").is_none(), "{v}");
    // Binary output: text is lossy, text_b64 exact (docs/FORMATS.md).
    let (_, v) = sh(&m, &[], "printf 'ab\\377cd'");
    assert_eq!(v["stdout"]["text"], "ab\u{fffd}cd", "{v}");
    assert_eq!(v["stdout"]["text_b64"], "YWL/Y2Q=", "{v}");
}

#[test]
fn local_only_paths_are_listed_apart() {
    if all_local() {
        return;
    }
    let m = TestMount::builder(Backend::Store)
        .args(["--ignore", "target", "--native-roots", "off"])
        .name("exec-local")
        .mount();
    m.sh_ok("mkdir target && echo old > target/stale");
    let (code, v) = sh(
        &m,
        &[],
        "echo o > target/out; rm target/stale; echo s > src.txt",
    );
    assert_eq!(code, 0);
    assert_eq!(changes(&v), vec!["A src.txt"], "{v:#}");
    let local: Vec<(String, String)> = v["local_only"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["path"].as_str().unwrap().to_string(),
                l["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(
        local.contains(&("target/out".into(), "changed".into())),
        "{local:?}"
    );
    assert!(
        local.contains(&("target/stale".into(), "removed".into())),
        "{local:?}"
    );
}

#[test]
fn checkpoint_and_restore_undo_the_call_and_commit_records_it() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("echo before > f && mkdir d && echo x > d/x");
    let (code, v) = sh(
        &m,
        &["--checkpoint"],
        "echo created > created; echo after > f; rm -r d; mkdir -p n/m && echo y > n/m/y",
    );
    assert_eq!(code, 0);
    let id = v["checkpoint"].as_str().unwrap().to_string();
    assert_eq!(
        changes(&v),
        vec![
            "A created",
            "A n",
            "A n/m",
            "A n/m/y",
            "D d",
            "D d/x",
            "M f"
        ]
    );
    let o = ringfs(&["restore", mp(&m), &id]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    assert!(!m.p("created").exists() && !m.p("n").exists());
    assert_eq!(m.sh_ok("cat f; cat d/x"), "before\nx\n");
    let (_, v) = sh(&m, &["--commit", "-m", "made g"], "echo g > g");
    let cid = v["commit"].as_str().unwrap();
    let log = json(&["log", mp(&m)]);
    assert_eq!(log["commits"][0]["id"], cid);
    assert_eq!(log["commits"][0]["message"], "made g");
    // gc during nothing pinned keeps the tree whole; a later call still diffs.
    assert!(ringfs(&["gc", mp(&m)]).status.success());
    let (_, v) = sh(&m, &[], "rm g");
    assert_eq!(changes(&v), vec!["D g"]);
}

#[test]
fn library_form_returns_the_receipt() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let opts = ringfs::ExecOptions {
        mountpoint: m.path().to_path_buf(),
        cwd: None,
        argv: vec![
            "sh".into(),
            "-c".into(),
            "echo lib > lib.txt; echo printed".into(),
        ],
        capture: Some(1024),
        commit: None,
        checkpoint: false,
        timeout: Some(Duration::from_secs(30)),
        sandbox: None,
    };
    let r = ringfs::exec(&opts).expect("exec");
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.changes.added, 1);
    assert_eq!(r.changes.paths[0].path, "lib.txt");
    assert_eq!(r.changes.paths[0].new.as_ref().unwrap().size, 4);
    assert_eq!(r.stdout.as_ref().unwrap().text, "printed\n");
    assert!(r.durability.local);
    let doc = serde_json::to_value(&r).unwrap();
    assert_eq!(doc["changes"]["added"], 1);
}

/// Every path local-only (`--ignore /*` in RINGFS_TEST_MOUNT_ARGS): no
/// synced change to report, so the receipt tests have nothing to check.
fn all_local() -> bool {
    let a = env_mount_args();
    a.iter().any(|x| x == "/*" || x == "*") && a.iter().any(|x| x == "--ignore")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn sandbox_escapes_are_refused() {
    if all_local() {
        return;
    }
    if !is_root() {
        eprintln!("skipped: --sandbox needs root");
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("mkdir -m 777 w && mkdir -m 777 w/mnt");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = format!("/var/tmp/ringfs-escape-{}", std::process::id());
    let store = m.store_dir().canonicalize().unwrap().display().to_string();
    let pid = m.daemon_pid().unwrap();
    let script = format!(
        "echo ok > inside.txt; \
         if echo x > {outside} 2>/dev/null; then echo WRITE_OUTSIDE; else echo write_refused; fi; \
         if ls -A {store} 2>/dev/null | grep -q .; then echo STORE_VISIBLE; else echo store_hidden; fi; \
         if kill -0 {pid} 2>/dev/null; then echo SIGNAL_DAEMON; else echo signal_refused; fi; \
         if mount -t tmpfs none mnt 2>/dev/null; then echo MOUNTED; else echo mount_refused; fi; \
         if ls -A /run/ringfs 2>/dev/null | grep -q sock; then echo SOCKET_VISIBLE; else echo socket_hidden; fi; \
         if timeout 3 bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo NETWORK; else echo network_refused; fi; \
         echo ifaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '); \
         echo uid $(id -u); grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status | tr -s '\\t' ' '; \
         echo pid $$; hostname"
    );
    let (code, v) = exec_json(&m, &["--sandbox", "--cwd", "w"], &["sh", "-c", &script]);
    let out = v["stdout"]["text"].as_str().unwrap_or_default().to_string();
    assert_eq!(code, 0, "{v:#}");
    for want in [
        "write_refused",
        "store_hidden",
        "signal_refused",
        "mount_refused",
        "socket_hidden",
        "network_refused",
        "ifaces lo",
        "uid 65534",
        "CapEff: 0000000000000000",
        "CapBnd: 0000000000000000",
        "NoNewPrivs: 1",
        "ringfs-sandbox",
    ] {
        assert!(
            out.contains(want),
            "sandbox escape: missing {want:?} in\n{out}"
        );
    }
    let escaped = std::path::Path::new(&outside).exists();
    let _ = std::fs::remove_file(&outside);
    assert!(!escaped, "the sandbox wrote {outside}");
    assert!(
        listener.accept().is_err(),
        "the sandbox reached a host port"
    );
    assert_eq!(changes(&v), vec!["A w/inside.txt"], "{v:#}");
    assert_eq!(v["sandbox"], true);
    // PID 1 is the sandbox's init: the command is a low pid in its own namespace.
    let pid_line = out.lines().find(|l| l.starts_with("pid ")).unwrap();
    assert!(
        pid_line["pid ".len()..].trim().parse::<u32>().unwrap() < 10,
        "{pid_line}"
    );
    // A timeout kills the whole sandbox, children included.
    let (code, v) = exec_json(
        &m,
        &["--sandbox", "--cwd", "w", "--timeout", "0.5"],
        &[
            "sh",
            "-c",
            "echo a > t1; (sleep 2; echo late > late) & sleep 30",
        ],
    );
    assert_eq!(code, 137, "{v:#}");
    assert_eq!(v["timed_out"], true);
    std::thread::sleep(Duration::from_millis(2500));
    assert!(!m.p("w/late").exists());
    assert_eq!(changes(&v), vec!["A w/t1"]);
    // The exit code passes through the sandbox too.
    let (code, _) = exec_json(&m, &["--sandbox", "--cwd", "w"], &["sh", "-c", "exit 7"]);
    assert_eq!(code, 7);
}

#[test]
fn gc_keeps_points_in_use_and_frees_them_after() {
    if all_local() {
        return;
    }
    let mut m = TestMount::new(Backend::Store);
    m.sh_ok("echo base > base.txt");
    sh(&m, &[], "true");
    // A call in progress whose before-point is no longer the store's
    // last point (another call moved it): gc must keep it (pinned).
    let mpath = mp(&m).to_string();
    let long = std::thread::spawn(move || {
        let o = run_timeout(
            Command::new(RINGFS).args(["exec", &mpath, "--json", "--", "sh", "-c", "echo x > during; rm base.txt; sleep 2"]),
            Duration::from_secs(50),
        );
        serde_json::from_slice::<Value>(&o.stdout).unwrap()
    });
    std::thread::sleep(Duration::from_millis(700));
    let (_, other) = sh(&m, &[], "echo y > other; echo more >> other");
    assert_eq!(changes(&other).iter().filter(|c| c.ends_with(" other")).count(), 1, "{other:#}");
    let g = json(&["gc", mp(&m)]);
    let v = long.join().unwrap();
    assert_eq!(v["exit_code"], 0, "{v:#}");
    let c = changes(&v);
    assert!(c.contains(&"A during".to_string()) && c.contains(&"D base.txt".to_string()), "{c:?} (gc: {g})");
    // Now nothing is pinned: gc frees the earlier points' objects.
    let g = json(&["gc", mp(&m)]);
    assert!(g["snapshots"]["objects_deleted"].as_u64().unwrap() > 0, "{g}");
    let (_, v) = sh(&m, &[], "rm during");
    assert_eq!(changes(&v), vec!["D during"]);
    m.unmount_checked();
    let o = ringfs(&["fsck", "--store", m.store_dir().to_str().unwrap()]);
    assert!(o.status.success(), "fsck after exec points and gc: {:?}", out_str(&o));
}

#[test]
fn sandbox_limits_are_applied_or_refused_clearly() {
    if !is_root() {
        return;
    }
    let m = TestMount::new(Backend::Memory);
    let o = ringfs(&["exec", mp(&m), "--sandbox", "--memory", "64M", "--pids", "32", "--", "true"]);
    let (_, err) = out_str(&o);
    // Applied where cgroup v2 has the controllers, else refused with why.
    assert!(o.status.success() || (o.status.code() == Some(125) && err.contains("cgroup v2")), "{:?} {err}", o.status);
    // Only PATH, TERM, TZ, LANG*, LC_* and HOME=/tmp reach a sandboxed
    // command: a credential in the caller's environment does not.
    let mut c = Command::new(RINGFS);
    c.args(["exec", mp(&m), "--sandbox", "--", "env"]).env("AWS_SECRET_ACCESS_KEY", "sandbox-must-not-see").env("LC_ALL", "C");
    let o = run_timeout(&mut c, Duration::from_secs(50));
    let (out, err) = out_str(&o);
    assert!(o.status.success(), "{out} {err}");
    assert!(!out.contains("sandbox-must-not-see") && out.contains("PATH=") && out.contains("LC_ALL=C") && out.contains("HOME=/tmp"), "{out}");
    let o = ringfs(&["exec", mp(&m), "--sandbox", "--user", "no-such-user-ringfs", "--", "true"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(out_str(&o).1.contains("no such user"));
    // (uid_t)-1 would leave the ids unchanged (root's), and root is no
    // unprivileged user: both refused before anything runs.
    for (u, want) in [("4294967295", "not a user id"), ("0", "unprivileged"), ("root", "unprivileged")] {
        let o = ringfs(&["exec", mp(&m), "--sandbox", "--user", u, "--", "touch", "made-by-sandbox"]);
        assert_eq!(o.status.code(), Some(125), "--user {u}");
        assert!(out_str(&o).1.contains(want), "--user {u}: {:?}", out_str(&o));
        assert!(!m.p("made-by-sandbox").exists(), "--user {u} ran the command");
    }
}

/// `--commit` refused after the command ran ("head moved"): the receipt
/// still carries the exit code, the output and the changes, with
/// `commit_error`; a command that exited 0 then gives 125.
#[test]
fn a_failed_commit_after_the_command_keeps_the_receipt() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("echo a > a");
    let c1 = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    m.sh_ok("echo b > b");
    json(&["commit", mp(&m)]);
    let o = ringfs(&["branch", mp(&m), "main", &c1, "--force"]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    let (code, r) = exec_json(&m, &["--commit"], &["sh", "-c", "echo x > f; echo out; exit 4"]);
    assert_eq!(code, 4, "{r}");
    assert!(r["commit"].is_null() && r["commit_error"].as_str().unwrap().contains("head moved"), "{r}");
    assert_eq!(r["stdout"]["text"], "out\n", "{r}");
    assert_eq!(r["changes"]["added"].as_u64(), Some(1), "{r}");
    let (code, r) = exec_json(&m, &["--commit"], &["true"]);
    assert_eq!(code, 125, "{r}");
}

/// The receipt's local-only paths as sorted (path, change) pairs.
fn local_of(v: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v["local_only"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["path"].as_str().unwrap().to_string(), l["change"].as_str().unwrap().to_string()))
        .collect();
    out.sort();
    out
}

/// Local-only paths against ground truth: appends, overwrites, chmods and
/// xattrs of files that existed before the call are `changed`, a file
/// removed is `removed`, a file only read is not listed, and temporary
/// files created and removed within the call are not listed at all
/// (within one group commit or across one), as for synced paths. Then
/// again after a remount (names come from lookups, not creation).
#[test]
fn local_only_changes_to_existing_files_and_temporaries() {
    if all_local() {
        return;
    }
    let mut m = TestMount::builder(Backend::Store)
        .args(["--ignore", "target", "--ignore", "*.o", "--native-roots", "off"])
        .name("exec-local-existing")
        .mount();
    m.sh_ok("mkdir target target/sub && echo old > target/app && echo keep > target/mode && echo x > target/over && echo r > target/read && echo o > a.o && echo gone > target/gone && echo x > target/attr");
    let (code, _) = sh(&m, &[], "true");
    assert_eq!(code, 0);
    let script = "echo more >> target/app; echo new > target/over; chmod 600 target/mode; cat target/read > /dev/null; echo more >> a.o; \
         setfattr -n user.k -v 1 target/attr; chmod 700 target/sub; \
         echo t > target/tmp; rm target/tmp; echo t > tmp.o; rm tmp.o; echo t > target/slow; sleep 1.5; rm target/slow; \
         rm target/gone; echo s > src.txt";
    let (code, v) = sh(&m, &[], script);
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(changes(&v), vec!["A src.txt"], "{v:#}");
    let want: Vec<(String, String)> = [
        ("a.o", "changed"),
        ("target/app", "changed"),
        ("target/attr", "changed"),
        ("target/gone", "removed"),
        ("target/mode", "changed"),
        ("target/over", "changed"),
        ("target/sub", "changed"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(local_of(&v), want, "{v:#}");
    // Ground truth: what the receipt says happened did.
    assert_eq!(m.sh_ok("cat target/app target/over; stat -c %a target/mode target/sub; getfattr --only-values -n user.k target/attr; echo"), "old\nmore\nnew\n600\n700\n1\n");
    for gone in ["target/tmp", "target/slow", "target/gone", "tmp.o"] {
        assert!(!m.p(gone).exists(), "{gone}");
    }
    // After a remount the kernel looks the names up again.
    m.remount();
    let (code, _) = sh(&m, &[], "true");
    assert_eq!(code, 0);
    let (code, v) = sh(&m, &[], "echo again >> target/app; chmod 640 a.o; cat target/read >/dev/null");
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(
        local_of(&v),
        vec![("a.o".to_string(), "changed".to_string()), ("target/app".to_string(), "changed".to_string())],
        "{v:#}"
    );
    assert_eq!(changes(&v), Vec::<String>::new(), "{v:#}");
}

/// The workspace root's own mode and xattrs (chmod / setfattr on the
/// mountpoint) are a `modified` change of path "" in the receipt and in
/// `ringfs diff` (shown as `.` in text); its mtime alone is not.
#[test]
fn the_workspace_root_own_changes_are_listed() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("echo a > a");
    let id = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    let before = m.sh_ok("stat -c %a .").trim().to_string();
    let (code, v) = sh(&m, &[], "chmod 700 .");
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(changes(&v), vec!["M "], "{v:#}");
    let r = path_of(&v, "");
    assert_eq!(r["new"]["mode"], "0700", "{v:#}");
    assert_eq!(r["old"]["mode"].as_str().unwrap().trim_start_matches('0'), before, "{v:#}");
    assert_eq!(r["new"]["kind"], "dir");
    let (code, v) = sh(&m, &[], "setfattr -n user.rootattr -v 1 .");
    assert_eq!(code, 0, "{v:#}");
    assert_eq!(changes(&v), vec!["M "], "{v:#}");
    // An entry added moves the root's mtime only: not the root's change.
    let (_, v) = sh(&m, &[], "echo b > b");
    assert_eq!(changes(&v), vec!["A b"], "{v:#}");
    // Human receipt: the root as ".", with its modes.
    let o = ringfs(&["exec", mp(&m), "--", "chmod", "750", "."]);
    let (_, err) = out_str(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("M  .  (dir 0 mode 0700 -> dir 0 mode 0750)"), "{err}");
    // ringfs diff from the commit: the root first, then the file.
    let d = json(&["diff", mp(&m), &id]);
    assert_eq!(d["changes"][0]["path"], "", "{d:#}");
    assert_eq!(d["changes"][0]["new"]["mode"], "0750", "{d:#}");
    assert_eq!(d["changes"][1]["path"], "b", "{d:#}");
    let o = ringfs(&["diff", mp(&m), &id]);
    let (out, err) = out_str(&o);
    assert!(out.starts_with("M  .  ("), "{out} {err}");
    // Committed, then restored: the root's mode comes back too.
    let o = ringfs(&["restore", mp(&m), &id]);
    assert!(o.status.success(), "{:?}", out_str(&o));
    assert_eq!(m.sh_ok("stat -c %a ."), format!("{before}\n"));
}

/// A name that is not UTF-8: the receipt's JSON keeps `path` as text
/// (U+FFFD for the bad bytes) and adds `path_b64` with the exact bytes,
/// for synced and local-only paths, in `ringfs diff --json` too; UTF-8
/// names have no `path_b64`; text output writes the raw bytes.
#[test]
fn non_utf8_names_are_exact_in_json() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    if all_local() {
        return;
    }
    let m = TestMount::builder(Backend::Store)
        .args(["--ignore", "target", "--native-roots", "off"])
        .name("exec-nonutf8")
        .mount();
    m.sh_ok("mkdir target");
    let id = json(&["commit", mp(&m)])["id"].as_str().unwrap().to_string();
    let bad = OsStr::from_bytes(b"bad\xffname");
    let bad_local = OsStr::from_bytes(b"target/\xfe\xff");
    let mut c = Command::new(RINGFS);
    c.arg("exec").arg(mp(&m)).arg("--json").arg("--").arg("touch").arg(bad).arg(bad_local).arg("good");
    let o = run_timeout(&mut c, Duration::from_secs(50));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", out_str(&o)));
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    let b = path_of(&v, "bad\u{fffd}name");
    assert_eq!(b["path_b64"], "YmFk/25hbWU=", "{v:#}");
    assert!(path_of(&v, "good").get("path_b64").is_none(), "{v:#}");
    let l = &v["local_only"][0];
    assert_eq!((l["path"].as_str(), l["path_b64"].as_str()), (Some("target/\u{fffd}\u{fffd}"), Some("dGFyZ2V0L/7/")), "{v:#}");
    let d = json(&["diff", mp(&m), &id]);
    let dc = d["changes"].as_array().unwrap().iter().find(|c| c["path_b64"] == "YmFk/25hbWU=");
    assert!(dc.is_some_and(|c| c["change"] == "added"), "{d:#}");
    let o = ringfs(&["diff", mp(&m), &id]);
    assert!(o.stdout.windows(8).any(|w| w == b"bad\xffname"), "{:?}", out_str(&o));
    // The library form gives the exact bytes back.
    let opts = ringfs::ExecOptions {
        mountpoint: m.path().to_path_buf(),
        cwd: None,
        argv: vec!["rm".into(), bad.into()],
        capture: Some(1024),
        commit: None,
        checkpoint: false,
        timeout: Some(Duration::from_secs(30)),
        sandbox: None,
    };
    let r = ringfs::exec(&opts).expect("exec");
    assert_eq!(r.changes.paths.len(), 1);
    assert_eq!(r.changes.paths[0].bytes(), b"bad\xffname");
}

/// The human receipt shows mode changes and the processes the command
/// left running; a process that left the command's group (setsid) is
/// killed too, and the receipt does not wait for it (it holds the
/// captured stdout open).
#[test]
fn human_receipt_shows_modes_and_orphans_and_setsid_children_are_killed() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    m.sh_ok("echo x > f && chmod 644 f");
    sh(&m, &[], "true");
    let o = ringfs(&["exec", mp(&m), "--", "sh", "-c", "chmod 600 f; (sleep 20 &); sleep 0.2"]);
    let (_, err) = out_str(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("M  f  (file 2 mode 0644 -> file 2 mode 0600)"), "{err}");
    assert!(err.contains("orphans: 1 process left running, killed when the command exited"), "{err}");
    // setsid: its own session and group; stdout (captured) still open.
    let (code, v) = sh(&m, &[], "setsid sh -c 'sleep 3; echo late > late.txt' & sleep 0.3; echo now > now.txt");
    assert_eq!(code, 0, "{v:#}");
    assert!(v["orphans"].as_u64().unwrap() >= 1, "{v:#}");
    assert!(v["time"]["wall_ms"].as_f64().unwrap() < 60_000.0);
    assert_eq!(changes(&v), vec!["A now.txt"], "{v:#}");
    std::thread::sleep(Duration::from_millis(3500));
    assert!(!m.p("late.txt").exists(), "a setsid child ran on after the receipt");
}

/// A timeout too large for the clock is refused by the CLI (it used to
/// panic in `Duration::from_secs_f64`), and is no deadline in the library
/// form (`Duration::MAX` used to panic adding it to `Instant::now()`).
#[test]
fn huge_timeouts_are_refused_or_mean_no_deadline() {
    let m = TestMount::new(Backend::Store);
    let o = run_timeout(
        Command::new(RINGFS)
            .arg("exec")
            .arg(mp(&m))
            .args(["--timeout", "1e20", "--", "true"]),
        Duration::from_secs(50),
    );
    let (_, err) = out_str(&o);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains("--timeout") && !err.contains("panicked"),
        "{err}"
    );
    let opts = ringfs::ExecOptions {
        mountpoint: m.path().to_path_buf(),
        cwd: None,
        argv: vec!["sh".into(), "-c".into(), "exit 3".into()],
        capture: Some(1024),
        commit: None,
        checkpoint: false,
        timeout: Some(Duration::MAX),
        sandbox: None,
    };
    let r = ringfs::exec(&opts).expect("exec");
    assert_eq!(r.exit_code, 3);
    assert!(!r.timed_out);
}

/// A usage error of `ringfs exec` (an unknown flag, a missing `--sandbox`
/// for `--user`) exits 125 like its other failures, never 2, which the
/// command itself may return; `--help` still exits 0.
#[test]
fn usage_errors_exit_125() {
    for args in [
        &["exec", "--bogus", "/nonexistent", "--", "true"][..],
        &["exec", "--user", "nobody", "/nonexistent", "--", "true"][..],
        &["exec", "/nonexistent"][..],
    ] {
        let o = run_timeout(Command::new(RINGFS).args(args), Duration::from_secs(20));
        let (_, err) = out_str(&o);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
        assert!(err.contains("error"), "{args:?}: {err}");
    }
    let o = run_timeout(Command::new(RINGFS).args(["exec", "--help"]), Duration::from_secs(20));
    assert_eq!(o.status.code(), Some(0));
}

/// A caller that SIGKILLs `ringfs exec` (a harness's timeout) takes the
/// command with it: it must not go on changing the workspace with no
/// receipt (it used to; --sandbox already died with its caller).
#[test]
fn the_command_dies_with_a_killed_ringfs_exec() {
    if all_local() {
        return;
    }
    let m = TestMount::new(Backend::Store);
    let mut child = Command::new(RINGFS)
        .arg("exec")
        .arg(mp(&m))
        .args(["--", "sh", "-c", "echo > started; sleep 2; echo x > late"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn ringfs exec");
    let t0 = std::time::Instant::now();
    while !m.p("started").exists() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(m.p("started").exists(), "the command never started");
    std::thread::sleep(Duration::from_millis(3000));
    assert!(
        !m.p("late").exists(),
        "the command ran on after ringfs exec was killed"
    );
}
