"""Expert demonstrations on disk, and the driver that feeds them to the trainer for the supervised warm start.

A demonstration is a rollout of the expert through the real agent and proxy that the grader resolved: its token ids,
its loss mask (1 on the tokens the expert "sampled", 0 on tool results and the chat template), nothing else. With
``TRAIN_MODE=sft`` the trainer's loss on it is the GRPO loss with advantage 1 at ratio 1, whose gradient is exactly
the negative log-likelihood's on the masked tokens: the warm start trains the very tokens, masks and template that
reinforcement learning will see.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from qwen_swe.config.settings import Settings
from qwen_swe.data.records import read_records
from qwen_swe.data.sample import Sample, Status
from qwen_swe.errors import DataError
from qwen_swe.rollout.contract import WeightUpdate

FIELDS = ("instance_id", "tokens", "response_length", "loss_mask")


def demo_line(sample: Sample, stumble: str | None = None) -> dict[str, Any]:
    meta = sample.metadata
    return {
        "instance_id": meta["instance_id"],
        "tokens": list(sample.tokens),
        "response_length": sample.response_length,
        "loss_mask": list(sample.loss_mask or []),
        "turns": meta.get("turns"),
        "tool_calls": meta.get("tool_calls"),
        "stumble": stumble,
    }


def mask_out(tokens: list[int], response_length: int, loss_mask: list[int], span: list[int]) -> list[int]:
    """``loss_mask`` with the first trained occurrence of ``span`` (a completion's ids) in the response set to 0:
    a stumble stays in the context the policy learns from, out of what it learns to write."""
    response = tokens[len(tokens) - response_length :]
    for start in range(len(response) - len(span) + 1):
        if response[start : start + len(span)] == span and all(loss_mask[start : start + len(span)]):
            return loss_mask[:start] + [0] * len(span) + loss_mask[start + len(span) :]
    raise DataError(
        "the stumble's completion is not among the demonstration's trained tokens; the expert and the "
        "proxy disagree on its token ids"
    )


def load_demos(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DataError(
            f"SFT_DATA={path} does not exist: collect demonstrations with `python -m qwen_swe.warmstart collect`"
        )
    demos = list(read_records(path.read_text().splitlines(), path, FIELDS, "re-collect the demonstrations"))
    if not demos:
        raise DataError(f"{path} holds no demonstrations")
    return demos


class DemoDriver:
    """The trainer's driver for ``TRAIN_MODE=sft``: ``ROLLOUT_BATCH_SIZE`` demonstrations per step,
    epoch after epoch in a seeded order; no rollouts, no server."""

    def __init__(self, settings: Settings) -> None:
        if not settings.train.sft_data:
            raise DataError("TRAIN_MODE=sft needs SFT_DATA (a demonstrations JSONL)")
        self.demos = load_demos(Path(settings.train.sft_data))
        self.batch = settings.rollout_batch_size
        self.seed = settings.seed
        self.position = 0

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.demos)))
        random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return order

    def generate(self, step: int, weight_version: int) -> tuple[list[Sample], dict[str, Any]]:
        samples = []
        for k in range(self.batch):
            epoch, index = divmod(self.position + k, len(self.demos))
            demo = self.demos[self._order(epoch)[index]]
            samples.append(
                Sample(
                    group_index=k,
                    index=0,
                    tokens=demo["tokens"],
                    response_length=demo["response_length"],
                    loss_mask=demo["loss_mask"],
                    reward=1.0,
                    status=Status.COMPLETED,
                    metadata={"instance_id": demo["instance_id"], "weight_version": weight_version, "resolved": True},
                )
            )
        self.position += self.batch
        return samples, {"sft/epoch": self.position / len(self.demos)}

    def sync_weights(self, update: WeightUpdate) -> None:
        """Nothing serves during the warm start: the exported folder is the result."""

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])

    def close(self) -> None:
        pass
