"""AWS quotas and retry rules of the Step Functions definition, checked statically on
infra/statemachine/redrive.asl.json (moto neither counts history events nor refuses a retrier).

- History: a Standard execution holds at most 25,000 events; AWS fails the execution beyond.
  The worst case is computed from the definition's structure, with the events AWS documents per
  state type (a Lambda Task: TaskStateEntered, TaskScheduled, TaskStarted, TaskSucceeded or
  TaskFailed, TaskStateExited, and Scheduled/Started/Failed again per retry; a Map: Entered,
  Started, Succeeded, Exited, and MapIterationStarted/Succeeded per item; Choice, Pass, Wait and
  Succeed: Entered/Exited; Fail: Entered), every retrier exhausted and every Catch path taken.
  The loop's rounds and the Maps' items are bounded by what the task function enforces
  (functions/workflow/src/lib.rs: MAX_ROUNDS_PER_EXECUTION, MAX_PARALLEL). A messages-mode
  round is one task (`redriveBatch`: the engine's drain, a record per message in its answer),
  so its history does not grow with the messages; the scale-out round's Map of drains is the
  only Map, and the longest lap.
- Every Lambda task's Retry names AWS's recommended Lambda errors.
- `States.Timeout` is matched only on tasks that can time out (TimeoutSeconds or
  HeartbeatSeconds), and a task timeout outlasts any Lambda invocation, so that a retry after a
  timeout never runs beside the attempt it replaces.

Each check has a test on a mutated copy of the definition that must fail it.
"""

from __future__ import annotations

import copy
import json
import re
import unittest

import support

ASL = support.INFRA / "statemachine" / "redrive.asl.json"
WORKFLOW_RS = support.REPO / "functions" / "workflow" / "src" / "lib.rs"

# Step Functions Standard: "Maximum execution history size: 25,000 events in a single execution".
HISTORY_LIMIT = 25_000
# The definition must leave a fifth of the quota to spare.
HISTORY_BUDGET = HISTORY_LIMIT * 4 // 5
# What AWS recommends every Lambda task retries ("Handle transient Lambda service exceptions").
LAMBDA_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
    "Lambda.ClientExecutionTimeoutException",
}
# Lambda's longest function timeout.
LAMBDA_MAX_TIMEOUT_SECONDS = 900
# Retrier default when MaxAttempts is omitted.
DEFAULT_MAX_ATTEMPTS = 3


class Unbounded(Exception):
    """The definition's history cannot be bounded from its structure and the task's caps."""


def task_constants() -> dict[str, int]:
    """The `pub const NAME: u32 = N;` bounds of the task function."""
    text = WORKFLOW_RS.read_text(encoding="utf-8")
    return {name: int(value.replace("_", ""))
            for name, value in re.findall(r"pub const (\w+): u32 = ([\d_]+);", text)}


def task_bounds() -> tuple[int, dict[str, int]]:
    """(rounds per execution, items per visit of each Map state), as the task enforces them:
    `tally` ends the execution after MAX_ROUNDS_PER_EXECUTION rounds; a scale-out round's
    `drainPlan` holds at most `drains` <= MAX_PARALLEL drains (`start` and `drain` refuse more)."""
    constants = task_constants()
    if "MAX_ROUNDS_PER_EXECUTION" not in constants:
        raise Unbounded(f"{WORKFLOW_RS.name} bounds no rounds per execution (MAX_ROUNDS_PER_EXECUTION)")
    parallel = constants["MAX_PARALLEL"]
    return constants["MAX_ROUNDS_PER_EXECUTION"], {"ScaleOutDrains": parallel}


def successors(state: dict) -> list[str]:
    out = [state["Next"]] if "Next" in state else []
    out += [c["Next"] for c in state.get("Choices", [])]
    out += [state["Default"]] if "Default" in state else []
    out += [c["Next"] for c in state.get("Catch", [])]
    return out


def retries(state: dict) -> int:
    """Every retrier exhausted: each counts its own attempts."""
    return sum(r.get("MaxAttempts", DEFAULT_MAX_ATTEMPTS) for r in state.get("Retry", []))


def back_edges(machine: dict) -> set[tuple[str, str]]:
    """Edges that close a cycle, by depth-first search from StartAt."""
    states, found, done, on_path = machine["States"], set(), set(), []

    def visit(name: str) -> None:
        on_path.append(name)
        for nxt in successors(states[name]):
            if nxt in on_path:
                found.add((name, nxt))
            elif nxt not in done:
                visit(nxt)
        on_path.pop()
        done.add(name)

    visit(machine["StartAt"])
    return found


def state_events(name: str, state: dict, items: dict[str, int]) -> int:
    kind = state["Type"]
    if kind == "Task":
        return 5 + 3 * retries(state)
    if kind in ("Choice", "Pass", "Wait", "Succeed"):
        return 2
    if kind == "Fail":
        return 1
    if kind == "Map":
        if name not in items:
            raise Unbounded(f"Map state {name}: no bound on its items per visit")
        iterator = state.get("ItemProcessor") or state["Iterator"]
        if back_edges(iterator):
            raise Unbounded(f"Map state {name}: its iteration loops")
        return 4 + items[name] * (2 + longest_path(iterator, items, set()))
    raise Unbounded(f"state {name}: type {kind} is not modelled")


def longest_path(machine: dict, items: dict[str, int], cut: set[tuple[str, str]],
                 start: str | None = None, to: set[str] | None = None) -> int:
    """The most events along one path from `start` (StartAt) without the `cut` edges, to an end
    state or, with `to`, to one of those states (-1 when none is reachable)."""
    states, memo = machine["States"], {}

    def best(name: str) -> int:
        if name not in memo:
            nexts = [best(n) for n in successors(states[name]) if (name, n) not in cut]
            tail = max([n for n in nexts if n >= 0], default=-1)
            if to is None:
                tail = max(tail, 0)
            elif name in to:
                tail = max(tail, 0)
            memo[name] = -1 if tail < 0 else state_events(name, states[name], items) + tail
        return memo[name]

    return best(start or machine["StartAt"])


def worst_case_history(machine: dict, rounds: int, items: dict[str, int]) -> int:
    """Events of the longest execution: ExecutionStarted, the longest path with the loop taken
    `rounds` times (every retrier exhausted, every Catch taken), ExecutionSucceeded/Failed."""
    loops = back_edges(machine)
    heads = {head for _, head in loops}
    if len(heads) > 1:
        raise Unbounded(f"more than one loop ({sorted(heads)}): only the rounds loop is bounded")
    once = longest_path(machine, items, loops)
    if not loops:
        return 2 + once
    head = heads.pop()
    lap = longest_path(machine, items, loops, start=head, to={tail for tail, _ in loops})
    return 2 + once + (rounds - 1) * lap


def all_states(machine: dict):
    """(name, state) of the definition and of every Map iteration and Parallel branch in it."""
    for name, state in machine["States"].items():
        yield name, state
        for inner in [state.get("ItemProcessor") or state.get("Iterator")] + state.get("Branches", []):
            if inner:
                yield from all_states(inner)


def is_lambda_task(state: dict) -> bool:
    resource = state.get("Resource", "")
    return state["Type"] == "Task" and (
        ":lambda:" in resource or re.fullmatch(r"\$\{\w*FunctionArn\}", resource) is not None)


def lambda_retry_violations(machine: dict) -> list[str]:
    out = []
    for name, state in all_states(machine):
        if is_lambda_task(state):
            named = {e for r in state.get("Retry", []) for e in r["ErrorEquals"]}
            missing = sorted(LAMBDA_ERRORS - named)
            if missing:
                out.append(f"{name}: Retry lacks {', '.join(missing)}")
    return out


def timeout_violations(machine: dict) -> list[str]:
    out = []
    for name, state in all_states(machine):
        matchers = state.get("Retry", []) + state.get("Catch", [])
        matches_timeout = any("States.Timeout" in m["ErrorEquals"] for m in matchers)
        can_time_out = "TimeoutSeconds" in state or "HeartbeatSeconds" in state
        if matches_timeout and not can_time_out:
            out.append(f"{name}: States.Timeout in Retry/Catch without TimeoutSeconds or HeartbeatSeconds")
        if is_lambda_task(state) and state.get("TimeoutSeconds", LAMBDA_MAX_TIMEOUT_SECONDS + 1) \
                <= LAMBDA_MAX_TIMEOUT_SECONDS:
            out.append(f"{name}: TimeoutSeconds {state['TimeoutSeconds']} does not outlast a Lambda "
                       f"invocation ({LAMBDA_MAX_TIMEOUT_SECONDS} s): a retry would run beside it")
    return out


def shipped() -> dict:
    return json.loads(ASL.read_text(encoding="utf-8"))


def mutated(change) -> dict:
    machine = copy.deepcopy(shipped())
    change(machine)
    return machine


def iteration(machine: dict) -> dict:
    """The states of one scale-out drain (the Map's iteration)."""
    return machine["States"]["ScaleOutDrains"]["Iterator"]["States"]


class History(unittest.TestCase):
    def test_the_worst_case_history_stays_under_the_standard_limit_with_room_to_spare(self):
        rounds, items = task_bounds()
        events = worst_case_history(shipped(), rounds, items)
        self.assertLessEqual(
            events, HISTORY_BUDGET,
            f"worst case {events} history events per execution ({rounds} rounds): the limit is "
            f"{HISTORY_LIMIT}, the budget {HISTORY_BUDGET}")

    def test_the_model_counts_what_aws_documents(self):
        machine = {"StartAt": "T", "States": {
            "T": {"Type": "Task", "Resource": "${TaskFunctionArn}", "Next": "M",
                  "Retry": [{"ErrorEquals": ["A"], "MaxAttempts": 2}, {"ErrorEquals": ["B"]}]},
            "M": {"Type": "Map", "Next": "C", "Iterator": {"StartAt": "W", "States": {
                "W": {"Type": "Wait", "Seconds": 1, "Next": "P"},
                "P": {"Type": "Task", "Resource": "${TaskFunctionArn}", "End": True,
                      "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "F"}]},
                "F": {"Type": "Pass", "End": True}}}},
            "C": {"Type": "Choice", "Choices": [{"Variable": "$.more", "BooleanEquals": True, "Next": "T"}],
                  "Default": "E"},
            "E": {"Type": "Fail"}}}
        task = 5 + 3 * (2 + 3)
        item = 2 + 2 + 5 + 2
        lap = task + 4 + 3 * item + 2
        self.assertEqual(worst_case_history(machine, 4, {"M": 3}), 2 + lap + 1 + 3 * lap)

    def test_a_retry_storm_beyond_the_quota_fails_the_check(self):
        def more_retries(machine):
            iteration(machine)["Drain"]["Retry"][0]["MaxAttempts"] = 40
        rounds, items = task_bounds()
        self.assertGreater(worst_case_history(mutated(more_retries), rounds, items), HISTORY_LIMIT)

    def test_more_rounds_than_the_task_allows_fail_the_check(self):
        rounds, items = task_bounds()
        self.assertGreater(worst_case_history(shipped(), rounds * 4, items), HISTORY_LIMIT)

    def test_a_second_loop_cannot_be_bounded(self):
        def loop_on_receive(machine):
            machine["States"]["Tally"]["Next"] = "RedriveBatch"
        rounds, items = task_bounds()
        with self.assertRaisesRegex(Unbounded, "more than one loop"):
            worst_case_history(mutated(loop_on_receive), rounds, items)

    def test_a_loop_inside_an_iteration_cannot_be_bounded(self):
        def retry_by_hand(machine):
            drain = iteration(machine)
            drain["Drain"]["Catch"] = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Again"}]
            drain["Again"] = {"Type": "Pass", "Next": "Drain"}
        rounds, items = task_bounds()
        with self.assertRaisesRegex(Unbounded, "ScaleOutDrains: its iteration loops"):
            worst_case_history(mutated(retry_by_hand), rounds, items)

    def test_a_map_over_a_rounds_messages_cannot_be_bounded(self):
        # A round's messages are the engine's records, not states: a Map over them is refused.
        def map_the_records(machine):
            machine["States"]["RedriveBatch"]["Next"] = "ForEachRecord"
            machine["States"]["ForEachRecord"] = {
                "Type": "Map", "ItemsPath": "$.batch.records", "ResultPath": None, "Next": "Tally",
                "Iterator": {"StartAt": "Audit", "States": {"Audit": {"Type": "Pass", "End": True}}}}
        rounds, items = task_bounds()
        with self.assertRaisesRegex(Unbounded, "ForEachRecord: no bound on its items"):
            worst_case_history(mutated(map_the_records), rounds, items)

    def test_a_map_without_an_item_bound_cannot_be_bounded(self):
        rounds, items = task_bounds()
        del items["ScaleOutDrains"]
        with self.assertRaisesRegex(Unbounded, "ScaleOutDrains"):
            worst_case_history(shipped(), rounds, items)


class LambdaRetries(unittest.TestCase):
    def test_every_lambda_task_retries_the_recommended_lambda_errors(self):
        # Every task of the definition invokes the task function, and the check sees each one.
        tasks = [name for name, state in all_states(shipped()) if is_lambda_task(state)]
        self.assertEqual(tasks, [name for name, state in all_states(shipped()) if state["Type"] == "Task"])
        self.assertGreaterEqual(len(tasks), 7, tasks)
        self.assertEqual(lambda_retry_violations(shipped()), [])

    def test_a_task_without_one_of_them_fails_the_check(self):
        def drop_throttling(machine):
            retry = machine["States"]["RedriveBatch"]["Retry"][0]
            retry["ErrorEquals"].remove("Lambda.TooManyRequestsException")
        self.assertEqual(lambda_retry_violations(mutated(drop_throttling)),
                         ["RedriveBatch: Retry lacks Lambda.TooManyRequestsException"])

    def test_a_task_without_the_client_execution_timeout_fails_the_check(self):
        def drop_client_timeout(machine):
            machine["States"]["Summary"]["Retry"][0]["ErrorEquals"].remove(
                "Lambda.ClientExecutionTimeoutException")
        self.assertEqual(lambda_retry_violations(mutated(drop_client_timeout)),
                         ["Summary: Retry lacks Lambda.ClientExecutionTimeoutException"])

    def test_a_drain_without_one_of_them_fails_the_check(self):
        def drop_throttling(machine):
            iteration(machine)["Drain"]["Retry"][0]["ErrorEquals"].remove("Lambda.TooManyRequestsException")
        self.assertEqual(lambda_retry_violations(mutated(drop_throttling)),
                         ["Drain: Retry lacks Lambda.TooManyRequestsException"])


class Timeouts(unittest.TestCase):
    def test_states_timeout_only_on_tasks_that_can_time_out(self):
        self.assertEqual(timeout_violations(shipped()), [])

    def test_states_timeout_on_a_task_without_a_timeout_fails_the_check(self):
        def no_timeout(machine):
            del machine["States"]["Summary"]["TimeoutSeconds"]
        self.assertEqual(timeout_violations(mutated(no_timeout)), [
            "Summary: States.Timeout in Retry/Catch without TimeoutSeconds or HeartbeatSeconds"])

    def test_a_task_timeout_shorter_than_a_lambda_invocation_fails_the_check(self):
        def short(machine):
            machine["States"]["RedriveBatch"]["TimeoutSeconds"] = 60
        self.assertEqual(timeout_violations(mutated(short)), [
            "RedriveBatch: TimeoutSeconds 60 does not outlast a Lambda invocation (900 s): a retry would run beside it"])


if __name__ == "__main__":
    unittest.main()
