"""Calling an EKS cluster's Kubernetes API from a Lambda, as the Lambda's own IAM role: the cluster's endpoint and CA
(eks:DescribeCluster), the bearer token `aws eks get-token` prints, a kubeconfig for helm, one JSON GET.

The role must have an EKS access entry; what it may do comes from that entry's access policy or Kubernetes groups.
Standard library and boto3 only (the Lambda runtime has both).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.signers import RequestSigner

TOKEN_EXPIRES_S = 60  # the presigned URL's lifetime (each call makes a new token)


@dataclass(frozen=True)
class ClusterApi:
    """Where the cluster's API server is, and the CA that signs its certificate (base64 PEM, as EKS returns it)."""

    endpoint: str
    ca_data: str


def cluster_api(session: boto3.session.Session, cluster_name: str, region: str) -> ClusterApi:
    cluster = session.client("eks", region_name=region).describe_cluster(name=cluster_name)["cluster"]
    return ClusterApi(str(cluster["endpoint"]), str(cluster["certificateAuthority"]["data"]))


def write_kubeconfig(cluster_name: str, region: str, work: Path, session: boto3.session.Session | None = None) -> Path:
    """A kubeconfig (JSON is valid YAML) with a short-lived token from the Lambda's own role."""
    session = session or boto3.session.Session(region_name=region)
    api = cluster_api(session, cluster_name, region)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": cluster_name, "cluster": {"server": api.endpoint, "certificate-authority-data": api.ca_data}}
        ],
        "users": [{"name": "lambda", "user": {"token": eks_token(session, cluster_name, region)}}],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": "lambda"}}],
        "current-context": cluster_name,
    }
    path = work / "kubeconfig.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    path.chmod(0o600)
    return path


def eks_token(session: boto3.session.Session, cluster_name: str, region: str) -> str:
    """The bearer token `aws eks get-token` prints: a presigned STS GetCallerIdentity URL naming the cluster."""
    sts = session.client("sts", region_name=region)
    credentials = session.get_credentials()
    if credentials is None:
        raise RuntimeError("no AWS credentials in the Lambda environment")
    signer = RequestSigner(sts.meta.service_model.service_id, region, "sts", "v4", credentials, session.events)
    url = signer.generate_presigned_url(
        {
            "method": "GET",
            "url": f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15",
            "body": {},
            "headers": {"x-k8s-aws-id": cluster_name},
            "context": {},
        },
        region_name=region,
        expires_in=TOKEN_EXPIRES_S,
        operation_name="",
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def get_json(api: ClusterApi, token: str, path: str, query: dict[str, str], timeout_s: float) -> Any:
    """GET `path` (e.g. /api/v1/nodes) with `query` from the API server, verified against the cluster's CA.
    Raises urllib's HTTPError (the API's status) or URLError (not reachable) and TimeoutError as they come."""
    url = f"{api.endpoint.rstrip('/')}{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"})
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cadata=base64.b64decode(api.ca_data).decode())
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
        return json.loads(response.read())
