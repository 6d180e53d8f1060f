"""Names, ports and paths of the Curvine deployment: the one place every chart, the TOML and the tests read them."""

from __future__ import annotations

NAMESPACE = "curvine"  # design "Names and limits"
CLUSTER_DOMAIN = "cluster.local"  # EKS default
CLUSTER_ID = "curvine"  # Curvine's default cluster_id, written explicitly

# Ports, all written explicitly: code defaults and chart values disagree (reference 1.3, notes Q2 for v0.4.1).
MASTER_RPC_PORT = 8995
JOURNAL_PORT = 8996
WORKER_RPC_PORT = 8997
MASTER_WEB_PORT = 9000  # /metrics, UI, /api/* (the janitor reads /api/workers)
WORKER_WEB_PORT = 9001  # /metrics
FUSE_WEB_PORT = 9002  # /metrics, /healthz of the standalone FUSE pods (host network)
CSI_HEALTH_PORT = 9909  # livenessprobe sidecar of the CSI plugin
REGISTRAR_HEALTH_PORT = 9809  # node-driver-registrar /healthz

MASTER = "curvine-master"  # StatefulSet, headless Service, ServiceAccount
WORKER = "curvine-worker"  # DaemonSet, ServiceAccount
CONFIG_MAP = "curvine-config"  # key CONFIG_KEY
CONFIG_KEY = "curvine-cluster.toml"
SCRIPTS_CONFIG_MAP = "curvine-scripts"
MASTER_STORAGE_CLASS = "curvine-master-gp3"
CSI_DRIVER = "curvine"  # the driver's hard-coded name (curvine-csi pkg/csi/driver.go)
CSI_CONTROLLER = "curvine-csi-controller"
CSI_NODE = "curvine-csi-node"
FUSE_SERVICE_ACCOUNT = "curvine-fuse"  # standalone FUSE pods created by the node plugin
FUSE_METRICS_SERVICE = "curvine-fuse-metrics"
FUSE_POD_LABELS = {"app": "curvine-standalone"}  # set by the node plugin (standalone_manager.go)
HEALER = "kvtier-l2-healer"  # DaemonSet, ServiceAccount (and the Role name each LOB namespace binds it to)
HEALER_HEALTH_PORT = 9401  # /healthz of the healer: 503 while an L2 mount on its node does not answer
# Above the engines (no class: priority 0) and below the system classes (2e9): the kubelet evicts the engines first
# under node pressure, and a pending worker may preempt an engine, not a system pod.
PRIORITY_CLASS = "kvtier-l2"
PRIORITY_VALUE = 1_000_000

# Paths inside the Curvine containers.
CONFIG_DIR = "/etc/curvine"
CONFIG_FILE = f"{CONFIG_DIR}/{CONFIG_KEY}"
SCRIPTS_DIR = "/opt/kvtier/scripts"
CURVINE_HOME = "/app/curvine"  # runtime image (Dockerfile_rocky9)
SERVER_BINARY = f"{CURVINE_HOME}/lib/curvine-server"
META_MOUNT = "/data/meta"  # EBS volume of a master
JOURNAL_MOUNT = "/data/journal"  # EBS volume of a master
# Curvine's dirs are subdirectories: an ext4 volume root holds lost+found, which a master refuses (notes Q1).
META_DIR = f"{META_MOUNT}/db"
JOURNAL_DIR = f"{JOURNAL_MOUNT}/db"
WORKER_DATA_MOUNT = "/data/nvme"
WORKER_HOST_PATH = "/opt/dlami/nvme/curvine-data"  # made by kvtier/constructs/lifecycle (prepare_curvine_dir)

# CSI plugin paths on the host (upstream raw manifest curvine-csi/deploy/daemonset.yaml).
KUBELET_DIR = "/var/lib/kubelet"
PLUGIN_DIR = f"{KUBELET_DIR}/plugins/curvine"
REGISTRATION_DIR = f"{KUBELET_DIR}/plugins_registry"


SELECTOR_NAME = {"app.kubernetes.io/name": "curvine"}


def component_labels(component: str) -> dict[str, str]:
    """Pod labels (and selector) of one Curvine component."""
    return {**SELECTOR_NAME, "app.kubernetes.io/component": component}


def master_hostname(index: int) -> str:
    """Stable DNS name of master `index` through the headless Service."""
    return f"{MASTER}-{index}.{MASTER}.{NAMESPACE}.svc.{CLUSTER_DOMAIN}"


def master_web_url(index: int) -> str:
    return f"http://{master_hostname(index)}:{MASTER_WEB_PORT}"


def prometheus_annotations(port: int) -> dict[str, str]:
    """The `prometheus.io/*` convention of the kubernetes-pods / kubernetes-service-endpoints scrape jobs."""
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
