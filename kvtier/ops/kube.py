"""The thin reading layer of `kvtier verify`: list the objects it checks, read-only, with the user's kubeconfig.

Objects are kept exactly as the API returns them (JSON), the same form as `kubectl get -o json` and the test
fixtures. Failing to reach or authenticate to the API is UnavailableError (exit 3); a missing Kyverno CRD is not
(it only means there are no policies, which the checks report).

Bounded: every request has a 4 s connect and 8 s read timeout and one retry (the client's default is urllib3's three
retries of a 20 s request: 81 s against an API server that never answers). A failing credential plugin (`aws eks
get-token` with expired credentials) is the error reported, at once: the client only logs it (`ERROR:root:`) and
goes on without a token.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from functools import partial
from typing import Any

from kvtier.config.loader import Config
from kvtier.errors import UnavailableError
from kvtier.k8s.curvine.names import NAMESPACE as CURVINE_NAMESPACE
from kvtier.naming import lob_namespace
from kvtier.ops.aws import announce
from kvtier.ops.verify import Snapshot

CONNECT_TIMEOUT_S = 4
READ_TIMEOUT_S = 8
RETRIES = 1
REQUEST_TIMEOUT_S = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)  # the client's `_request_timeout` (connect, read)
KYVERNO = ("kyverno.io", "v1", "policies")


def read_snapshot(config: Config, context: str | None = None) -> Snapshot:
    """Nodes, pods of the LOB and Curvine namespaces, the LOBs' claims, Kyverno Policies and ConfigMaps."""
    from kubernetes import client

    api = api_client(context)
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    lob_namespaces = [lob_namespace(lob.name) for lob in config.lobs]
    options: dict[str, Any] = {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT_S}
    nodes = list_items(lambda: core.list_node(**options), "nodes")
    pods: list[dict[str, Any]] = []
    for namespace in [*lob_namespaces, CURVINE_NAMESPACE]:
        pods += list_items(partial(core.list_namespaced_pod, namespace, **options), f"pods in {namespace}")
    pvcs: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    configmaps: list[dict[str, Any]] = []
    for namespace in lob_namespaces:
        configmaps += list_items(
            partial(core.list_namespaced_config_map, namespace, **options), f"ConfigMaps in {namespace}"
        )
        pvcs += list_items(
            partial(core.list_namespaced_persistent_volume_claim, namespace, **options), f"claims in {namespace}"
        )
        group, version, plural = KYVERNO
        policies += list_items(
            partial(custom.list_namespaced_custom_object, group, version, namespace, plural, **options),
            f"Kyverno policies in {namespace}",
            missing_ok=True,
        )
    return Snapshot(tuple(nodes), tuple(pods), tuple(pvcs), tuple(policies), tuple(configmaps))


def api_client(context: str | None = None) -> Any:
    """The Kubernetes client for the kubeconfig's `context`, with bounded requests; says which API server it contacts.
    A kubeconfig that cannot be used, or a credential plugin that fails, is UnavailableError naming the cause."""
    from kubernetes import client
    from kubernetes import config as kubeconfig
    from urllib3.util.retry import Retry

    configuration = client.Configuration()
    errors = _Errors()
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [errors]  # the client logs a failing exec plugin at ERROR on the root logger, then goes on
    try:
        # KUBECONFIG read now: the client reads it once, when it is first imported.
        path = os.environ.get("KUBECONFIG") or None
        kubeconfig.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    except Exception as err:  # ConfigException, a missing file, a bad context: all mean "cannot check"
        raise UnavailableError(f"cannot check: no usable kubeconfig ({err}); run `aws eks update-kubeconfig`") from err
    finally:
        root.handlers = saved
    if errors.messages:
        raise UnavailableError(
            f"cannot check: the kubeconfig's credential plugin failed ({'; '.join(errors.messages)}); fix the AWS "
            "credentials it uses (`aws sts get-caller-identity`) or run `aws eks update-kubeconfig` again"
        )
    configuration.retries = Retry(total=RETRIES, connect=RETRIES, read=RETRIES, redirect=0, status=0)
    announce("the Kubernetes API", str(configuration.host))
    return client.ApiClient(configuration)


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(" ".join(record.getMessage().split())[:500])  # one line, bounded


def list_items(call: Callable[[], Any], what: str, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The `items` of one list call; every failure to reach or read the API is one UnavailableError line (exit 3).
    The one home of that mapping: `verify` and `verify --probe` (portforward.KubePodAccess) both list through it."""
    data = request(call, f"list {what}", missing_ok=missing_ok)
    items: list[dict[str, Any]] = (data or {}).get("items", [])
    return items


def request(call: Callable[[], Any], what: str, *, missing_ok: bool = False) -> dict[str, Any] | None:
    """One API call made with `_preload_content=False` (a list, get, create, patch or delete; `what` says what, as
    "list pods in curvine" or "delete pod curvine/x"): its JSON body, None for a 404 when `missing_ok`. Failing to
    reach or read the API is one UnavailableError line (exit 3)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        response = call()
    except ApiException as err:
        if err.status == 404 and missing_ok:
            return None  # the object, or the resource type, is not there
        if err.status in (401, 403):
            raise UnavailableError(
                f"cannot check: the Kubernetes API refused to {what} ({err.status} {err.reason})"
            ) from err
        raise UnavailableError(f"cannot check: {what} failed ({err.status} {err.reason})") from err
    except (HTTPError, OSError) as err:
        raise UnavailableError(
            f"cannot check: the Kubernetes API does not answer within {CONNECT_TIMEOUT_S} s to connect and "
            f"{READ_TIMEOUT_S} s to read, {RETRIES + 1} attempts ({_short(err)}); check the network and the API "
            "server's endpoint access (public_access_cidrs)"
        ) from err
    data = json.loads(response.data or b"{}")
    return data if isinstance(data, dict) else {}


def _short(err: BaseException) -> str:
    """urllib3's MaxRetryError repeats the whole pool and URL; the cause's class and the host say enough."""
    reason = getattr(err, "reason", None)
    return f"{type(reason).__name__}: {reason}"[:300] if reason is not None else str(err)[:300]
