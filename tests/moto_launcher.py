"""Start one moto server for one test process, and die with that process.

Protocol with the Rust harness (`redrive_tests::moto()`):
- binds 127.0.0.1 on port 0, so the OS picks a free port and no other process can race for it;
- prints that port, alone on one line, on stdout, once the socket listens;
- exits as soon as its stdin reaches end of file. The harness keeps the write end of that
  pipe open for the life of the test process, so when that process ends for any reason
  (pass, panic, abort, SIGKILL) the kernel closes the pipe and moto goes away with it.

Request logs are silenced unless REDRIVE_MOTO_VERBOSE=1; errors still reach stderr.
"""

import logging
import os
import sys


def main() -> None:
    if os.environ.get("REDRIVE_MOTO_VERBOSE") != "1":
        logging.getLogger("werkzeug").setLevel(logging.ERROR)

    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()  # returns once the listening socket exists
    _, port = server.get_host_and_port()
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()

    # Block until the parent's end of the pipe closes. Read in chunks so that a parent which
    # writes by mistake cannot make us hold on to memory.
    while sys.stdin.buffer.read(4096):
        pass
    # os._exit: do not wait for the server's threads or run interpreter teardown.
    os._exit(0)


if __name__ == "__main__":
    main()
