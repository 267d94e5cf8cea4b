//! Child processes that cannot outlive the test process.
//!
//! A long-running helper (`cargo lambda watch`) is started under a small `sh` guard, in a new
//! process group led by that guard. The guard holds the read end of a pipe whose write end
//! only this test process holds; when the pipe reaches end of file (we dropped it, or this
//! process died, even by SIGKILL) the guard sends SIGTERM to the helper, which shuts down
//! what it started, and the guard exits.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// `sh -c GUARD argv...`: runs argv in the background with stdin from /dev/null, ends it
/// with SIGTERM when our stdin reaches EOF, and exits with its status.
const GUARD: &str = r#"
exec 3<&0
"$@" </dev/null &
child=$!
{ while read -r _ <&3; do :; done; kill -TERM "$child" 2>/dev/null; } &
reader=$!
wait "$child"
status=$?
kill "$reader" 2>/dev/null
exit "$status"
"#;

#[derive(Debug)]
pub(crate) struct Guarded {
    child: Child,
    lifeline: Option<ChildStdin>,
    stopped: bool,
}

impl Guarded {
    /// Spawns `program args` under the guard in a new process group, output to `log`.
    pub(crate) fn spawn(
        program: &Path,
        args: &[String],
        cwd: &Path,
        env: &[(String, String)],
        env_remove: &[String],
        log: &std::fs::File,
    ) -> io::Result<Guarded> {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(GUARD)
            .arg("redrive-guard") // $0
            .arg(program)
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log.try_clone()?))
            .process_group(0);
        for name in env_remove {
            command.env_remove(name);
        }
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = command.spawn()?;
        let lifeline = child.stdin.take();
        Ok(Guarded {
            child,
            lifeline,
            stopped: false,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the guard is still running. Never reaps it: while it is unreaped its pid,
    /// and so its process group id, cannot be reused, which keeps `kill_group` safe.
    pub(crate) fn is_running(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()));
        match stat {
            // The state is the first field after the parenthesised command name.
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X"),
            Err(_) => false,
        }
    }

    /// Asks the program to stop (closes the lifeline: SIGTERM), waits up to `grace`, then
    /// kills whatever is left of the process group and reaps the guard.
    pub(crate) fn stop(&mut self, grace: Duration) {
        if self.stopped {
            return; // reaped: its pid and group id may belong to someone else by now
        }
        self.stopped = true;
        drop(self.lifeline.take());
        let started = Instant::now();
        while self.is_running() && started.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(50));
        }
        // The guard is unreaped, so the group id is still ours.
        kill_group(self.pid(), "KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Guarded {
    // Stops the guarded program unless `stop` already did.
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

/// `kill -SIGNAL -- -PGID`, ignoring a group that no longer exists.
pub(crate) fn kill_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A port that was free a moment ago on 127.0.0.1 (for tools that cannot bind port 0
/// themselves and report it).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 to find a free port")
}

/// A Python launcher (`moto_launcher.py`, `localstack_launcher.py`) that prints its server's
/// port alone on one line once the server answers, and exits when its stdin reaches end of
/// file: the write end is `lifeline`, held for the life of this process.
#[derive(Debug)]
pub(crate) struct Announced {
    pub(crate) port: u16,
    pub(crate) pid: u32,
    pub(crate) lifeline: ChildStdin,
}

/// A server a launcher started on 127.0.0.1 (moto, LocalStack), private to this test process;
/// `K` holds what is particular to that server.
#[derive(Debug)]
pub struct Launched<K> {
    port: u16,
    pid: u32,
    // Held, never written: when this process ends the kernel closes the pipe, the launcher
    // reads end of file and exits, so the server never outlives the tests that started it.
    _lifeline: ChildStdin,
    pub(crate) kind: K,
}

impl<K> Launched<K> {
    pub(crate) fn new(announced: Announced, kind: K) -> Self {
        Launched {
            port: announced.port,
            pid: announced.pid,
            _lifeline: announced.lifeline,
            kind,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Process id of the launcher (the Python process serving moto; LocalStack runs as its
    /// child).
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// Starts `python launcher args...` and waits up to `timeout` for its port. `name` names the
/// server in panics and in its further stdout lines (`[name] ...` on our stderr); `hint` says
/// what to check when the launcher exits before printing a port.
pub(crate) fn launch_announcing_port(
    name: &str,
    python: &Path,
    launcher: &Path,
    args: &[String],
    timeout: Duration,
    hint: &str,
) -> Announced {
    use std::io::BufRead;

    let mut child = Command::new(python)
        .arg(launcher)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {} {}: {e}", python.display(), launcher.display()));
    let lifeline = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");

    // Read the port on a thread so a launcher that hangs cannot hang the tests.
    let (tx, rx) = std::sync::mpsc::channel();
    let prefix = name.to_string();
    std::thread::Builder::new()
        .name(format!("{name}-stdout"))
        .spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Keep draining so the launcher never blocks on a full pipe.
            for line in lines.map_while(Result::ok) {
                eprintln!("[{prefix}] {line}");
            }
        })
        .expect("spawning a thread");
    let port = match rx.recv_timeout(timeout) {
        Ok(Some(Ok(line))) => line.trim().parse::<u16>().unwrap_or_else(|_| {
            panic!("{name} launcher printed {line:?} instead of a port number")
        }),
        Ok(_) => {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            panic!("{name} launcher exited before printing its port ({status}); {hint}")
        }
        Err(_) => {
            let _ = child.kill();
            panic!("{name} launcher printed no port within {timeout:?}")
        }
    };
    let pid = child.id();
    // The child is not waited for: it ends with this process (see `lifeline`).
    drop(child);
    Announced {
        port,
        pid,
        lifeline,
    }
}
