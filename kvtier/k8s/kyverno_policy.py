"""The LOB's Kyverno `Policy`: rewires the L2 of operator-rendered endpoint pods to the LOB's Curvine volume.

Design "Operator mode and the L2 rewiring":
- Pods at CREATE only (the operator reconciles Deployments; mutating those would fight it), and autogen off so
  Kyverno does not copy the rule onto Deployments.
- Values come only from the pod: its namespace (the Policy is namespaced), its `app` label, which the operator
  sets to the InferenceEndpointConfig's name (aws/sagemaker-hyperpod-cli@011ca927
  src/sagemaker/hyperpod/inference/hp_endpoint.py list_pods), and the L2 identity the IEC puts in the worker
  environment: the URL is `.../<app>/<identity>/` (design "L2 layout"). The vLLM container is found by the marker
  variable next to it (operator_endpoint.py), so pods of other endpoints (tieredstorage, standalone, janitor,
  benchmark) are left alone.
- Fail closed for this namespace only: a per-policy webhook (`webhookConfiguration.matchConditions`) with
  failurePolicy Fail; without matchConditions Kyverno merges the rule into its shared webhook and every namespace
  would fail closed (docs/references.md "Kyverno policy").
- A validate rule in the same policy rejects a marked pod unless it carries an identity of the right length and ends
  with exactly one LMCACHE_REMOTE_URL, the endpoint's identity directory, one mount and the volume, and no
  `lmcache.remote_url` override in its arguments (LMCache
  lets `--kv-transfer-config` extra config win over the environment): a render kvtier did not foresee fails loudly
  instead of running without L2.
"""

from __future__ import annotations

from typing import Any

# Operator mode runs LMCache's connector only (the Inference Operator wires it; kvtier/connectors/vllm.py refuses the
# mode): the rewiring is LMCache's.
from kvtier.connectors.lmcache import env_name, l2_dir_url, rewire_env
from kvtier.k8s.base import KvtierChart, api_object
from kvtier.k8s.endpoint_names import POLICY_NAME
from kvtier.naming import lob_namespace
from kvtier.serving import L2_CLAIM, L2_IDENTITY_CHARS, L2_IDENTITY_VAR, L2_MARKER, L2_MOUNT_PATH, L2_VOLUME

AUTOGEN_ANNOTATION = "pod-policies.kyverno.io/autogen-controllers"
ENDPOINT_VAR = "{{ request.object.metadata.labels.app || '' }}"
IDENTITY_EXPR = f"element.env[?name == '{L2_IDENTITY_VAR}'].value | [0] || ''"
IDENTITY_VAR = f"{{{{ {IDENTITY_EXPR} }}}}"
L2_DIR = f"{ENDPOINT_VAR}/{IDENTITY_VAR}"  # l2_subdir, from what the pod carries
ELEMENT_NAME = "{{ element.name }}"
MARKED = {  # foreach precondition: this container carries the marker (JMESPath; `|| ''` when there is no env)
    "key": f"{{{{ element.env[?name == '{L2_MARKER}'].value | [0] || '' }}}}",
    "operator": "Equals",
    "value": "curvine",
}
WEBHOOK_TIMEOUT_S = 15


OVERRIDE = "lmcache.remote_url"  # LMCache applies kv_connector_extra_config `lmcache.*` keys after its environment


def _mentions(text: str) -> str:
    """True when the container's command or args contain `text` (JMESPath)."""
    words = "[element.command || `[]`, element.args || `[]`][]"
    return f"{{{{ contains(join(' ', {words}), '{text}') }}}}"


def _count(path: str, field: str, value: str) -> str:
    return f"{{{{ length({path}[?{field} == '{value}'] || `[]`) }}}}"


def _match() -> dict[str, Any]:
    return {"any": [{"resources": {"kinds": ["Pod"], "operations": ["CREATE"]}}]}


def _mutate_rule() -> dict[str, Any]:
    return {
        "name": "rewire-l2-to-curvine",
        "match": _match(),
        "mutate": {
            "foreach": [
                {
                    "list": "request.object.spec.containers",
                    "preconditions": {"all": [MARKED]},
                    # Strategic merge: containers by name, env by name (the operator's URL is replaced, not
                    # appended), volumeMounts by mountPath, volumes by name.
                    "patchStrategicMerge": {
                        "spec": {
                            "containers": [
                                {
                                    "name": ELEMENT_NAME,
                                    "env": rewire_env(L2_DIR),
                                    "volumeMounts": [{"name": L2_VOLUME, "mountPath": L2_MOUNT_PATH}],
                                }
                            ],
                            "volumes": [{"name": L2_VOLUME, "persistentVolumeClaim": {"claimName": L2_CLAIM}}],
                        }
                    },
                }
            ]
        },
    }


def _validate_rule() -> dict[str, Any]:
    url = env_name("remote_url")
    expected = l2_dir_url(L2_DIR)
    return {
        "name": "require-curvine-l2",
        "match": _match(),
        "validate": {
            "failureAction": "Enforce",
            "message": (
                f"a pod marked {L2_MARKER}=curvine needs an `app` label naming its endpoint, a {L2_IDENTITY_CHARS}-"
                f"character {L2_IDENTITY_VAR}, exactly one {url} = {l2_dir_url(f'<app>/<{L2_IDENTITY_VAR}>')}, one "
                f"mount at {L2_MOUNT_PATH}, the volume of claim {L2_CLAIM} and no {OVERRIDE} in its arguments; "
                "the kvtier Kyverno rewiring did not apply (see docs: operator mode)"
            ),
            "foreach": [
                {
                    "list": "request.object.spec.containers",
                    "preconditions": {"all": [MARKED]},
                    "deny": {
                        "conditions": {
                            "any": [
                                {"key": ENDPOINT_VAR, "operator": "Equals", "value": ""},
                                {
                                    "key": f"{{{{ length({IDENTITY_EXPR}) }}}}",
                                    "operator": "NotEquals",
                                    "value": L2_IDENTITY_CHARS,
                                },
                                {"key": _count("element.env", "name", url), "operator": "NotEquals", "value": 1},
                                {
                                    "key": f"{{{{ element.env[?name == '{url}'].value | [0] || '' }}}}",
                                    "operator": "NotEquals",
                                    "value": expected,
                                },
                                {
                                    "key": _count("element.volumeMounts", "mountPath", L2_MOUNT_PATH),
                                    "operator": "NotEquals",
                                    "value": 1,
                                },
                                {
                                    "key": _count("request.object.spec.volumes", "name", L2_VOLUME),
                                    "operator": "NotEquals",
                                    "value": 1,
                                },
                                # `lmcache.<key>` in --kv-transfer-config would override the environment.
                                {"key": _mentions(OVERRIDE), "operator": "Equals", "value": True},
                            ]
                        }
                    },
                }
            ],
        },
    }


def l2_policy(lob: str) -> dict[str, Any]:
    namespace = lob_namespace(lob)
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "Policy",
        "metadata": {"name": POLICY_NAME, "namespace": namespace, "annotations": {AUTOGEN_ANNOTATION: "none"}},
        "spec": {
            "admission": True,
            "background": False,  # admission only: existing pods keep what they were created with
            "webhookConfiguration": {
                "failurePolicy": "Fail",
                "timeoutSeconds": WEBHOOK_TIMEOUT_S,
                "matchConditions": [
                    {"name": "kvtier-lob-namespace-only", "expression": f"request.namespace == '{namespace}'"}
                ],
            },
            "rules": [_mutate_rule(), _validate_rule()],
        },
    }


def add_l2_policy(chart: KvtierChart, lob: str) -> None:
    api_object(chart, "l2-policy", l2_policy(lob))
