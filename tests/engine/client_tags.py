"""Client-supplied cache tags with a real engine (issue 24): they must not fork the L2.

LMCache 0.4.3 keys a request's chunks by its `kv_transfer_params` entries `lmcache.tag.<name>` too (docs/l2.md), so
without kvtier's connector module a tagged request misses the shared chunks and writes its own copies. As a phase on
the session's shared engines (lmcache_replicas.py), engine A, kvtier's standalone rendering of the example endpoint
(`render.standalone`: the connector module comes from the ConfigMap, on the PYTHONPATH kvtier renders), gets, in
order, prompts of this phase's own:
1. an untagged prompt, cold: LMCache stores its full chunks (the shared files);
2. the same tokens with a tag: LMCache's lookup must find every one of those chunks (LMCache's own "hit tokens" line;
   on one engine vLLM's L0 holds the prompt too, so vLLM's external-hit counter cannot tell);
3. a new prompt with another tag: it must store exactly its own full chunks, under untagged names (no
   `@<name>%<value>` key suffix), and nothing else (no tagged copy of step 2's chunks).

`KVTIER_TAGS_BREAK=unprotected` renders vLLM's own `LMCacheConnectorV1` instead (the rendering before issue 24), for
the shared engines (lmcache_replicas.py reads it): steps 2 and 3 then fail (docs/development.md).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kvtier.rules import load_checked
from tests.engine import render
from tests.engine.scenario import ENDPOINT, ENV_NAME, LOB, PROMPT_TOKENS, REPO, Reading, ask, prompt_ids

if TYPE_CHECKING:
    from tests.engine.lmcache_replicas import Replicas

TAG = {"lmcache.tag.tenant": "mallory"}
OTHER_TAG = {"lmcache.tag.tenant": "eve"}
BREAK_ENV = "KVTIER_TAGS_BREAK"
BREAKS = ("unprotected",)
STOCK_CONNECTOR = "LMCacheConnectorV1"  # vLLM's registered LMCache connector


@dataclass
class TagsObserved:
    chunk_size: int  # the endpoint's `cache.chunk_size` in the config file
    full_chunk_tokens: int
    untagged: Reading
    tagged_same: Reading
    tagged_new: Reading
    connector: str  # the kv_connector the engine was started with
    timings_s: dict[str, float] = field(default_factory=dict)


def unprotected(rendered: render.Rendered) -> render.Rendered:
    """The rendering with vLLM's own LMCache connector in place of kvtier's (the self-check of the checks)."""
    args = list(rendered.args)
    at = args.index("--kv-transfer-config") + 1
    config = json.loads(args[at])
    config.pop("kv_connector_module_path")
    args[at] = json.dumps(config | {"kv_connector": STOCK_CONNECTOR})
    return dataclasses.replace(rendered, args=tuple(args))


def rendering(break_what: str | None) -> render.Rendered:
    if break_what not in (None, *BREAKS):
        raise ValueError(f"{BREAK_ENV}={break_what!r}: use one of {', '.join(BREAKS)}")
    config = load_checked(REPO / "config", ENV_NAME)
    rendered = render.standalone(config, LOB, render.endpoint_of(config, LOB, ENDPOINT))
    return unprotected(rendered) if break_what else rendered


def connector_of(rendered: render.Rendered) -> str:
    args = list(rendered.args)
    name: str = json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector"]
    return name


def client_tags(group: Replicas) -> TagsObserved:
    total = time.monotonic()
    chunk = group.endpoint.cache.chunk_size
    seed = group.phase("client-tags")
    first, second = prompt_ids(f"{seed}:0"), prompt_ids(f"{seed}:1")
    engine, l2_root = group.engines["A"], group.l2_root
    untagged = ask(engine, first, l2_root, wait_store=True)
    tagged_same = ask(engine, first, l2_root, wait_store=False, extra={"kv_transfer_params": dict(TAG)})
    tagged_new = ask(engine, second, l2_root, wait_store=True, extra={"kv_transfer_params": dict(OTHER_TAG)})
    return TagsObserved(
        chunk_size=chunk,
        full_chunk_tokens=PROMPT_TOKENS // chunk * chunk,
        untagged=untagged,
        tagged_same=tagged_same,
        tagged_new=tagged_new,
        connector=connector_of(group.replica),
        timings_s={"total": time.monotonic() - total},
    )


# --- checks, plain functions of what was observed (tests/engine/test_client_tags.py runs them on fakes too) ---


def _data(files: list[str]) -> list[str]:
    return [f for f in files if f.endswith(".data")]


def untagged_writer_stored(observed: TagsObserved) -> None:
    r = observed.untagged
    chunks = observed.full_chunk_tokens // observed.chunk_size
    assert r.lmcache_hit_tokens in ([0], []), f"the first request was not cold: {r}"
    assert len(_data(r.new_l2_files)) == chunks, f"expected {chunks} chunk files, found {r.new_l2_files}"


def tagged_request_hits_the_shared_chunks(observed: TagsObserved) -> None:
    r = observed.tagged_same
    full = observed.full_chunk_tokens
    assert r.lmcache_hit_tokens == [full], (
        f"a request tagged {TAG} found {r.lmcache_hit_tokens} tokens in LMCache, expected [{full}] (the chunks the "
        f"untagged request stored): the tag forked the cache key ({observed.connector})"
    )


def tagged_request_writes_no_forked_files(observed: TagsObserved) -> None:
    """The new prompt's chunks, under the same kind of name as untagged ones; no tagged copy of anything."""
    chunks = observed.full_chunk_tokens // observed.chunk_size
    written = _data(observed.tagged_same.new_l2_files + observed.tagged_new.new_l2_files)
    tagged = [f for f in written if "%" in f]  # LMCache's key suffix `@<tag>%<value>`
    assert not tagged, f"tagged requests wrote tag-keyed files ({observed.connector}): {tagged}"
    assert len(written) == chunks, f"expected only the new prompt's {chunks} chunk files, found {written}"
    shape = {Path(f).name.count("@") for f in _data(observed.untagged.new_l2_files)}
    assert {Path(f).name.count("@") for f in written} == shape, f"{written} are not named like untagged chunks"
