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

`--sfn ROUTES_DIR` (the Step Functions tests, opt-in): moto executes state machines (the harness
also enables it with `POST /moto-api/config {"stepfunctions":{"execute_state_machine":true}}`).
- `MOTO_PORT` is set in this process's environment to the bound port, so the `aws-sdk:*` and
  `sqs:*` task integrations, which call `localhost:$MOTO_PORT`, reach this very server.
- Lambda Task states: moto's Lambda would need Docker. The boto3 Lambda client that moto's
  Step Functions interpreter makes (`lambda_eval_utils.boto_client_for`) is routed instead to a
  `cargo lambda watch` Invoke endpoint. Its request path carries the URL-encoded function ARN
  (`/2015-03-31/functions/arn%3Aaws%3Alambda%3A...%3Afunction%3ANAME/invocations`); NAME is
  looked up in ROUTES_DIR, where the harness writes one file per function, named NAME, holding
  `<invoke endpoint> <binary>` (e.g. `http://127.0.0.1:9001 redrive-workflow`). The request
  goes to `<invoke endpoint>/2015-03-31/functions/<binary>/invocations`; a function error
  (cargo lambda watch: HTTP 500 + error document) is answered as AWS Lambda does (200,
  `X-Amz-Function-Error: Unhandled`), so the task's error is the function's `errorType`. A
  function with no route fails the task with an error naming it. Every other client moto
  makes is unchanged.
- Fault injection (the tests' "a task fails once", the soak's injected failures): a route
  file's further lines `fail <action> <count> <before|after>` answer the first <count> invokes
  whose payload has `"action": "<action>"` (`*`: any) with the function error
  `Lambda.ServiceException`, the error Step Functions reports when the Lambda service fails a
  call. `before`: the function never ran; `after`: it ran (its effects happened), its answer is
  lost. Counted per route file version, so rewriting the file starts again.

IAM, always: moto authorizes every request (`INITIAL_NO_AUTH_ACTION_COUNT` 0) as AWS would.
- Before the port is reported, the launcher creates in moto's IAM the harness's admin user
  (policy `*` on `*`), whose access keys are `testing`/`testing` (the harness's own setup calls,
  `Moto::sdk_config`) and `ak`/`sk` (the keys moto's Step Functions interpreter signs its
  `aws-sdk:*`/`sqs:*` task calls with).
- `POST /redrive-tests/iam/credentials {"role": ID, "resources": {...}}` creates a user whose
  inline policies are what infra/templates/ gives the role or managed policy ID, rendered for
  the test's resources by tests/iam_policy.py, and answers `{"AccessKeyId", "SecretAccessKey"}`
  (see tests/src/iam.rs). An optional `"extra": [statements]` is one more inline policy of the
  user: what an identity grants beyond the stack's policies (the operator's own export bucket).
  Nothing else may create users: no request is unchecked.
- Six moto gaps are closed so that a template that is right on AWS is right here: a refusal of
  a JSON-protocol call (SQS, DynamoDB, Step Functions) is a JSON AccessDeniedException, which the
  SDKs parse (moto answers XML, which they cannot read); a form body that the Rust SDK
  percent-encodes passes the signature check (moto re-encodes it as botocore does); CloudWatch
  calls are checked as `cloudwatch:*` (moto takes the signing name, `monitoring`); the batch
  calls (SendMessageBatch, DeleteMessageBatch, ChangeMessageVisibilityBatch) are authorized as
  the action AWS checks for them (sqs:SendMessage, ...), and every SQS call on the queue it
  names, GetQueueUrl and a queue that does not exist included (moto checks those against `*`);
  HeadBucket is authorized as s3:ListBucket, as AWS does (moto checks s3:HeadBucket).
"""

import json
import logging
import os
import sys
import time
import urllib.parse


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


ADMIN_USER = "redrive-tests-admin"
# (access key id, secret): the harness's (tests/src/moto.rs) and moto's Step Functions
# interpreter's (moto/stepfunctions/parser/asl/utils/boto_client.py).
ADMIN_KEYS = (("testing", "testing"), ("ak", "sk"))
ADMIN_KEY_IDS = {key_id for key_id, _ in ADMIN_KEYS}
ACCOUNT = "123456789012"
CREDENTIALS_PATH = "/redrive-tests/iam/credentials"
# The IAM action prefix of a service whose signing name differs (moto takes the signing name).
AWS_SERVICE_PREFIX = {"monitoring": "cloudwatch"}
# The IAM action AWS authorizes a call as, where moto names another.
AWS_ACTION = {
    "s3:HeadBucket": "s3:ListBucket",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}


def iam_backend():
    from moto.iam.models import iam_backends

    return iam_backends[ACCOUNT]["aws"]


def create_user(name: str, policies: dict):
    """A user of moto's IAM with inline `policies` (name -> document); its access key."""
    iam = iam_backend()
    iam.create_user(region_name="us-east-1", user_name=name)
    for policy_name, document in policies.items():
        iam.put_user_policy(name, policy_name, json.dumps(document))
    return iam.create_access_key(name)


def enforce_iam() -> None:
    from moto import settings
    from moto.core.exceptions import JsonRESTError
    from moto.iam.access_control import IAMRequest, IAMRequestBase
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    from moto.sqs.responses import SQSResponse

    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    admin = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    keys = [create_user(ADMIN_USER, {"admin": admin})]
    keys += [iam_backend().create_access_key(ADMIN_USER) for _ in ADMIN_KEYS[1:]]
    for key, (key_id, secret) in zip(keys, ADMIN_KEYS):
        key.access_key_id, key.secret_access_key = key_id, secret

    moto_init = IAMRequestBase.__init__

    def init(self, *args, **kwargs):
        moto_init(self, *args, **kwargs)
        service, _, name = self._action.partition(":")
        action = f"{AWS_SERVICE_PREFIX.get(service, service)}:{name}"
        self._action = AWS_ACTION.get(action, action)

    IAMRequestBase.__init__ = init

    moto_check_signature = IAMRequestBase.check_signature

    def check_signature(self):
        # The harness's own identity (allowed everything anyway) is not held to its signature:
        # the benchmarks' fault proxy (bench/src/proxy.rs) rewrites request bodies on the way
        # here, as a batch whose entries partly fail. Every role's user is checked in full.
        key_id = self._get_string_between("Credential=", "/", self._headers["Authorization"])
        if key_id in ADMIN_KEY_IDS:
            return
        try:
            moto_check_signature(self)
        except Exception:  # noqa: BLE001 - moto's SignatureDoesNotMatch, retried below
            # A form body (CloudWatch's query protocol) reaches this check parsed, and moto
            # signs it again encoded as botocore would (a space as '+'); the Rust SDK
            # percent-encodes (a space as '%20'). Check that encoding too.
            if self._body or not isinstance(self._data, dict):
                raise
            self._body = urllib.parse.urlencode(
                self._data, doseq=True, quote_via=urllib.parse.quote
            ).encode("utf-8")
            moto_check_signature(self)

    IAMRequestBase.check_signature = check_signature

    class JsonAccessDenied(JsonRESTError):
        code = 403

        def get_headers(self, *args, **kwargs):
            # SQS's JSON protocol names the query error code too (the SDK reads it there).
            return super().get_headers(*args, **kwargs) + [("x-amzn-query-error", "AccessDenied;Sender")]

    moto_denied = IAMRequest._raise_access_denied

    def raise_access_denied(self):
        content_type = {k.lower(): v for k, v in self._headers.items()}.get("content-type", "")
        if "json" not in content_type:
            moto_denied(self)
        raise JsonAccessDenied(
            "AccessDeniedException",
            f"User: {self._access_key.arn} is not authorized to perform: {self._action}",
        )

    IAMRequest._raise_access_denied = raise_access_denied

    moto_resource = SQSResponse._determine_resource

    def determine_resource(self):
        # AWS authorizes a call on the queue it names, existing or not (a deleted queue is
        # then QueueDoesNotExist, not AccessDenied); moto checks "*" unless the queue exists.
        action = self._get_action()
        if action == "CreateQueue":
            return moto_resource(self)
        name = self._get_param("QueueName") if action == "GetQueueUrl" else self._get_queue_name()
        if not name:
            return "*"
        return f"arn:aws:sqs:{self.region}:{self.current_account}:{name}"

    SQSResponse._determine_resource = determine_resource

    dispatch = DomainDispatcherApplication.__call__
    users = iter(range(1, 1 << 62))

    def call(self, environ, start_response):
        if environ.get("PATH_INFO") != CREDENTIALS_PATH:
            return dispatch(self, environ, start_response)
        import iam_policy

        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            request = json.loads(environ["wsgi.input"].read(length))
            role = request["role"]
            # "A+B": a user holding the policies of both (the triage policies add up).
            policies = {}
            for one in role.split("+"):
                policies.update(iam_policy.render(one, request.get("resources", {})))
            extra = request.get("extra")
            if extra is not None:
                if not isinstance(extra, list) or not all(isinstance(s, dict) for s in extra):
                    raise ValueError("extra: a list of IAM statements")
                policies["extra"] = {"Version": "2012-10-17", "Statement": extra}
            key = create_user(f"{role}-{next(users)}", policies)
            answer = {"AccessKeyId": key.access_key_id, "SecretAccessKey": key.secret_access_key}
            status = "200 OK"
        except Exception as e:  # noqa: BLE001 - the harness reports it
            status, answer = "400 Bad Request", {"error": f"{type(e).__name__}: {e}"}
        body = json.dumps(answer).encode("utf-8")
        start_response(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        return [body]

    DomainDispatcherApplication.__call__ = call


def use_fast_clock() -> None:
    import moto.sqs.models as sqs_models

    slow_seconds, slow_millis = sqs_models.unix_time, sqs_models.unix_time_millis

    def unix_time(dt=None):
        return time.time() if dt is None else slow_seconds(dt)

    def unix_time_millis(dt=None):
        return time.time() * 1000.0 if dt is None else slow_millis(dt)

    sqs_models.unix_time = unix_time
    sqs_models.unix_time_millis = unix_time_millis


class NoLambdaRoute(Exception):
    pass


class Route:
    def __init__(self, url: str, path: str, faults: list, version: tuple):
        self.url = url
        self.path = path
        self.faults = faults  # [(index, action, count, timing)]
        self.version = version


# (route path, file version, fault index) -> faults injected so far
_injected: dict = {}
_injected_lock = __import__("threading").Lock()


def lambda_route(routes_dir: str, url: str) -> Route:
    """The cargo lambda watch route for a Lambda Invoke request `url` of moto's interpreter."""
    parts = urllib.parse.urlsplit(url)
    segments = parts.path.split("/")
    # ['', '2015-03-31', 'functions', '<url-encoded ARN or name>', 'invocations']
    if len(segments) < 5 or segments[2] != "functions":
        raise NoLambdaRoute(f"not a Lambda Invoke request: {parts.path}")
    function = urllib.parse.unquote(segments[3])
    # arn:aws:lambda:REGION:ACCOUNT:function:NAME[:QUALIFIER], or a bare NAME
    fields = function.split(":")
    name = fields[6] if len(fields) >= 7 and fields[5] == "function" else function
    path = os.path.join(routes_dir, name)
    try:
        with open(path, encoding="utf-8") as f:
            stat = os.fstat(f.fileno())
            version = (stat.st_ino, stat.st_mtime_ns)
            lines = f.read().splitlines()
        endpoint, binary = lines[0].split()
        faults = []
        for index, line in enumerate(lines[1:]):
            if not line.strip():
                continue
            kind, action, count, timing = line.split()
            if kind != "fail" or timing not in ("before", "after"):
                raise ValueError(f"bad fault line {line!r}")
            faults.append((index, action, int(count), timing))
    except (OSError, ValueError, IndexError) as e:
        raise NoLambdaRoute(
            f"no cargo lambda watch route for Lambda function {name!r} ({function}): "
            f"the test must register it (missing or malformed {path}: {e})"
        ) from None
    query = f"?{parts.query}" if parts.query else ""
    target = f"{endpoint}/2015-03-31/functions/{urllib.parse.quote(binary)}/invocations{query}"
    return Route(target, path, faults, version)


def injected_fault(route: Route, body: bytes):
    """The timing ('before'/'after') of a fault this invoke must suffer, or None."""
    import json

    if not route.faults:
        return None
    try:
        action = json.loads(body or b"{}").get("action")
    except (ValueError, AttributeError):
        action = None
    with _injected_lock:
        for index, wanted, count, timing in route.faults:
            if wanted != "*" and wanted != action:
                continue
            key = (route.path, route.version, index)
            done = _injected.get(key, 0)
            if done < count:
                _injected[key] = done + 1
                return timing
    return None


def invoke_through_watch(route: Route, body):
    """POSTs an Invoke to cargo lambda watch and answers as the Lambda service does.

    cargo lambda watch answers a function error (or panic) with HTTP 500 and the runtime's
    error document; AWS Lambda answers 200 with `X-Amz-Function-Error: Unhandled` and that
    document as the payload, and Step Functions names the task's error after its `errorType`
    (what `Retry` and `Catch` match). The answer is translated so moto's interpreter sees it.
    """
    import json
    import urllib.error
    import urllib.request

    from botocore.awsrequest import AWSResponse
    from moto.core.botocore_stubber import MockRawResponse

    if isinstance(body, str):
        body = body.encode("utf-8")
    url = route.url
    fault = injected_fault(route, body)
    headers = {}
    status, payload = 0, b""
    if fault != "before":
        request = urllib.request.Request(
            url, data=body or b"{}", method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request) as answer:
                status, payload = answer.status, answer.read()
        except urllib.error.HTTPError as e:
            status, payload = e.code, e.read()
    if fault is not None:
        status = 500
        payload = json.dumps(
            {
                "errorType": "Lambda.ServiceException",
                "errorMessage": f"injected by the test harness ({fault} the function ran)",
            }
        ).encode("utf-8")
    if status == 500:
        try:
            document = json.loads(payload)
        except ValueError:
            document = None
        if isinstance(document, dict) and "errorType" in document:
            status, headers = 200, {"X-Amz-Function-Error": "Unhandled"}
    headers["Content-Type"] = "application/json"
    return AWSResponse(url, status, headers, MockRawResponse(payload))


def route_step_functions_lambda(routes_dir: str) -> None:
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
        lambda_eval_utils,
    )

    moto_client_for = lambda_eval_utils.boto_client_for

    def reroute(request, **_kwargs):
        return invoke_through_watch(lambda_route(routes_dir, request.url), request.body)

    def boto_client_for(region, service, state_credentials=None):
        client = moto_client_for(
            region=region, service=service, state_credentials=state_credentials
        )
        if service == "lambda":
            client.meta.events.register_first("before-send.lambda.Invoke", reroute)
        return client

    lambda_eval_utils.boto_client_for = boto_client_for


def main() -> None:
    if os.environ.get("REDRIVE_MOTO_VERBOSE") != "1":
        logging.getLogger("werkzeug").setLevel(logging.ERROR)

    serialise_dynamodb_writes()
    enforce_iam()
    args = sys.argv[1:]
    if "--fast-clock" in args:
        use_fast_clock()
    sfn_routes = None
    if "--sfn" in args:
        index = args.index("--sfn")
        if index + 1 >= len(args):
            sys.exit("moto_launcher.py: --sfn needs the routes directory")
        sfn_routes = args[index + 1]
        route_step_functions_lambda(sfn_routes)

    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()  # returns once the listening socket exists
    _, port = server.get_host_and_port()
    if sfn_routes is not None:
        # Read by moto at each call (moto.settings.moto_server_port): set before any execution.
        os.environ["MOTO_PORT"] = str(port)
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
