"""cdk8s charts, one per Kubernetes component; each takes typed config and returns plain manifests."""
