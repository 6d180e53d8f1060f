"""Node disk (issue 38): on every GPU group kvtier creates, what its fullest packing of engine pods writes (their
ephemeral-storage requests: download, adapters, scratch; kvtier/sizing.py `engine_disk`) plus the images those pods
and the node's other pods pull must fit the group's EBS volume (`ebs_gb`) below the kubelet's eviction threshold.

The lifecycle scripts put the kubelet's and containerd's directories on that volume (`/opt/sagemaker`), so pods'
emptyDirs, container layers and images share it; when it fills up, the kubelet evicts pods by disk usage
(docs/references.md "Issue 38"). An existing cluster's volumes are the owner's: kvtier does not know their size and
checks nothing there.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvtier.catalog import DISK_USABLE_FRACTION, ENGINE_IMAGE_DISK_GB, NODE_OTHER_IMAGES_GB, Model
from kvtier.connectors import engine_image
from kvtier.errors import Problem
from kvtier.rules.context import Context, Findings
from kvtier.rules.node_fit import EnginePod, fullest
from kvtier.sizing import engine_disk

GIB = 1024**3
GB = 1000**3


def check_node_disk(ctx: Context, found: Findings, models: Mapping[tuple[str, int], Model]) -> None:
    if ctx.env.hyperpod.existing is not None:
        return
    for group in ctx.env.groups("gpu"):
        instance = ctx.env.instance(group.instance_type)
        pods: list[tuple[EnginePod, int]] = []
        images: dict[str, str] = {}  # pod label -> its engine image
        why: dict[str, str] = {}
        for site in ctx.sites():
            e = site.endpoint
            model = models.get((site.lob.name, site.index))
            if e.instance_type != instance.name or e.tensor_parallel > instance.gpus or model is None:
                continue
            disk = engine_disk(e, model)
            pods.append((EnginePod(site.label, e.tensor_parallel, 0, disk.total_gib * GIB), e.max_replicas))
            images[site.label] = engine_image(e)
            why[site.label] = f"{disk.total_gib} GiB ({disk.why})"
        packed = fullest(instance.gpus, pods, lambda p: p.memory_bytes)  # memory_bytes carries the disk here
        if not packed:
            continue
        requested = sum(p.memory_bytes for p in packed) / GB
        distinct = sorted({images[p.label] for p in packed})
        image_gb = len(distinct) * ENGINE_IMAGE_DISK_GB.value + NODE_OTHER_IMAGES_GB.value
        need = requested + image_gb
        usable = group.ebs_volume_gb * DISK_USABLE_FRACTION.value
        if need <= usable:
            continue
        counts: dict[str, int] = {}
        for pod in packed:
            counts[pod.label] = counts.get(pod.label, 0) + 1
        engines = ", ".join(f"{n} x {label} {why[label]}" for label, n in sorted(counts.items()))
        at_least = -(-need // DISK_USABLE_FRACTION.value)
        found.errors.append(
            Problem(
                ctx.env_file,
                f"{ctx.group_path(group)}.ebs_gb",
                f"a {instance.name} node's {group.ebs_volume_gb} GB EBS volume holds {usable:.0f} GB below the "
                f"kubelet's eviction threshold ({1 - DISK_USABLE_FRACTION.value:.0%} free), but its fullest packing "
                f"writes {requested:.0f} GB ({engines}) and pulls {image_gb:.0f} GB of images ({len(distinct)} engine "
                f"image(s) x {ENGINE_IMAGE_DISK_GB.value:g} GB, {NODE_OTHER_IMAGES_GB.value:g} GB of others): the "
                "kubelet would evict pods for disk pressure",
                f"raise ebs_gb to at least {at_least:.0f}, or put fewer or smaller engines on this group",
            )
        )
