"""The thin reading layer of `kvtier verify`: list the objects it checks, read-only, with the user's kubeconfig.

Objects are kept exactly as the API returns them (JSON), the same form as `kubectl get -o json` and the test
fixtures. Failing to reach or authenticate to the API is UnavailableError (exit 3); a missing Kyverno CRD is not
(it only means there are no policies, which the checks report).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from kvtier.config.loader import Config
from kvtier.errors import UnavailableError
from kvtier.k8s.curvine.names import NAMESPACE as CURVINE_NAMESPACE
from kvtier.naming import lob_namespace
from kvtier.ops.verify import Snapshot

REQUEST_TIMEOUT_S = 20
KYVERNO = ("kyverno.io", "v1", "policies")


def read_snapshot(config: Config, context: str | None = None) -> Snapshot:
    """Nodes, pods of the LOB and Curvine namespaces, the LOBs' claims, Kyverno Policies and ConfigMaps."""
    from kubernetes import client
    from kubernetes import config as kubeconfig

    try:
        kubeconfig.load_kube_config(context=context)
    except Exception as err:  # ConfigException, a missing file, a failing exec plugin: all mean "cannot check"
        raise UnavailableError(f"cannot check: no usable kubeconfig ({err}); run `aws eks update-kubeconfig`") from err
    api = client.ApiClient()
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    lob_namespaces = [lob_namespace(lob.name) for lob in config.lobs]
    options: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT_S}
    nodes = _items(lambda: core.list_node(**options), "nodes")
    pods: list[dict[str, Any]] = []
    for namespace in [*lob_namespaces, CURVINE_NAMESPACE]:
        pods += _items(partial(core.list_namespaced_pod, namespace, **options), f"pods in {namespace}")
    pvcs: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    configmaps: list[dict[str, Any]] = []
    for namespace in lob_namespaces:
        configmaps += _items(
            partial(core.list_namespaced_config_map, namespace, **options), f"ConfigMaps in {namespace}"
        )
        pvcs += _items(
            partial(core.list_namespaced_persistent_volume_claim, namespace, **options), f"claims in {namespace}"
        )
        group, version, plural = KYVERNO
        policies += _items(
            partial(custom.list_namespaced_custom_object, group, version, namespace, plural, **options),
            f"Kyverno policies in {namespace}",
            missing_ok=True,
        )
    return Snapshot(tuple(nodes), tuple(pods), tuple(pvcs), tuple(policies), tuple(configmaps))


def _items(call: Callable[[], Any], what: str, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        response = call()
    except ApiException as err:
        if err.status == 404 and missing_ok:
            return []  # the resource type is not installed
        if err.status in (401, 403):
            raise UnavailableError(
                f"cannot check: the Kubernetes API refused to list {what} ({err.status} {err.reason})"
            ) from err
        raise UnavailableError(f"cannot check: listing {what} failed ({err.status} {err.reason})") from err
    except (HTTPError, OSError) as err:
        raise UnavailableError(f"cannot check: the Kubernetes API does not answer ({err})") from err
    data = json.loads(response.data)
    items: list[dict[str, Any]] = data.get("items", [])
    return items
