"""Start one moto server for one test process, and die with that process.

Protocol with the Rust harness (`redrive_tests::moto()`):
- binds 127.0.0.1 on port 0, so the OS picks a free port and no other process can race for it;
- prints that port, alone on one line, on stdout, once the socket listens;
- exits as soon as its stdin reaches end of file. The harness keeps the write end of that
  pipe open for the life of the test process, so when that process ends for any reason
  (pass, panic, abort, SIGKILL) the kernel closes the pipe and moto goes away with it.

Request logs are silenced unless REDRIVE_MOTO_VERBOSE=1; errors still reach stderr.

`--fast-clock` (the benchmarks and the moto soak): moto's SQS reads the time through
`moto.core.utils.unix_time`, a datetime subtraction of about 6 us, and calls it for every
message in the queue each time it computes the queue's attributes, which it does for every
message it receives or sends. At 1,000 messages that is 8 million calls and about 80% of moto's
CPU in a drain, an emulator cost that AWS does not have and that hides the latency the
benchmarks measure. The flag gives the SQS model the same clock read through `time.time()`;
a call with an explicit datetime still goes to moto's function. Nothing else changes.

Always: moto's DynamoDB checks a write's condition and then applies it without a lock, so two
concurrent conditional PutItems on one key can both succeed under a threaded server, which
DynamoDB never allows (a conditional write is atomic). The launcher serialises moto's DynamoDB
writes behind one lock, so that the consumer's idempotency claims meet DynamoDB's semantics.
"""

import logging
import os
import sys
import time


def serialise_dynamodb_writes() -> None:
    import functools
    import threading

    from moto.dynamodb.models import DynamoDBBackend

    lock = threading.RLock()
    for name in ("put_item", "update_item", "delete_item", "transact_write_items", "get_item"):
        unlocked = getattr(DynamoDBBackend, name)

        @functools.wraps(unlocked)
        def locked(*args, __unlocked=unlocked, **kwargs):
            with lock:
                return __unlocked(*args, **kwargs)

        setattr(DynamoDBBackend, name, locked)


def use_fast_clock() -> None:
    import moto.sqs.models as sqs_models

    slow_seconds, slow_millis = sqs_models.unix_time, sqs_models.unix_time_millis

    def unix_time(dt=None):
        return time.time() if dt is None else slow_seconds(dt)

    def unix_time_millis(dt=None):
        return time.time() * 1000.0 if dt is None else slow_millis(dt)

    sqs_models.unix_time = unix_time
    sqs_models.unix_time_millis = unix_time_millis


def main() -> None:
    if os.environ.get("REDRIVE_MOTO_VERBOSE") != "1":
        logging.getLogger("werkzeug").setLevel(logging.ERROR)

    serialise_dynamodb_writes()
    if "--fast-clock" in sys.argv[1:]:
        use_fast_clock()

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
