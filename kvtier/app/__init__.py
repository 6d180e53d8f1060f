"""The CDK app: build and synthesize the stacks of one environment (main.py), write dist/ (dist.py); kept free of
imports so that `kvtier.app.jsii_node` can run before aws_cdk starts a jsii kernel."""
