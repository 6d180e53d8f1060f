"""The vLLM router for the real-router test: `vllm-router` from PyPI, installed once per lock into the cache folder.
(`ensure` also installs the other pinned PyPI packages an engine test runs with the engine venv's python, such as
the operator image's LMCache for the Tiered Storage key test: tiered_storage_keys.py.)

pip installs requirements-router.txt with `--no-deps --target` into `${XDG_CACHE_HOME:-~/.cache}/kvtier/router-<digest>`
(about 25 MB, seconds); the router then runs with the engine venv's python, which has the rest of its launcher's
requirements. Not requirements-engine.txt: a change there rebuilds the 4 GB engine venv; not the dev venv: `make test`
never starts a router. A folder is used only after `import vllm_router_rs, orjson` worked; a failed one is removed.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.engine.venv import PIP_NET, VenvError, cache_root

LOCK = Path(__file__).resolve().parent / "requirements-router.txt"
SMOKE = "import vllm_router_rs, orjson, vllm_router.launch_router"
INSTALL_TIMEOUT_S = 300
DONE = ".kvtier-complete"


def pins(lock_text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lock_text.splitlines():
        requirement = line.split("#", 1)[0].strip()
        if requirement:
            name, _, version = requirement.partition("==")
            found[name.strip()] = version.strip()
    return found


def folder_for(lock_text: str, name: str = "router") -> Path:
    return cache_root() / f"{name}-{hashlib.sha256(lock_text.encode()).hexdigest()[:16]}"


def smoke(python: str, folder: Path, code: str = SMOKE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code], env={"PYTHONPATH": str(folder)}, capture_output=True, text=True, timeout=120, check=False
    )


def ensure(python: str, lock: Path = LOCK, *, name: str = "router", smoke_code: str = SMOKE) -> Path:
    """The folder to put on the PYTHONPATH of what `lock` installs (the router by default); installs it first if
    this lock has none yet, and keeps it only once `smoke_code` ran there."""
    text = lock.read_text(encoding="utf-8")
    folder = folder_for(text, name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if (folder / DONE).exists():
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        cmd = [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            *PIP_NET,
            "--target",
            str(folder),
            "-r",
            str(lock),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            shutil.rmtree(folder, ignore_errors=True)
            raise VenvError(f"installing {lock.name} took over {INSTALL_TIMEOUT_S} s; check PyPI access") from None
        if done.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise VenvError(f"installing {lock.name} failed: {(done.stderr or done.stdout).strip()[-800:]}")
        check = smoke(python, folder, smoke_code)
        if check.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise VenvError(f"{lock.name} does not import with {python}: {check.stderr.strip()[-800:]}")
        (folder / DONE).write_text("ok\n", encoding="utf-8")
        return folder
