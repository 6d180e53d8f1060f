"""`network` section: the VPC kvtier creates for a new cluster."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from kvtier.config.base import Items, StrictModel

# Interface endpoints HyperPod nodes and EKS need without a NAT hop (reference aws-hyperpod.md 8, ADT Terraform).
InterfaceEndpoint = Literal[
    "ec2",
    "ecr.api",
    "ecr.dkr",
    "sts",
    "logs",
    "monitoring",
    "ssm",
    "ssmmessages",
    "ec2messages",
    "eks",
    "eks-auth",
    "lambda",
    "sqs",
    "sagemaker.api",
    "elasticloadbalancing",
    "autoscaling",
]
DEFAULT_INTERFACE_ENDPOINTS: tuple[InterfaceEndpoint, ...] = (
    "ec2",
    "ecr.api",
    "ecr.dkr",
    "sts",
    "logs",
    "monitoring",
    "ssm",
    "ssmmessages",
    "ec2messages",
    "eks-auth",
)
PUBLIC_SUBNET_MASK = 24


def _ipv4_network(value: str) -> str:
    try:
        net = ipaddress.IPv4Network(value, strict=True)
    except ValueError as err:
        raise ValueError(f"'{value}' is not an IPv4 network ({err}); write it like 10.0.0.0/16") from None
    if not 16 <= net.prefixlen <= 24:
        raise ValueError(f"prefix /{net.prefixlen} is outside what a VPC accepts; use a prefix between /16 and /24")
    return value


class NetworkConfig(StrictModel):
    cidr: Annotated[str, AfterValidator(_ipv4_network)] = "10.0.0.0/16"
    nat_gateways: Annotated[int, Field(ge=1, le=6)] = 1
    private_subnet_mask: Annotated[int, Field(ge=16, le=26)] = 18
    interface_endpoints: Items[InterfaceEndpoint] = DEFAULT_INTERFACE_ENDPOINTS
    flow_log_retention_days: Literal[7, 14, 30, 60, 90, 180, 365, 731] = 30


def plan_subnets(cidr: str, azs: int, private_mask: int) -> list[ipaddress.IPv4Network] | None:
    """Allocate the public /24s then the private subnets the way CDK's Vpc does; None when they do not fit."""
    vpc = ipaddress.IPv4Network(cidr)
    cursor = int(vpc.network_address)
    end = int(vpc.broadcast_address) + 1
    out: list[ipaddress.IPv4Network] = []
    for mask in [PUBLIC_SUBNET_MASK] * azs + [private_mask] * azs:
        size = 2 ** (32 - mask)
        cursor = -(-cursor // size) * size  # align up to the block size
        if cursor + size > end:
            return None
        out.append(ipaddress.IPv4Network((cursor, mask)))
        cursor += size
    return out
