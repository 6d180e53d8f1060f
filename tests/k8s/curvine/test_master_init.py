"""The master's start-up decision (scripts/master-init.sh), run with bash on real directories.

An empty volume is prepared for Curvine's first-start format; a volume with data is never changed; anything in between,
or a config that would format, stops the start with nothing deleted.
"""

from __future__ import annotations

import hashlib
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtier.k8s.curvine import names
from kvtier.k8s.curvine.scripts import MASTER_INIT, script_text
from kvtier.k8s.curvine.toml import cluster_toml
from kvtier.rules import load_checked
from tests.support import CONFIG_DIR


@dataclass
class Volumes:
    meta_root: Path  # the EBS volume mounts
    journal_root: Path
    conf: Path

    @property
    def meta(self) -> Path:
        return self.meta_root / "db"

    @property
    def journal(self) -> Path:
        return self.journal_root / "db"


@pytest.fixture()
def volumes(tmp_path: Path) -> Volumes:
    meta_root, journal_root = tmp_path / "meta", tmp_path / "journal"
    for root in (meta_root, journal_root):
        root.mkdir()
        (root / "lost+found").mkdir()  # what a fresh ext4 volume holds
    conf = tmp_path / "curvine-cluster.toml"
    conf.write_text(cluster_toml(load_checked(CONFIG_DIR, "dev").env))
    return Volumes(meta_root, journal_root, conf)


def run(v: Volumes, script: Path | None = None) -> subprocess.CompletedProcess[str]:
    path = script or v.conf.parent / MASTER_INIT
    if script is None:
        path.write_text(script_text(MASTER_INIT))
    return subprocess.run(
        ["bash", str(path), str(v.meta), str(v.journal), str(v.conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def fake_rocksdb(base: Path) -> None:
    """What RocksDB leaves after a first start: data/CURRENT naming a MANIFEST, plus log and table files."""
    data = base / "data"
    data.mkdir(parents=True)
    (data / "CURRENT").write_text("MANIFEST-000005\n")
    (data / "MANIFEST-000005").write_bytes(b"\x01manifest")
    (data / "000004.log").write_bytes(b"wal" * 100)
    (data / "000009.sst").write_bytes(b"table" * 100)
    (base / "checkpoint").mkdir()


def tree(root: Path) -> dict[str, str]:
    """Every path under root with a content hash (directories marked): equal trees mean nothing changed."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        out[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_empty_volumes_are_prepared_for_the_first_start(volumes: Volumes) -> None:
    result = run(volumes)
    assert result.returncode == 0, result.stderr
    assert "bootstrap" in result.stdout
    for db in (volumes.meta, volumes.journal):
        assert db.is_dir() and not any(db.iterdir()), "an empty dir is what Curvine v0.4.1 formats itself"


def test_volumes_with_data_start_unchanged_and_are_never_formatted(volumes: Volumes) -> None:
    fake_rocksdb(volumes.meta)
    fake_rocksdb(volumes.journal)
    before = {"meta": tree(volumes.meta), "journal": tree(volumes.journal)}
    for _ in range(2):  # a restart, then another
        result = run(volumes)
        assert result.returncode == 0, result.stderr
        assert "start: existing metadata and journal are kept" in result.stdout
        assert {"meta": tree(volumes.meta), "journal": tree(volumes.journal)} == before
    assert (volumes.meta_root / ".kvtier-initialized").is_file()


def test_first_start_then_restart(volumes: Volumes) -> None:
    assert "bootstrap" in run(volumes).stdout
    fake_rocksdb(volumes.meta)  # what the master's first start writes into the prepared dirs
    fake_rocksdb(volumes.journal)
    result = run(volumes)
    assert result.returncode == 0
    assert "start:" in result.stdout
    assert "bootstrap" not in result.stdout


def test_volumes_emptied_after_a_start_are_refused(volumes: Volumes) -> None:
    fake_rocksdb(volumes.meta)
    fake_rocksdb(volumes.journal)
    assert run(volumes).returncode == 0
    for db in (volumes.meta, volumes.journal):
        subprocess.run(["rm", "-rf", str(db)], check=True)
    result = run(volumes)
    assert result.returncode == 1
    assert "held Curvine data before" in result.stderr
    assert not volumes.meta.exists(), "a refused start creates nothing"


@pytest.mark.parametrize(
    ("case", "meta_has_data", "journal_extra"),
    [
        ("meta with data, journal empty", True, None),
        ("a stray file in an empty journal", False, "notes.txt"),
        ("lost+found inside the dir (a mount point used as the dir)", False, "lost+found/"),
    ],
)
def test_mixed_or_invalid_dirs_are_refused_and_kept(
    volumes: Volumes, case: str, meta_has_data: bool, journal_extra: str | None
) -> None:
    if meta_has_data:
        fake_rocksdb(volumes.meta)
    volumes.journal.mkdir()
    if journal_extra is not None:
        target = volumes.journal / journal_extra.rstrip("/")
        target.mkdir() if journal_extra.endswith("/") else target.write_text("x")
    before = {"meta": tree(volumes.meta_root), "journal": tree(volumes.journal_root)}
    result = run(volumes)
    assert result.returncode == 1, case
    assert "refusing to start" in result.stderr
    assert {"meta": tree(volumes.meta_root), "journal": tree(volumes.journal_root)} == before


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace("format_master = false", "format_master = true"),
        lambda text: text.replace("format_worker = false\n", ""),
        lambda text: text.replace("format_master = false", "# format_master = false"),
    ],
    ids=["format_master true", "format_worker absent", "format_master commented out"],
)
def test_a_config_that_would_format_is_refused(volumes: Volumes, edit: object) -> None:
    assert callable(edit)
    fake_rocksdb(volumes.meta)
    fake_rocksdb(volumes.journal)
    volumes.conf.write_text(edit(volumes.conf.read_text()))
    before = tree(volumes.meta)
    result = run(volumes)
    assert result.returncode == 2
    assert "refusing to start" in result.stderr
    assert tree(volumes.meta) == before


def test_the_toml_dirs_are_below_the_volume_mounts() -> None:
    doc = tomllib.loads(cluster_toml(load_checked(CONFIG_DIR, "dev").env))
    assert doc["master"]["meta_dir"] == names.META_DIR
    assert doc["journal"]["journal_dir"] == names.JOURNAL_DIR
    assert names.META_DIR.startswith(names.META_MOUNT + "/")
    assert names.JOURNAL_DIR.startswith(names.JOURNAL_MOUNT + "/")
