"""The VPC HyperPod nodes live in: private subnets, NAT, VPC endpoints, the node security group, flow logs."""

from __future__ import annotations

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct

from kvtier.config.network import PUBLIC_SUBNET_MASK, NetworkConfig
from kvtier.constructs.nag import acknowledge


class KvtierNetwork(Construct):
    """A VPC over explicit zones (never looked up), with what HyperPod nodes need to reach AWS."""

    def __init__(
        self, scope: Construct, id: str, *, config: NetworkConfig, zones: list[str], zone_ids: bool = False
    ) -> None:
        """`zones`: zone names, or AZ IDs when `zone_ids` (then each subnet is pinned by AvailabilityZoneId)."""
        super().__init__(scope, id)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(config.cidr),
            availability_zones=zones,
            nat_gateways=config.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK),
                ec2.SubnetConfiguration(
                    name="nodes",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=config.private_subnet_mask,
                ),
            ],
            restrict_default_security_group=True,
        )
        if zone_ids:
            _pin_zone_ids(self.vpc)
        # Flow logs record every connection of the VPC, so they are encrypted with a key of their own. CloudWatch Logs
        # may use it only for this account's log groups in this region (CloudWatch Logs user guide,
        # encrypt-log-data-kms). Retained with the logs it encrypts (docs/deploying.md).
        stack = Stack.of(self)
        self.flow_log_key = kms.Key(
            self,
            "FlowLogsKey",
            enable_key_rotation=True,
            description="kvtier VPC flow logs",
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.flow_log_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsOfThisAccount",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],  # a key policy's resource is the key itself
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
                        )
                    }
                },
            )
        )
        self.flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=_RETENTION[config.flow_log_retention_days],
            removal_policy=RemovalPolicy.RETAIN,
            encryption_key=self.flow_log_key,
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

        # HyperPod (and EFA where present) need all traffic allowed between nodes of the cluster
        # (reference aws-hyperpod.md 8, item 3); the same group goes on the EKS control plane.
        self.node_security_group = ec2.SecurityGroup(
            self,
            "NodeSecurityGroup",
            vpc=self.vpc,
            description="kvtier HyperPod nodes and EKS control plane: all traffic within the group",
            allow_all_outbound=True,
        )
        self.node_security_group.add_ingress_rule(
            self.node_security_group, ec2.Port.all_traffic(), "all traffic between nodes of the cluster"
        )
        # EFA needs an egress rule to the group itself (docs/references.md "Issue 26": EKS security-group
        # requirements, AWS's HyperPod template `IntraSGCommunicationRuleEgress`). With allow_all_outbound=True CDK
        # silently drops egress rules added through add_egress_rule, so it is a resource of its own, as in AWS's.
        ec2.CfnSecurityGroupEgress(
            self,
            "NodeSecurityGroupEgressToItself",
            group_id=self.node_security_group.security_group_id,
            destination_security_group_id=self.node_security_group.security_group_id,
            ip_protocol="-1",
            description="all traffic between nodes of the cluster (EFA)",
        )

        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)
        # New nodes hang on "Checking for IPAM connectivity" unless endpoints accept 443 from the node group
        # (reference aws-hyperpod.md 8).
        self.endpoint_security_group = ec2.SecurityGroup(
            self,
            "EndpointSecurityGroup",
            vpc=self.vpc,
            description="kvtier VPC interface endpoints: HTTPS from the node security group",
            allow_all_outbound=False,
        )
        self.endpoint_security_group.add_ingress_rule(
            self.node_security_group, ec2.Port.tcp(443), "HTTPS from HyperPod nodes"
        )
        acknowledge(
            self.endpoint_security_group,
            "AwsSolutions-EC23",
            "The only ingress is HTTPS from the node security group (a reference, not 0.0.0.0/0); the rule cannot "
            "evaluate references and reports an error instead.",
        )
        for service in config.interface_endpoints:
            self.vpc.add_interface_endpoint(
                _endpoint_id(service),
                service=ec2.InterfaceVpcEndpointAwsService(service),
                private_dns_enabled=True,
                security_groups=[self.endpoint_security_group],
                open=False,  # CDK's default opens 443 to the whole VPC CIDR; only the node group may call
                subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            )

    def admit_to_endpoints(self, scope: Construct, id: str, source_group_id: str, description: str) -> None:
        """HTTPS to the interface endpoints from another group, declared in `scope`'s stack (the group of EKS's
        kubectl handler lives in the cluster stack; a rule here would make the network stack depend on it)."""
        ec2.CfnSecurityGroupIngress(
            scope,
            id,
            group_id=self.endpoint_security_group.security_group_id,
            source_security_group_id=source_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description=description,
        )

    def api_client_group(
        self, scope: Construct, id: str, *, control_plane_group_id: str, description: str
    ) -> ec2.SecurityGroup:
        """A security group of its own for one of kvtier's Lambdas that call the EKS API and AWS from the VPC, declared
        in `scope`'s stack: egress HTTPS (443) only, admitted on 443 to the interface endpoints and to the EKS cluster
        security group, which EKS puts on the control plane's network interfaces (and on managed node groups, which
        kvtier has none of); nothing else admits it. Not the node group: that allows all traffic within itself, so a
        function there reaches every node and pod on every port (docs/references.md "Issue 37")."""
        group = ec2.SecurityGroup(scope, id, vpc=self.vpc, description=description, allow_all_outbound=False)
        # The EKS API, AWS APIs (interface endpoints or the NAT) and HTTPS downloads. DNS to the VPC resolver is not
        # filtered by security groups.
        group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS only: the EKS API, AWS APIs, downloads")
        self.admit_to_endpoints(scope, f"{id}ToEndpoints", group.security_group_id, f"HTTPS from {description}")
        ec2.CfnSecurityGroupIngress(
            scope,
            f"{id}ToControlPlane",
            group_id=control_plane_group_id,
            source_security_group_id=group.security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description=f"the EKS API from {description}",
        )
        return group

    @property
    def node_subnets(self) -> list[ec2.ISubnet]:
        return self.vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets


def _endpoint_id(service: str) -> str:
    return "".join(part.capitalize() for part in service.replace("-", ".").split(".")) + "Endpoint"


_RETENTION = {
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    731: logs.RetentionDays.TWO_YEARS,
}


def _pin_zone_ids(vpc: ec2.Vpc) -> None:
    """CDK's Vpc writes each subnet's zone as `AvailabilityZone`; an AZ ID belongs in `AvailabilityZoneId`
    (AWS::EC2::Subnet accepts either, not both), which names the same physical zone in every account."""
    for subnet in [*vpc.public_subnets, *vpc.private_subnets]:
        cfn = subnet.node.default_child
        assert isinstance(cfn, ec2.CfnSubnet)
        cfn.add_property_deletion_override("AvailabilityZone")
        cfn.add_property_override("AvailabilityZoneId", subnet.availability_zone)
