"""The policy's vLLM server on Modal GPUs: ``modal deploy examples/qwen_swe/modal_inference.py``.

    modal deploy examples/qwen_swe/modal_inference.py    # then VLLM_URL=https://<workspace>--qwen-swe-vllm.modal.run/v1
    modal run examples/qwen_swe/modal_inference.py --path step_000003            # full weights from the Volume
    modal run examples/qwen_swe/modal_inference.py --path lora_000003 --lora-name policy

The app is defined in ``qwen_swe.inference.modal_app`` (deploy-time settings are documented there).
"""

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

from qwen_swe.inference.modal_app import app, main  # noqa: F401  (Modal finds `app` here)
