//! Helpers shared by the end-to-end tests (each test file uses some of them).
#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `imago` binary with a quiet Vulkan loader.
pub fn imago(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_imago"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("imago runs")
}

/// The `imago` binary's standard output for `args`; fails the test, with its standard
/// error, unless it succeeds.
pub fn imago_ok(args: &[&str]) -> String {
    let output = imago(args);
    assert!(output.status.success(), "{args:?}: {}", stderr(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The `imago` binary started with `args`, its standard output and error piped.
pub fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_imago"))
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("imago starts")
}

/// Runs `imago args`, which must fail with exactly one line, `error: ...`, that
/// mentions `must_mention`, and no panic.
pub fn assert_one_line_error(args: &[&str], must_mention: &str) {
    let output = imago(args);
    assert!(!output.status.success(), "{args:?} should fail");
    let err = stderr(&output);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?} printed: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(must_mention), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

/// Polls `condition` every 100 ms until it holds; fails naming `what` after
/// `timeout`. For waiting on a process's progress instead of a fixed sleep.
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "waited {timeout:?} for {what} in vain"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Finished episodes in the replay at `dir` so far (0 before it exists): what a test
/// waits on to know a running daemon has made progress.
pub fn episodes_in(dir: &std::path::Path) -> usize {
    imago_runtime::store::replay::read_replay(dir).map_or(0, |c| c.episodes.len())
}

/// Whether a running `imago daemon` holds the run directory `run` (its lock file
/// names it once the lock is taken).
pub fn daemon_holds(run: &std::path::Path) -> bool {
    std::fs::read_to_string(run.join("imago.lock")).is_ok_and(|holder| holder.contains("daemon"))
}

/// Standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A loopback TCP port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Python in `IMAGO_PYTHON` (else `python3`) when it can import every one of
/// `modules`; else `None`, after printing that the test skipped and how to install
/// them. Under `CI=true`, where `.ci/run` installs them, their absence fails.
pub fn python_with(modules: &[&str], install: &str) -> Option<String> {
    let python = std::env::var("IMAGO_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let names = modules.join(", ");
    let ok = Command::new(&python)
        .args(["-c", &format!("import {names}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {python} cannot import {names} (.ci/run installs them)"
    );
    println!("skipped: {python} cannot import {names} ({install})");
    None
}

/// The first and last loss a training command printed (`... loss A -> B; ...`).
pub fn printed_losses(stdout: &str) -> (f32, f32) {
    let losses = stdout
        .split("loss ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no loss in {stdout}"));
    let (first, last) = losses
        .split_once(" -> ")
        .unwrap_or_else(|| panic!("no loss in {stdout}"));
    (first.trim().parse().unwrap(), last.trim().parse().unwrap())
}
