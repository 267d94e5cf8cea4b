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
