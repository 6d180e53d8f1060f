"""kvtier: a tiered KV cache for LLM inference on Amazon SageMaker HyperPod, as one AWS CDK app."""

__version__ = "0.1.0"
