"""Memory plans: what a training configuration needs per GPU, before it is launched (``python -m qwen_swe.plan``)."""
