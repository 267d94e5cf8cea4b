"""Start one LocalStack for one test process, and die with that process.

The second, stricter SQS emulator beside moto (see `redrive_tests::localstack()`): LocalStack's
open-source core, `python -m localstack.runtime.main` from `.venv-localstack` (Python >= 3.13,
installed by `make setup`), without Docker and without an auth token.

Protocol with the Rust harness, the same as `moto_launcher.py`'s:
- prints the gateway's port, alone on one line, on stdout, once every service answers as
  running on `/_localstack/health`;
- exits as soon as its stdin reaches end of file. The harness keeps the write end of that pipe
  open for the life of the test process, so when that process ends for any reason (pass, panic,
  abort, SIGKILL) the kernel closes the pipe; the launcher then stops LocalStack (SIGTERM, then
  SIGKILL after a grace period) and exits. LocalStack itself is started with a parent-death
  signal (SIGKILL), so it cannot outlive the launcher either, even a killed one.

Usage: `localstack_launcher.py DIR`. DIR (inside target/) holds everything LocalStack writes:
its filesystem root (`DIR/fs`, removed when it stops) and its log (`DIR/localstack.log`, kept).

What the environment below pins, from LocalStack 2026.3.0's `localstack/config.py`:
- `GATEWAY_LISTEN=127.0.0.1:PORT` with `GATEWAY_SERVER=hypercorn`: the default server (twisted)
  ignores the host of GATEWAY_LISTEN and binds every interface; hypercorn binds loopback only.
  PORT was free a moment ago (LocalStack cannot bind port 0 and report it); a start that fails
  is retried on a fresh port.
- `SERVICES=sqs,s3,cloudwatch,sts` with `EAGER_SERVICE_LOADING=1`: those four, loaded before
  the health check says running (lazily they would cost the first call about 2 s).
- Offline: `DNS_ADDRESS=0` (no DNS server on port 53), `DISABLE_EVENTS=1` (no analytics),
  `SKIP_SSL_CERT_DOWNLOAD=1` (no certificate download; hypercorn makes a self-signed one).
- Inside DIR only: `OVERRIDE_IN_DOCKER=0` (the host layout under `FILESYSTEM_ROOT`, even when
  this machine is itself a container, where LocalStack would write to /var/lib/localstack and
  /tmp/localstack), `FILESYSTEM_ROOT=DIR/fs`, `CONFIG_DIR=DIR/fs/config` (no profile from
  ~/.localstack), `PERSISTENCE=0`.
- `SQS_ENDPOINT_STRATEGY=standard`: queue URLs carry the region in the host as AWS's do
  (`http://sqs.us-east-1.localhost.localstack.cloud:PORT/000000000000/NAME`); every client
  sends to its endpoint, so that host is never resolved.
- No `AWS_*` variable of ours reaches it.
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

SERVICES = ("sqs", "s3", "cloudwatch", "sts")
STARTUP_TIMEOUT_SECONDS = 120
STOP_GRACE_SECONDS = 5
ATTEMPTS = 3


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(port: int, fs_root: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "GATEWAY_LISTEN": f"127.0.0.1:{port}",
            "GATEWAY_SERVER": "hypercorn",
            "SERVICES": ",".join(SERVICES),
            "EAGER_SERVICE_LOADING": "1",
            "DNS_ADDRESS": "0",
            "DISABLE_EVENTS": "1",
            "SKIP_SSL_CERT_DOWNLOAD": "1",
            "OVERRIDE_IN_DOCKER": "0",
            "FILESYSTEM_ROOT": fs_root,
            "CONFIG_DIR": os.path.join(fs_root, "config"),
            "PERSISTENCE": "0",
            "SQS_ENDPOINT_STRATEGY": "standard",
        }
    )
    if os.environ.get("REDRIVE_LOCALSTACK_VERBOSE") != "1":
        # Request lines (one per call) stay out of the log unless asked for.
        env.setdefault("LS_LOG", "warn")
    return env


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the launcher ends (prctl PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def health(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_localstack/health", timeout=2) as r:
        return json.load(r)


def start(directory: str, log) -> tuple:
    """Starts LocalStack and waits until its services run; returns (process, port)."""
    fs_root = os.path.join(directory, "fs")
    failures = []
    for _ in range(ATTEMPTS):
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "localstack.runtime.main"],
            env=environment(port, fs_root),
            cwd=directory,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        state = "no answer"
        while time.monotonic() < deadline and process.poll() is None:
            try:
                services = health(port).get("services", {})
                state = {s: services.get(s) for s in SERVICES}
                if all(v == "running" for v in state.values()):
                    return process, port
            except (OSError, ValueError) as e:
                state = str(e)
            time.sleep(0.05)
        stop(process)
        failures.append(f"port {port}: exit {process.returncode}, health {state}")
    sys.exit(
        f"localstack_launcher.py: LocalStack did not start ({'; '.join(failures)}); "
        f"see {log.name}"
    )


def stop(process) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: localstack_launcher.py DIR")
    directory = os.path.abspath(sys.argv[1])
    os.makedirs(directory, exist_ok=True)
    log = open(os.path.join(directory, "localstack.log"), "ab")
    process, port = start(directory, log)

    stopping = threading.Event()

    # If LocalStack dies on its own, say so on stderr (the tests will fail on connection
    # errors; this tells them why).
    def watch() -> None:
        code = process.wait()
        if not stopping.is_set():
            sys.stderr.write(f"localstack_launcher.py: LocalStack exited ({code}); see {log.name}\n")

    threading.Thread(target=watch, daemon=True).start()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()

    # Block until the parent's end of the pipe closes.
    while sys.stdin.buffer.read(4096):
        pass
    stopping.set()
    stop(process)
    shutil.rmtree(os.path.join(directory, "fs"), ignore_errors=True)
    os._exit(0)


if __name__ == "__main__":
    main()
