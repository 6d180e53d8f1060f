"""Every derived name in one place, so each can be tested against its AWS or Kubernetes limit."""

from __future__ import annotations

STACK_KINDS = ("network", "cluster", "platform")
ENV_TAG = "kvtier:environment"  # on every stack (and so every resource) of an environment
RESERVED_LOB_NAMES = frozenset(STACK_KINDS)


def stack_name(env: str, kind: str) -> str:
    """`kvtier-<env>-network|cluster|platform|<lob>` (design "Stacks")."""
    return f"kvtier-{env}-{kind}"


def lifecycle_bucket_prefix(env: str) -> str:
    """HyperPod lifecycle scripts: AWS documents `s3://sagemaker-...` sources (API ClusterLifeCycleConfig), the
    prefix the managed execution policy covers."""
    return f"sagemaker-kvtier-{env}-"


def own_bucket_patterns(env: str) -> tuple[str, str]:
    """Every bucket kvtier creates for `env`: CloudFormation names them `<stack name>-<logical id>-<suffix>`
    (stacks are `kvtier-<env>-*`), and the lifecycle bucket starts with `lifecycle_bucket_prefix`."""
    return (f"kvtier-{env}-*", f"{lifecycle_bucket_prefix(env)}*")


# S3 ABAC (docs/references.md "Issue 26: LOB model buckets"): the S3 CSI driver's role reads a bucket of the account
# only while the bucket has ABAC enabled and carries this tag, so a LOB's new bucket needs no change to any stack.
MODEL_READER_TAG_VALUE = "true"


def model_reader_tag(env: str) -> str:
    """The bucket tag key that lets `env`'s S3 CSI driver read a model bucket (one key per environment, so one bucket
    can serve several environments and untagging one leaves the others)."""
    return f"kvtier:model-reader:{env}"


def eks_cluster_name(env: str) -> str:
    return f"kvtier-{env}"


# Required by the HyperPod Inference add-on (_validateRequiredValues.tpl, HPCLI@011ca927).
INFERENCE_EXECUTION_ROLE_PREFIX = "SageMakerHyperPodInference"


def inference_role_names(env: str, region: str) -> dict[str, str]:
    """The Inference Operator's explicitly named IAM roles (IAM names are per account: env and region keep
    environments apart). Fixed names: preflight looks for leftovers of an earlier failed attempt under them."""
    return {
        "execution": f"{INFERENCE_EXECUTION_ROLE_PREFIX}-{env}-{region}",
        "gated": f"kvtier-{env}-{region}-inference-gated",
        "alb": f"kvtier-{env}-{region}-inference-alb",
        "keda": f"kvtier-{env}-{region}-inference-keda",
    }


def lob_namespace(lob: str) -> str:
    return f"kvtier-{lob}"


def l2_lob_path(env: str, lob: str) -> str:
    """The LOB's directory in the environment's Curvine filesystem (design "L2 layout")."""
    return f"/kvtier/{env}/{lob}"


# On an endpoint's InferenceEndpointConfig or standalone Deployment: its L2 identity (the last part of its L2
# directory, kvtier/connectors/) and the facts it digests, which `kvtier validate --previous` compares.
L2_IDENTITY_ANNOTATION = "kvtier.io/l2-identity"
L2_IDENTITY_FACTS_ANNOTATION = "kvtier.io/l2-identity-facts"


def dist_dir(env: str, stack: str) -> str:
    return f"dist/{env}/{stack}"


# Pods reading S3 model weights use this service account (EKS Pod Identity): the LOB chart creates it, the
# model-access construct binds the LOB's role to it.
MODEL_READER_SA = "model-reader"
