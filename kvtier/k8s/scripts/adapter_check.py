"""Check the fetched LoRA adapters before vLLM starts (issue 35): one line per problem, then exit 1, so the pod never
starts the engine on an adapter that is missing, not a PEFT LoRA adapter, of another rank than the config says, or
trained on another model; `kvtier verify` shows the line (the container's termination message).

Runs in the engine image as the last init container: `python3 -c <this file>`, with `KVTIER_ADAPTERS` a JSON list of
`{"name", "path", "source", "rank", "base_model"}` (`base_model`: the endpoint's model to compare the adapter's own
`base_model_name_or_path` with, or null when the config names the adapter's base model itself). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

SPEC_VAR = "KVTIER_ADAPTERS"
WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def problem(adapter: dict[str, Any]) -> str | None:
    """What is wrong with one fetched adapter, as one line, or None."""
    name, path, source = adapter["name"], Path(adapter["path"]), adapter["source"]
    config_path = path / "adapter_config.json"
    if not config_path.is_file():
        return (
            f"adapter {name}: no adapter_config.json in {path}, fetched from {source}: nothing, or not a PEFT "
            "adapter, is there; check the source and its pinned version"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"adapter {name}: {config_path} is not readable JSON ({err}); fetch it again from {source}"
    if not isinstance(config, dict) or str(config.get("peft_type", "LORA")).upper() != "LORA":
        return f"adapter {name}: {source} is not a LoRA adapter (adapter_config.json peft_type {config.get('peft_type')!r})"
    if not any((path / w).is_file() for w in WEIGHTS):
        return f"adapter {name}: {source} has adapter_config.json but no {' or '.join(WEIGHTS)}"
    ranks = [config.get("r"), *(config.get("rank_pattern") or {}).values()]
    rank = max((r for r in ranks if isinstance(r, int)), default=None)
    if rank != adapter["rank"]:
        return (
            f"adapter {name}: its rank is {rank} (adapter_config.json r and rank_pattern), the config says "
            f"{adapter['rank']}; set rank: {rank} (and lora.max_lora_rank at least that)"
        )
    trained = config.get("base_model_name_or_path")
    expected = adapter.get("base_model")
    hub_id = isinstance(trained, str) and "/" in trained and not trained.startswith(("/", "."))
    if expected and hub_id and trained != expected:
        return (
            f"adapter {name} was trained on {trained} (adapter_config.json base_model_name_or_path), not the "
            f"endpoint's model {expected}; serve it on an endpoint of that model, or set base_model: {expected} on "
            "the adapter if it fits this one"
        )
    return None


def main() -> int:
    try:
        adapters = json.loads(os.environ[SPEC_VAR])
    except (KeyError, ValueError) as err:
        print(f"kvtier: {SPEC_VAR} is missing or not JSON ({err}); render the pod with kvtier", file=sys.stderr)
        return 1
    problems = [p for p in map(problem, adapters) if p]
    for line in problems:
        print(f"kvtier: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"kvtier: adapters ready: {', '.join(a['name'] for a in adapters)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
