"""What the platform stack's system-node gate may do in the cluster (issue 37): get and list nodes, nothing else.

Its Lambda role's EKS access entry maps it to the Kubernetes group NODE_GATE_GROUP (no access policy: EKS's view
policies cover no nodes, and the admin-view one also reads Secrets; docs/references.md "Issue 37"); this chart binds
that group to a ClusterRole of one rule.
"""

from __future__ import annotations

import cdk8s

from kvtier.k8s.base import api_object

NODE_GATE = "kvtier-node-gate"  # the ClusterRole and its binding
NODE_GATE_GROUP = "kvtier-node-gate"  # the access entry's Kubernetes group (EKS CreateAccessEntry kubernetesGroups)
NODE_READER_RULES = ({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]},)


def add_node_gate_access(chart: cdk8s.Chart) -> None:
    metadata = {"name": NODE_GATE}
    api_object(
        chart,
        "role",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata,
            "rules": [dict(rule) for rule in NODE_READER_RULES],
        },
    )
    api_object(
        chart,
        "binding",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NODE_GATE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": NODE_GATE_GROUP}],
        },
    )
