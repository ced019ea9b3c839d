"""The broadcast manifest (protocol 2): what rank 0 encodes is what a worker unpacks; anything else is refused."""

from __future__ import annotations

import pytest
import torch

from qwen_swe.errors import WeightSyncError
from qwen_swe.inference.broadcast_worker import LoraAdapter, encode, manifest_bytes, unpack
from qwen_swe.inference.lora_merge import merge


def _bucket():
    g = torch.Generator().manual_seed(0)
    return [
        ("model.norm.weight", torch.randn(8, generator=g).to(torch.bfloat16)),
        LoraAdapter(
            "model.layers.0.self_attn.q_proj", torch.randn(4, 8, generator=g), torch.randn(6, 4, generator=g), 4.0
        ),
    ]


def test_a_bucket_round_trips_through_its_manifest_and_bytes():
    manifest, tensors = encode(_bucket())
    assert manifest["protocol"] == 2 and manifest["lora_scaling"] == 4.0
    assert [e["kind"] for e in manifest["entries"]] == ["tensor", "lora"]
    assert manifest["entries"][1] == {
        "kind": "lora",
        "module": "model.layers.0.self_attn.q_proj",
        "dtype": "float32",
        "a_shape": [4, 8],
        "b_shape": [6, 4],
    }
    flat = torch.cat([t.reshape(-1).view(torch.uint8) for t in tensors])
    assert manifest_bytes(manifest) == flat.numel() == 8 * 2 + (32 + 24) * 4
    (name, norm), adapter = unpack(flat, manifest)
    want = _bucket()
    assert name == "model.norm.weight" and torch.equal(norm, want[0][1])
    assert adapter.module == want[1].module and adapter.scaling == 4.0
    assert torch.equal(adapter.a, want[1].a) and torch.equal(adapter.b, want[1].b)


def test_the_merge_is_the_disk_exports_expression():
    from qwen_swe.train.policy import merge_lora

    g = torch.Generator().manual_seed(1)
    base, a, b = torch.randn(6, 8, generator=g), torch.randn(4, 8, generator=g), torch.randn(6, 4, generator=g)
    sd = {
        "base_model.model.m.q_proj.base_layer.weight": base,
        "base_model.model.m.q_proj.lora_A.default.weight": a,
        "base_model.model.m.q_proj.lora_B.default.weight": b,
    }
    disk = merge_lora(sd, scaling=2.5)["m.q_proj.weight"]
    assert torch.equal(merge(base, a, b, 2.5, torch.float32), disk)
    assert torch.equal(merge(base, a, b, 2.5, torch.bfloat16), disk.to(torch.bfloat16))  # served in bf16


@pytest.mark.parametrize(
    "manifest, message",
    [
        ([["w", "float32", [4]]], "protocol 1 \\(a list\\), this worker speaks 2"),
        ({"protocol": 3, "entries": []}, "protocol 3, this worker speaks 2"),
        ({"protocol": 2, "entries": [{"kind": "dora"}]}, "unknown broadcast manifest entry kind 'dora'"),
    ],
)
def test_a_manifest_this_worker_does_not_speak_is_refused(manifest, message):
    with pytest.raises(WeightSyncError, match=message):
        manifest_bytes(manifest)


def test_one_scaling_per_bucket():
    a, b = torch.zeros(4, 8), torch.zeros(6, 4)
    with pytest.raises(WeightSyncError, match="one LoRA scaling"):
        encode([LoraAdapter("x", a, b, 4.0), LoraAdapter("y", a, b, 2.0)])
