"""The day-2 guard: compare a new synth with an earlier one and name the changes that replace or break things.

Refused unless `--allow-replacement`:
- a change to a create-only property of the HyperPod cluster (CloudFormation replaces the cluster, and with it
  every node): `ClusterName`, `VpcConfig`, `Orchestrator/Eks` (AWS::SageMaker::Cluster createOnlyProperties,
  cfn-lint 1.58.0's registry schema, docs/references.md "Foundation");
- a change of the Curvine master count (Raft membership is fixed at first start; the chart refuses it upstream);
- any change in an operator-mode endpoint's `intelligentRoutingSpec` (immutable once set, so the operator
  rejects the update; the endpoint must be replaced);
- an EKS access entry whose principal changes under the same logical ID, or a principal whose entry moves to another
  logical ID: `PrincipalArn` is create-only, CloudFormation creates the replacement before it deletes the old entry,
  and EKS allows one entry per principal, so the create fails with 409 and the stack rolls back (issue 37). The fix
  names the `eks.index_keyed_admins` list that keeps the deployed ids.

Reported, never refused: what issue 33 adds to a running environment, per stack: NetworkPolicies, Kyverno admission
rules and changed Pod Security labels (each starts refusing traffic or objects at the apply); a standalone endpoint that turns autoscaling on (its Deployment loses `replicas`, so an apply
may scale it to one pod once before KEDA's autoscaler takes over; Kubernetes "Migrating Deployments and StatefulSets
to horizontal autoscaling", docs/references.md "Issue 27 (part A)"); an endpoint whose L2 identity changes (model, weights, dtype, tensor parallel, chunk size,
image and its LMCache, ...: kvtier/connectors/). Its pods move to a new, empty L2 directory (on Tiered Storage: keys
from a new hash seed), so its L2 starts cold; the old one is left to the janitor. The notice names each fact that moved, with its old and new value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtier.connectors import CONNECTORS, identity_connector
from kvtier.naming import L2_IDENTITY_ANNOTATION, L2_IDENTITY_FACTS_ANNOTATION
from kvtier.serving import L2_MARKER

HYPERPOD_TYPE = "AWS::SageMaker::Cluster"
HYPERPOD_CREATE_ONLY = (("ClusterName",), ("VpcConfig",), ("Orchestrator", "Eks"))
CURVINE_MASTERS = ("StatefulSet", "curvine", "curvine-master")
IEC_KIND = "InferenceEndpointConfig"
ACCESS_ENTRY_TYPE = "AWS::EKS::AccessEntry"
# The logical id kvtier gave an admin's entry while ids were list positions: construct `Admin<n>` under `Eks`, plus
# CDK's 8-character path hash (kvtier/constructs/eks.py keeps it for the principals in `eks.index_keyed_admins`).
INDEX_KEYED_ENTRY = re.compile(r"^EksAdmin(\d+)[0-9A-F]{8}$")
L2_IDENTITY_KINDS = (IEC_KIND, "Deployment")  # where the charts put the endpoint's identity (either mode)


@dataclass(frozen=True)
class Change:
    stack: str
    what: str
    before: Any
    after: Any
    why: str

    def __str__(self) -> str:
        return f"{self.stack}: {self.what}: {json.dumps(self.before)} -> {json.dumps(self.after)}; {self.why}"


def templates(assembly: Path) -> dict[str, dict[str, Any]]:
    """Stack name -> template, from a cdk.out folder (its manifest names the stacks). Raises ValueError, naming the
    file, when the folder is not a readable synth output."""
    where = assembly / "manifest.json"
    try:
        manifest = json.loads(where.read_text(encoding="utf-8"))
        out: dict[str, dict[str, Any]] = {}
        for name, artifact in manifest.get("artifacts", {}).items():
            if artifact.get("type") == "aws:cloudformation:stack":
                where = assembly / artifact["properties"]["templateFile"]
                out[artifact.get("displayName", name)] = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{where}: not readable as a CDK synth output ({err})") from None
    return out


def manifests(template: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Kubernetes objects applied by a template (the `Manifest` JSON of its Kubernetes resources)."""
    for resource in template.get("Resources", {}).values():
        raw = resource.get("Properties", {}).get("Manifest")
        if isinstance(raw, dict) and "Fn::Join" in raw:  # tokens inside JSON strings: stand-in text keeps it JSON
            raw = "".join(part if isinstance(part, str) else "TOKEN" for part in raw["Fn::Join"][1])
        if isinstance(raw, str):
            try:
                yield from json.loads(raw)
            except json.JSONDecodeError:
                continue


def _dig(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _hyperpod(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k: v.get("Properties", {}) for k, v in template.get("Resources", {}).items() if v["Type"] == HYPERPOD_TYPE}


def _objects(template: dict[str, Any], kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (o.get("metadata", {}).get("namespace", ""), o.get("metadata", {}).get("name", "")): o
        for o in manifests(template)
        if o.get("kind") == kind
    }


def _access_entries(template: dict[str, Any]) -> dict[str, str]:
    """Logical id -> principal ARN of every access entry whose principal is a literal (the admins)."""
    return {
        logical_id: resource["Properties"]["PrincipalArn"]
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") == ACCESS_ENTRY_TYPE
        and isinstance(resource.get("Properties", {}).get("PrincipalArn"), str)
    }


def _entry_fix(old: dict[str, str]) -> str:
    positions = sorted((int(m.group(1)), arn) for lid, arn in old.items() if (m := INDEX_KEYED_ENTRY.match(lid)))
    if positions and [p for p, _ in positions] == list(range(len(positions))):
        listed = ", ".join(arn for _, arn in positions)
        return (
            f"this environment's entries are keyed by list position: add `index_keyed_admins: [{listed}]` to its eks "
            "section (the admins in the order they were deployed) so each keeps its entry"
        )
    return "keep each deployed principal under the logical id it was deployed with (eks.index_keyed_admins)"


def access_entry_changes(stack: str, old_template: dict[str, Any], new_template: dict[str, Any]) -> list[Change]:
    """Access entries that the update would create while their principal still has an entry (409)."""
    old, new = _access_entries(old_template), _access_entries(new_template)
    why = (
        "PrincipalArn is create-only: CloudFormation creates the new entry before it deletes the old one, and EKS "
        "allows one entry per principal, so the create fails (409 ResourceInUseException) and the stack rolls back; "
    )
    changes: list[Change] = []
    for logical_id in sorted(set(old) & set(new)):
        if old[logical_id] != new[logical_id]:
            changes.append(
                Change(stack, f"EKS access entry {logical_id}", old[logical_id], new[logical_id], why + _entry_fix(old))
            )
    old_ids = {arn: lid for lid, arn in old.items()}
    for logical_id, arn in sorted(new.items()):
        if arn in old_ids and old_ids[arn] != logical_id and logical_id not in old:
            changes.append(Change(stack, f"EKS access entry of {arn}", old_ids[arn], logical_id, why + _entry_fix(old)))
    return changes


def compare(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Change]:
    changes: list[Change] = []
    for stack in sorted(set(before) & set(after)):
        old, new = before[stack], after[stack]
        changes.extend(access_entry_changes(stack, old, new))
        for logical_id, old_props in _hyperpod(old).items():
            new_props = _hyperpod(new).get(logical_id)
            if new_props is None:
                changes.append(Change(stack, "HyperPod cluster", logical_id, None, "the cluster would be deleted"))
                continue
            for path in HYPERPOD_CREATE_ONLY:
                if _dig(old_props, path) != _dig(new_props, path):
                    changes.append(
                        Change(
                            stack,
                            f"HyperPod {'/'.join(path)}",
                            _dig(old_props, path),
                            _dig(new_props, path),
                            "create-only: CloudFormation replaces the HyperPod cluster and all its nodes",
                        )
                    )
        kind, namespace, name = CURVINE_MASTERS
        old_masters = _objects(old, kind).get((namespace, name))
        new_masters = _objects(new, kind).get((namespace, name))
        if old_masters and new_masters:
            before_count, after_count = _dig(old_masters, ("spec", "replicas")), _dig(new_masters, ("spec", "replicas"))
            if before_count != after_count:
                changes.append(
                    Change(
                        stack,
                        "Curvine master count",
                        before_count,
                        after_count,
                        "Raft membership is fixed at first start; changing it needs a new Curvine filesystem",
                    )
                )
        new_iecs = _objects(new, IEC_KIND)
        for key, old_iec in _objects(old, IEC_KIND).items():
            new_iec = new_iecs.get(key)
            if new_iec is None:
                continue
            old_spec = _dig(old_iec, ("spec", "intelligentRoutingSpec"))
            new_spec = _dig(new_iec, ("spec", "intelligentRoutingSpec"))
            if old_spec is not None and old_spec != new_spec:
                changes.append(
                    Change(
                        stack,
                        f"endpoint {key[0]}/{key[1]} intelligentRoutingSpec",
                        old_spec,
                        new_spec,
                        "immutable once set: the operator rejects the update; delete and recreate the endpoint",
                    )
                )
    return changes


def autoscaler_handovers(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Change]:
    """Deployments that had `replicas` and now leave the count to a ScaledObject (a notice, not a refusal)."""
    changes: list[Change] = []
    for stack in sorted(set(before) & set(after)):
        scaled = {
            (key[0], _dig(o, ("spec", "scaleTargetRef", "name")))
            for key, o in _objects(after[stack], "ScaledObject").items()
        }
        new = _objects(after[stack], "Deployment")
        for key, old in sorted(_objects(before[stack], "Deployment").items()):
            count = _dig(old, ("spec", "replicas"))
            if key in scaled and key in new and count is not None and _dig(new[key], ("spec", "replicas")) is None:
                changes.append(
                    Change(
                        stack,
                        f"endpoint {key[0]}/{key[1]} replicas",
                        count,
                        "autoscaling",
                        "the apply removes the fixed count, which may scale the Deployment to one pod once before "
                        "KEDA scales it back to min_replicas",
                    )
                )
    return changes


def _identities(template: dict[str, Any]) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """(namespace, endpoint) -> (L2 identity, its facts), from the endpoints' annotations."""
    out: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for kind in L2_IDENTITY_KINDS:
        for key, obj in _objects(template, kind).items():
            notes = _dig(obj, ("metadata", "annotations")) or {}
            if L2_IDENTITY_ANNOTATION in notes:
                try:
                    facts = json.loads(notes.get(L2_IDENTITY_FACTS_ANNOTATION, "{}"))
                except json.JSONDecodeError:
                    facts = {}
                out[key] = (notes[L2_IDENTITY_ANNOTATION], facts if isinstance(facts, dict) else {})
    return out


def _on_tiered_storage(template: dict[str, Any]) -> set[tuple[str, str]]:
    """Operator endpoints whose L2 is HyperPod's Tiered Storage (an L2 the Kyverno Policy does not rewire)."""
    out: set[tuple[str, str]] = set()
    for key, iec in _objects(template, IEC_KIND).items():
        env = _dig(iec, ("spec", "worker", "environmentVariables")) or []
        rewired = any(isinstance(v, dict) and v.get("name") == L2_MARKER for v in env)
        if _dig(iec, ("spec", "kvCacheSpec", "enableL2Cache")) and not rewired:
            out.add(key)
    return out


def cold_starts(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Change]:
    """Endpoints whose L2 identity changed: they start on an empty L2 directory, or on Tiered Storage with keys from
    a new hash seed (a notice, not a refusal). A Tiered Storage endpoint deployed before its keys carried an identity
    (issue 34) starts cold once too."""
    changes: list[Change] = []
    for stack in sorted(set(before) & set(after)):
        old, new = _identities(before[stack]), _identities(after[stack])
        tiered = _on_tiered_storage(after[stack])
        for key, (old_id, old_facts) in sorted(old.items()):
            if key not in new or new[key][0] == old_id:
                continue
            new_id, new_facts = new[key]
            where = (
                "its pods' Tiered Storage keys start from a new hash seed (the old KV is never served)"
                if key in tiered
                else "its pods write and read a new, empty L2 directory (the old KV is never served); the old "
                "directory is left to the janitor"
            )
            changes.append(
                Change(
                    stack,
                    f"endpoint {key[0]}/{key[1]} L2 identity",
                    old_id,
                    new_id,
                    f"L2 starts cold: {_why(old_facts, new_facts)}, so {where}",
                )
            )
        for key in sorted((tiered & _on_tiered_storage(before[stack])) & set(new) - set(old)):
            changes.append(
                Change(
                    stack,
                    f"endpoint {key[0]}/{key[1]} L2 identity",
                    None,
                    new[key][0],
                    "L2 starts cold once: its Tiered Storage keys now carry its identity (a hash seed of its own "
                    "instead of the one every operator endpoint shared), so nothing cached before this change is read",
                )
            )
    return changes


# What a changed fact means for the operator reading the notice (the facts: each connector's `identity_facts`,
# kvtier/connectors/; the facts only one connector has are explained by it).
FACT_MEANING: dict[str, str] = {
    "schema": "kvtier's identity format changed (once, with a kvtier upgrade)",
    "image": "a new vLLM image",
    "weights": "other weights",
    "weights_version": "other weights",
    **{fact: meaning for c in CONNECTORS for fact, meaning in c.fact_meanings.items()},
}


def _why(old: dict[str, Any], new: dict[str, Any]) -> str:
    """`<fact> changed (<before> -> <after>: <meaning>)` for every fact that differs; `unset` for an absent one. A
    connector change is said alone: the two connectors' facts differ as a whole (LMCache identities have none)."""
    before, after = (identity_connector(f) for f in (old, new))
    if before != after:
        return (
            f"connector changed ({before} -> {after}: the two connectors' L2 files are not interchangeable, so none "
            "of what the endpoint cached before is read)"
        )
    parts = []
    for fact in sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k)):
        values = " -> ".join(json.dumps(f.get(fact)) if fact in f else "unset" for f in (old, new))
        meaning = FACT_MEANING.get(fact)
        parts.append(f"{fact} changed ({values}{': ' + meaning if meaning else ''})")
    return ", ".join(parts) or "its identity changed"


# ---- Issue 33: the policies a deploy adds ---------------------------------------------------------------------------


def added_network_policies(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Change]:
    """Per stack, the NetworkPolicies the apply adds (a notice, not a refusal): a pod a new policy selects then takes
    only the traffic some policy admits, so a client kvtier does not know of stops at the apply (docs/security.md)."""
    changes: list[Change] = []
    for stack in sorted(set(before) & set(after)):
        old = _objects(before[stack], "NetworkPolicy")
        added = sorted(f"{ns}/{name}" for ns, name in _objects(after[stack], "NetworkPolicy") if (ns, name) not in old)
        if added:
            changes.append(
                Change(
                    stack,
                    "NetworkPolicies added",
                    len(old),
                    added,
                    "the pods they select accept (or send) only what some policy admits from the apply on; a client "
                    'or destination kvtier does not list stops working (docs/security.md "Network")',
                )
            )
    return changes


KYVERNO_KINDS = ("ClusterPolicy", "Policy")
PSA_LABEL = "pod-security.kubernetes.io/"


def _rules(template: dict[str, Any]) -> set[str]:
    """`<policy>/<rule>` of every Kyverno rule the template applies (a namespaced policy's as `<ns>/<policy>/<rule>`)."""
    found: set[str] = set()
    for kind in KYVERNO_KINDS:
        for (namespace, name), policy in _objects(template, kind).items():
            prefix = f"{namespace}/{name}" if namespace else name
            found |= {f"{prefix}/{rule.get('name', '')}" for rule in policy.get("spec", {}).get("rules", [])}
    return found


def added_admission_rules(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Change]:
    """Per stack, the Kyverno rules the apply adds (a notice, not a refusal): from then on the API server refuses
    what they refuse, so an object of yours they refuse is not created again (a running pod keeps running until it
    is replaced; its next pod is refused)."""
    changes: list[Change] = []
    for stack in sorted(set(before) & set(after)):
        old = _rules(before[stack])
        added = sorted(_rules(after[stack]) - old)
        if added:
            changes.append(
                Change(
                    stack,
                    "admission rules added",
                    len(old),
                    added,
                    "from the apply on, the objects they refuse (pods, claims, volumes, Services, endpoint configs, "
                    "TriggerAuthentications) are refused, with the rule's message; running pods are not evicted, "
                    'but their replacements are checked (docs/security.md "Assets")',
                )
            )
    return changes


def pod_security_changes(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Change]:
    """Per namespace, Pod Security labels the apply adds or changes (a notice): a pod that fails the new `enforce`
    level is refused from then on; running pods are not evicted."""
    changes: list[Change] = []
    for stack in sorted(set(before) & set(after)):
        old = {name: _psa(ns) for (_, name), ns in _objects(before[stack], "Namespace").items()}
        for (_, name), namespace in sorted(_objects(after[stack], "Namespace").items()):
            new = _psa(namespace)
            if name in old and new != old[name]:
                why = "pods that fail the new levels are warned about and audited, not refused"
                if new.get("enforce") not in (None, old[name].get("enforce")):
                    why = (
                        f"a pod that fails {new['enforce']} is refused from the apply on (running pods are not "
                        f"evicted); `kubectl label --dry-run=server --overwrite ns {name} "
                        f"{PSA_LABEL}enforce={new['enforce']}` lists the running pods that would fail"
                    )
                changes.append(Change(stack, f"namespace {name} Pod Security labels", old[name], new, why))
    return changes


def _psa(namespace: dict[str, Any]) -> dict[str, str]:
    labels = namespace.get("metadata", {}).get("labels") or {}
    return {k.removeprefix(PSA_LABEL): v for k, v in sorted(labels.items()) if k.startswith(PSA_LABEL)}
