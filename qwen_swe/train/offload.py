"""The trainer's resident state moved to host memory and back, for COLOCATE (the trainer and vLLM taking turns on
the same GPUs): the optimizer state and the parameters leave the device while vLLM generates, and return, bit for
bit, before the next step.

Why at the storage level: every tensor keeps its identity (the optimizer's references to the parameters, FSDP2's
sharded parameters that are views into one flat shard, tied weights), and ``resize_(0)`` really returns the memory to
the allocator, on a GPU and on the CPU alike, so the same code path runs in the CPU tests. A storage shared by
several tensors is copied once. Nothing of this is collective: each rank moves its own shard.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from qwen_swe.errors import TrainerError


@dataclass
class _Parked:
    storage: torch.UntypedStorage  # the device storage, resized to 0 while parked
    host: torch.UntypedStorage  # its bytes in host memory (pinned on a GPU, for fast copies back)


@dataclass
class StateOffload:
    """One group of tensors (e.g. "optimizer" or "parameters") that can be parked in host memory and restored."""

    name: str
    tensors: Iterable[torch.Tensor]
    parked: list[_Parked] = field(default_factory=list)
    hosts: dict[int, torch.UntypedStorage] = field(default_factory=dict)  # kept across turns: pinning is slow

    @property
    def offloaded(self) -> bool:
        return bool(self.parked)

    def offload(self) -> int:
        """Copy every storage to host memory and release it on the device; returns the bytes released."""
        if self.parked:
            raise TrainerError(f"the trainer's {self.name} is already offloaded: reload it first")
        released = 0
        for storage in _unique_storages(self.tensors):
            host = self.hosts.get(storage._cdata)
            if host is None or host.nbytes() != storage.nbytes():
                host = torch.empty(
                    storage.nbytes(), dtype=torch.uint8, device="cpu", pin_memory=storage.device.type == "cuda"
                ).untyped_storage()
                self.hosts[storage._cdata] = host
            host.copy_(storage)
            released += storage.nbytes()
            self.parked.append(_Parked(storage, host))
        for parked in self.parked:  # after every copy: a storage seen twice must not be copied after its release
            parked.storage.resize_(0)
        return released

    def reload(self) -> int:
        """Give every storage its bytes back, on the device it came from; returns the bytes restored."""
        restored = 0
        for parked in self.parked:
            parked.storage.resize_(parked.host.nbytes())
            parked.storage.copy_(parked.host, non_blocking=False)
            restored += parked.host.nbytes()
        self.parked = []
        return restored


def _unique_storages(tensors: Iterable[torch.Tensor]) -> Iterator[torch.UntypedStorage]:
    seen: set[int] = set()
    for tensor in tensors:
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor's own shard
        storage = local.untyped_storage()
        key = storage._cdata  # the storage itself; its data pointer is 0 for every empty storage
        if storage.nbytes() == 0 or key in seen:
            continue
        seen.add(key)
        yield storage


def parameters_and_buffers(*modules: nn.Module | None) -> list[torch.Tensor]:
    """The tensors a model keeps between steps (its gradients are freed by ``zero_grad(set_to_none=True)``)."""
    out: list[torch.Tensor] = []
    for module in modules:
        if module is not None:
            out += [p.detach() for p in module.parameters()] + list(module.buffers())
    return out


def optimizer_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's tensors (AdamW: both moments; its ``step`` counters too, which are tiny)."""
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


class TrainerOffload:
    """The trainer's two groups, released in the order the colocated step needs them gone: the optimizer state right
    after the step (the weights are still needed for the push into the server), the parameters after the push."""

    def __init__(self, optimizer: torch.optim.Optimizer, *modules: nn.Module | None) -> None:
        # optimizer state appears at the first step, so it is looked up at each offload, not now
        self.optimizer = StateOffload("optimizer state", ())
        self.parameters = StateOffload("parameters", parameters_and_buffers(*modules))
        self._optimizer = optimizer

    def offload_optimizer(self) -> int:
        self.optimizer.tensors = optimizer_state(self._optimizer)
        return _returned(self.optimizer.offload())

    def offload_parameters(self) -> int:
        return _returned(self.parameters.offload())

    def reload(self) -> int:
        """Everything back on the device (parameters first: the optimizer's state follows them)."""
        return self.parameters.reload() + self.optimizer.reload()


def _returned(released: int) -> int:
    """The caching allocator keeps freed blocks for this process; vLLM, another process, needs them given back."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return released
