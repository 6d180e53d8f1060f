"""The yardstick of `kvtier simulate`'s speed: the simulator's cache-hit rule and nothing else, in plain Python over
the same Mooncake trace, so that `tools/benchsim.py` can say what the whole command costs beyond it.

    python -m tools.barereplay TRACE --l0-units N [--l1-units N] [--l2-units N] [--replicas 4] [--max-model-len 16384]

One line at a time (json.loads, no checks): requests longer than --max-model-len are skipped, the rest go to the
replicas in turn; a request hits the longest prefix of its 512-token blocks held in its replica's L0 or L1 or in the
shared L2, then stores every block in all three at once (no queues, no TTFT, no partial chunks, no routing). L0 and L1
are least-recently-used (an OrderedDict; L1 without a size is a set: nothing is ever evicted); L2 keeps blocks in
write order and is swept as kvtier's janitor does, every 30 s of trace time: older than --max-age-s first, then, over
--l2-units, the oldest down to 90% of it. Prints the share of blocks hit. Standard library only, so its process is
the smallest a replay can be.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

SWEEP_S = 30.0
TARGET = 0.9


def lru_store(tier: OrderedDict[int, None], ids: list[int], capacity: int) -> None:
    for block in reversed(ids):
        if block in tier:
            tier.move_to_end(block)
        else:
            tier[block] = None
    while len(tier) > capacity:
        tier.popitem(last=False)


def replay(path: str, replicas: int, l0: int, l1: int | None, l2: int | None, limit: int, age_s: float) -> float:
    sets: list[set[int]] = [set() for _ in range(replicas)]
    tiers0: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(replicas)]
    tiers1: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(replicas)]
    pool: OrderedDict[int, float] = OrderedDict()  # block -> written at, oldest first
    hit = total = served = 0
    sweep = SWEEP_S
    with Path(path).open("rb") as trace:
        for line in trace:
            request = json.loads(line)
            if request["input_length"] > limit:
                continue
            now, ids = request["timestamp"] / 1000.0, request["hash_ids"]
            while sweep <= now:
                while pool and next(iter(pool.values())) < sweep - age_s:
                    pool.popitem(last=False)
                if l2 is not None and len(pool) > l2:
                    while len(pool) > int(l2 * TARGET):
                        pool.popitem(last=False)
                sweep += SWEEP_S
            replica = served % replicas
            served += 1
            matched = 0
            held0 = tiers0[replica]
            held1 = sets[replica] if l1 is None else tiers1[replica]
            for block in ids:
                if block in held0 or block in held1 or block in pool:
                    matched += 1
                else:
                    break
            lru_store(held0, ids, l0)
            if l1 is None:
                sets[replica].update(ids)
            else:
                lru_store(tiers1[replica], ids, l1)
            hit += matched
            total += len(ids)
            for block in ids:
                if block in pool:
                    pool.move_to_end(block)
                pool[block] = now
    return hit / total if total else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.barereplay", description=__doc__)
    parser.add_argument("trace")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--l0-units", type=int, required=True, help="L0 blocks per replica")
    parser.add_argument("--l1-units", type=int, help="L1 blocks per replica (default: unbounded)")
    parser.add_argument("--l2-units", type=int, help="L2 budget in blocks (default: unbounded)")
    parser.add_argument("--max-model-len", type=int, default=16384)
    parser.add_argument("--max-age-s", type=float, default=24 * 3600.0)
    args = parser.parse_args(argv)
    rate = replay(
        args.trace, args.replicas, args.l0_units, args.l1_units, args.l2_units, args.max_model_len, args.max_age_s
    )
    print(f"{rate:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
