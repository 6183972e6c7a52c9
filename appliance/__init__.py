"""Serving appliance for DeepSeek-V4-Flash on NVIDIA SM12x around vLLM."""

__version__ = "0.1.0"
