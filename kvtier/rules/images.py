"""Image pins (issue 34): a tag can be pushed again, so what runs under it can change without any change here.

In a `production: true` environment every engine image and every image that runs with host access on the GPU nodes
(Curvine's masters and workers, its CSI node plugin, which also runs the FUSE mounts, and the kubelet registrar next
to it) must be given by digest (`repo:tag@sha256:<hex>`): one error each, naming the field. Elsewhere one warning
says which images are tags. The L2 identity names an engine image by its digest when it has one
(kvtier/config/base.py `image_content`), so a re-pushed tag can never keep an identity directory.
"""

from __future__ import annotations

from kvtier.config.base import image_digest
from kvtier.connectors import engine_image
from kvtier.errors import Problem
from kvtier.rules.context import Context, Findings

# Curvine images (`curvine.images.<field>`) of pods with host access on every GPU node.
HOST_ACCESS_IMAGES = {
    "curvine": "Curvine masters and workers (the workers write the GPU nodes' NVMe)",
    "csi": "Curvine's CSI node plugin (privileged) and the FUSE mounts it starts",
    "node_driver_registrar": "the CSI node plugin's registrar (the kubelet's plugin registration directory)",
}
FIX = 'pin the digest you pulled, as repository:tag@sha256:<digest> (docs/l2.md "Image digests" says how to find it)'


def check_image_pins(ctx: Context, found: Findings) -> None:
    tags: list[tuple[str, str, str, str]] = []  # (file, field, image, what runs it)
    for site in ctx.sites():
        tags.append((site.file, site.at("image"), engine_image(site.endpoint), f"the engine of {site.label}"))
    if ctx.env.hyperpod.installs("curvine"):
        images = ctx.env.curvine.images
        for name, what in HOST_ACCESS_IMAGES.items():
            tags.append((ctx.env_file, f"curvine.images.{name}", getattr(images, name), what))
    tags = [t for t in tags if image_digest(t[2]) is None]
    if not tags:
        return
    if ctx.env.production:
        for file, field, image, what in tags:
            found.errors.append(
                Problem(
                    file,
                    field,
                    f"{image} is a tag, and {ctx.env_file} sets production: true: whoever can push to that "
                    f"repository changes what runs as {what}",
                    FIX,
                )
            )
        return
    engines = [what.removeprefix("the engine of ") for file, _, _, what in tags if file != ctx.env_file]
    host = [field.removeprefix("curvine.images.") for file, field, _, _ in tags if file == ctx.env_file]
    listed = [*(f"{name}'s engine" for name in engines), *([f"curvine.images {', '.join(host)}"] if host else [])]
    found.warnings.append(
        Problem(
            ctx.env_file,
            "production",
            f"{len(tags)} image(s) run by a tag, which can be pushed again: {'; '.join(listed)}",
            'pin each to the digest you pulled (repository:tag@sha256:<digest>, docs/l2.md "Image digests"); '
            "production: true makes each an error",
        )
    )
