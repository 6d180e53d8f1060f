"""Issue 29 (in issue 26's files): `status`, `preflight` and `verify` against endpoints that never answer, a malformed
AWS config file and a failing `aws eks get-token`: one "contacting ..." line, then one line naming the cause, exit 3,
in bounded time. The servers are real sockets on 127.0.0.1 that accept and never answer; nothing leaves the machine.
"""

from __future__ import annotations

import json
import socket
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvtier.cli import main as cli
from kvtier.ops import aws, kube
from tests.support import CONFIG_DIR

BOUND_S = 30.0  # the target: well under this


@contextmanager
def silent_server() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers; stopped (sockets closed, thread
    joined) on every path."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                held.append(connection)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        server.close()


@pytest.fixture()
def offline_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Static test credentials, no config file of the user's, no instance metadata."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("contacting ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "ERROR:root" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["status", "preflight"])
def test_aws_that_never_answers_fails_in_bounded_time(
    offline_aws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    with silent_server() as address:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{address}")
        start = time.monotonic()
        code = cli([command, "-e", "byoc", "--config-dir", str(CONFIG_DIR)])
        elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 3, err
    assert elapsed < BOUND_S, elapsed
    assert f"contacting AWS in us-west-2 (http://{address})" in err
    assert "cannot reach AWS in " in _one_error_line(err)


@pytest.mark.parametrize("command", ["status", "preflight"])
def test_a_malformed_aws_config_is_one_line(
    offline_aws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    config = offline_aws / "config"
    config.write_text("[default\nregion = us-west-2\n")  # an unclosed section header
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    assert cli([command, "-e", "byoc", "--config-dir", str(CONFIG_DIR)]) == 3
    line = _one_error_line(capsys.readouterr().err)
    assert f"Unable to parse config file: {config}" in line and "fix that file" in line


def test_client_config_is_short() -> None:
    config = aws.client_config()
    assert (config.connect_timeout, config.read_timeout) == (aws.CONNECT_TIMEOUT_S, aws.READ_TIMEOUT_S)
    assert config.retries == {"mode": "standard", "total_max_attempts": aws.MAX_ATTEMPTS}
    assert aws.MAX_ATTEMPTS * (aws.CONNECT_TIMEOUT_S + aws.READ_TIMEOUT_S) < BOUND_S + 10


# ---- verify: the Kubernetes API ------------------------------------------------------------------------------------


def _kubeconfig(path: Path, server: str, user: dict[str, object]) -> Path:
    import yaml

    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return path


def test_an_api_server_that_never_answers_fails_in_bounded_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with silent_server() as address:
        config = _kubeconfig(tmp_path / "kubeconfig", f"http://{address}", {"token": "t"})
        monkeypatch.setenv("KUBECONFIG", str(config))
        start = time.monotonic()
        code = cli(["verify", "-e", "dev", "--config-dir", str(CONFIG_DIR)])
        elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 3, err
    assert elapsed < BOUND_S, elapsed
    assert f"contacting the Kubernetes API (http://{address}) ..." in err
    line = _one_error_line(err)
    assert "does not answer within 4 s to connect and 8 s to read, 2 attempts" in line
    assert (kube.CONNECT_TIMEOUT_S + kube.READ_TIMEOUT_S) * (kube.RETRIES + 1) < BOUND_S


def test_a_failing_get_token_is_the_reported_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`aws eks get-token` with expired credentials: before, the client logged `ERROR:root:` and kvtier blamed the
    API server 83 s later. The plugin here is a real executable that fails as the AWS CLI does."""
    plugin = tmp_path / "fake-aws"
    plugin.write_text(
        "#!/bin/sh\necho 'An error occurred (ExpiredToken) when calling the GetCallerIdentity operation: "
        "The security token included in the request is expired' >&2\nexit 255\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_user: dict[str, object] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": str(plugin),
            "args": ["eks", "get-token", "--cluster-name", "kvtier-dev"],
            "interactiveMode": "Never",
        }
    }
    with silent_server() as address:
        config = _kubeconfig(tmp_path / "kubeconfig", f"http://{address}", exec_user)
        monkeypatch.setenv("KUBECONFIG", str(config))
        start = time.monotonic()
        code = cli(["verify", "-e", "dev", "--config-dir", str(CONFIG_DIR)])
        elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert code == 3, err
    assert elapsed < 5.0, elapsed  # no request is sent without credentials
    line = _one_error_line(err)
    assert "credential plugin failed" in line and "ExpiredToken" in line


@pytest.mark.parametrize("as_json", [False, True])
def test_probe_against_a_closed_port_is_one_line_as_plain_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    """Issue 39: `verify --probe` printed a table wrapping urllib3's MaxRetryError over ~12 lines; now the same one
    line and exit 3 as plain `verify`. Nothing listens on the port, so the connection is refused at once."""
    from kvtier.bench.testserver import free_port

    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", f"http://{address}", {"token": "t"})))
    json_flag = ["--json"] if as_json else []
    seen: list[str] = []
    for probe in ([], ["--probe"]):
        code = cli(["verify", "-e", "dev", "--config-dir", str(CONFIG_DIR), *probe, *json_flag])
        out, err = capsys.readouterr()
        assert code == 3, (out, err)
        if as_json:  # the error object of every command, no probe results
            error = json.loads(out)["error"]
            assert error["exit_code"] == 3 and "results" not in json.loads(out), out
            seen.append(error["message"])
        else:
            assert out == "", out  # no table
            seen.append(_one_error_line(err))
    plain, probed = seen
    assert probed == plain, seen
    assert "does not answer" in probed and "Max retries" not in probed, probed
