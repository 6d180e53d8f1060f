"""`kvtier verify` on endpoint pods that cannot start (issue 35, bad input): a container that keeps failing is one
line with the reason from its termination message (its last log lines, kvtier renders FallbackToLogsOnError), never
a wiring pass. The messages below have the shape the real ones had (tests/engine/test_identity.py runs the adapter
check and an engine with a missing adapter and feeds their output to the same reading; vLLM 0.32's last line writes
`<path>` for the adapter's path, and Python's resource tracker warns after it)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from kvtier.ops.verify import Snapshot, failing_containers, verify, why_it_failed
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR

FIXTURES = Path(__file__).parent / "fixtures" / "verify"
CHECK_LINE = (
    "kvtier: adapter beta: no adapter_config.json in /opt/kvtier/adapters/beta/v3, fetched from s3://acme/beta/ "
    "(weights_version v3): nothing, or not a PEFT adapter, is there; check the source and its pinned version"
)
VLLM_TAIL = """  File "/usr/lib/python3/site-packages/vllm/entrypoints/openai/models/serving.py", line 139, in init_static_loras
    raise ValueError(load_result.error.message)
ValueError: Loading lora beta failed: No adapter found for <path>
/usr/lib/python3/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked \
semaphore objects to clean up at shutdown
  warnings.warn('resource_tracker: There appear to be %d '
"""


def _status(name: str, state: dict[str, Any], last: dict[str, Any] | None = None, restarts: int = 0) -> dict[str, Any]:
    return {"name": name, "state": state, "lastState": last or {}, "restartCount": restarts, "ready": False}


def _crash(name: str, code: int, message: str, restarts: int = 3) -> dict[str, Any]:
    waiting = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}
    return _status(name, waiting, {"terminated": {"exitCode": code, "reason": "Error", "message": message}}, restarts)


def test_a_failing_adapter_check_is_its_own_line() -> None:
    pod = {"status": {"initContainerStatuses": [
        _status("adapter-beta", {"terminated": {"exitCode": 0, "reason": "Completed"}}),
        _crash("adapters-check", 1, CHECK_LINE + "\n"),
    ], "containerStatuses": [_status("engine", {"waiting": {"reason": "PodInitializing"}})]}}  # fmt: skip
    assert failing_containers(pod) == [
        f"init container adapters-check failed (exit 1, CrashLoopBackOff, 3 restarts): {CHECK_LINE}"
    ]


def test_an_engine_that_cannot_start_shows_its_error_line() -> None:
    pod = {"status": {"containerStatuses": [_crash("engine", 1, VLLM_TAIL, restarts=5)]}}
    (line,) = failing_containers(pod)
    assert line == (
        "container engine failed (exit 1, CrashLoopBackOff, 5 restarts): ValueError: Loading lora beta failed: No "
        "adapter found for <path>"
    )


def test_running_and_starting_containers_are_not_failures() -> None:
    restarted = _status("engine", {"running": {}}, {"terminated": {"exitCode": 137, "message": "OOMKilled"}}, 1)
    starting = _status("engine", {"waiting": {"reason": "ContainerCreating"}})
    done = _status("adapter-faq", {"terminated": {"exitCode": 0}})
    for status in ({"containerStatuses": [restarted]}, {"containerStatuses": [starting]},
                   {"initContainerStatuses": [done]}, {}):  # fmt: skip
        assert failing_containers({"status": status}) == []


def test_a_container_that_cannot_be_created_says_why() -> None:
    pull = _status("engine", {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}})
    assert failing_containers({"status": {"containerStatuses": [pull]}}) == [
        'container engine is waiting: ImagePullBackOff: Back-off pulling image "x"'
    ]
    first = _status("adapter-faq", {"terminated": {"exitCode": 2, "message": "fatal error: An error occurred (403)"}})
    assert failing_containers({"status": {"initContainerStatuses": [first]}}) == [
        "init container adapter-faq failed (exit 2): fatal error: An error occurred (403)"
    ]


def test_the_line_that_says_why() -> None:
    assert why_it_failed(f"INFO starting\nTraceback ...\nValueError: x\n{CHECK_LINE}\n") == CHECK_LINE
    assert why_it_failed(VLLM_TAIL) == "ValueError: Loading lora beta failed: No adapter found for <path>"
    assert why_it_failed("one\nlast words\n\n") == "last words"
    assert why_it_failed("") == "no log; read it with kubectl logs --previous"
    assert len(why_it_failed("E" * 1000)) == 300


def test_verify_reports_the_pod_and_fails() -> None:
    """The healthy fixture with one endpoint pod's engine crash-looping: exactly that pod is a problem, exit 1."""
    config = load_checked(CONFIG_DIR, "dev")
    data = json.loads((FIXTURES / "healthy.json").read_text())
    broken = copy.deepcopy(data)
    pod = next(
        p
        for p in broken["pods"]
        if p["metadata"]["namespace"].startswith("kvtier-") and "app" in p["metadata"].get("labels", {})
    )
    container = pod["spec"]["containers"][0]["name"]
    pod["status"]["containerStatuses"] = [_crash(container, 1, VLLM_TAIL)]
    assert verify(config, Snapshot.from_json(data)).ok
    report = verify(config, Snapshot.from_json(broken))
    problems = [f for f in report.findings if not f.ok]
    assert [f.subject for f in problems] == [
        f"{pod['metadata']['namespace'].removeprefix('kvtier-')}/{pod['metadata']['labels']['app']} pod {pod['metadata']['name']}"
    ]
    assert problems[0].message.startswith(f"container {container} failed (exit 1, CrashLoopBackOff, 3 restarts): ")
    assert int(report.exit_code) == 1
