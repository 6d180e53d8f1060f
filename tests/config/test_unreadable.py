"""Files and folders that cannot be read as config: a FIFO, a device, a folder the user may not search. Each gives one
line naming the file or folder and the fix, exit 2, in bounded time and memory.

These run `python -m kvtier validate` in a child process: a hang is then a timeout (the test fails in seconds instead
of blocking the suite), endless reading hits a memory limit, and permissions are real. Root ignores permission bits,
so when the tests run as root the child drops the two capabilities that let it (CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH, from its bounding set before exec, prctl(2) PR_CAPBSET_DROP): it stays root, and a mode-000
folder stops it as it stops any user.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ROOT

TIMEOUT_S = 60  # a validate takes about a second; a hang shows as a timeout long before the suite's own limits
MEMORY_LIMIT = 1024**3  # address space of the child: reading /dev/zero without a cap fails here, not in the machine
_PR_CAPBSET_DROP = 24  # linux/prctl.h
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2  # linux/capability.h


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


def validate(config_dir: Path) -> tuple[int, str]:
    """(exit code, stderr) of `kvtier validate --config-dir config_dir`, run as described above."""
    done = subprocess.run(
        [sys.executable, "-m", "kvtier", "validate", "--config-dir", str(config_dir)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=config_dir.parent,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_limit_child,
        check=False,
    )
    return done.returncode, done.stderr.strip()


def _one_line(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.fixture()
def restore_modes(config_copy: Path) -> Iterator[Path]:
    """The config copy; every folder gets its mode back afterwards, so pytest can remove it."""
    yield config_copy
    for folder in [config_copy, *config_copy.rglob("*")]:
        if not folder.is_symlink():
            folder.chmod(0o755 if folder.is_dir() else 0o644)


def test_a_fifo_environment_file_is_refused_without_waiting(config_copy: Path) -> None:
    env = config_copy / "environments" / "dev.yaml"
    env.unlink()
    os.mkfifo(env)
    err = _one_line(*validate(config_copy))
    assert err.endswith(f"{env}: is a named pipe (FIFO), not a regular file; replace it with the environment file")


def test_a_fifo_lob_file_is_refused_without_waiting(config_copy: Path) -> None:
    lob = config_copy / "lobs" / "retail.yaml"
    lob.unlink()
    os.mkfifo(lob)
    err = _one_line(*validate(config_copy))
    assert err.endswith(f"{lob}: is a named pipe (FIFO), not a regular file; replace it with the line of business file")


@pytest.mark.parametrize("file", ["environments/dev.yaml", "lobs/retail.yaml"])
def test_a_link_to_dev_zero_is_refused_unread(config_copy: Path, file: str) -> None:
    path = config_copy / file
    path.unlink()
    path.symlink_to("/dev/zero")
    err = _one_line(*validate(config_copy))
    assert f"{path}: is a character device, not a regular file; replace it with the " in err


@pytest.mark.parametrize("folder", ["lobs", "environments"])
def test_a_folder_the_user_cannot_search_is_named(restore_modes: Path, folder: str) -> None:
    blocked = restore_modes / folder
    blocked.chmod(0)
    err = _one_line(*validate(restore_modes))
    assert err.startswith(f"kvtier validate: {blocked}: folder cannot be searched (Permission denied), so ")
    assert err.endswith(f"; give your user read and search permission on the folder (chmod u+rx {blocked})")


def test_an_unreadable_file_is_named(restore_modes: Path) -> None:
    lob = restore_modes / "lobs" / "retail.yaml"
    lob.chmod(0)
    err = _one_line(*validate(restore_modes))
    assert err.endswith(
        f"{lob}: cannot be read (Permission denied); give your user read permission on it (and search "
        "permission on its folders)"
    )


def test_an_unsearchable_config_folder_is_named(restore_modes: Path) -> None:
    restore_modes.chmod(0)
    err = _one_line(*validate(restore_modes))
    assert f"{restore_modes}: folder cannot be searched (Permission denied)" in err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_read_yaml_itself_refuses_a_fifo_or_a_device(tmp_path: Path, kind: str) -> None:
    """The reader checks the open descriptor too, so a file swapped for a pipe after the loader's checks still cannot
    block or fill memory."""
    path = tmp_path / "swapped.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    script = (
        "import sys\nfrom pathlib import Path\nfrom kvtier.config.yamlio import read_yaml\nfrom kvtier.errors import "
        "ConfigError\ntry:\n    read_yaml(Path(sys.argv[1]), 'swapped.yaml')\nexcept ConfigError as err:\n    print(err)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_limit_child,
        check=False,
    )
    shown = "a named pipe (FIFO)" if kind == "fifo" else "a character device"
    assert done.stdout.strip() == f"swapped.yaml: is {shown}, not a regular file; replace it with the config file", (
        done.stderr[-2000:]
    )
