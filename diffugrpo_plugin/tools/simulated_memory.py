"""Run our real code at a real model's shapes without its memory: big tensors are fake, the bookkeeping is real.

A 7B model, its optimizer and a sampler's ``[rows, width, vocab]`` logits do not fit this machine, and a
``FakeTensorMode`` run of the whole step cannot follow the code's data-dependent control flow (which positions are
masked, which rows are live, ``.tolist()`` of sizes). :class:`SimulatedMemory` splits the two: a tensor is **fake**
(shape, dtype, device; no data, no memory) when it is made from a fake tensor or is a floating-point tensor of more
than ``fake_above`` elements made from nothing (a weight's initialisation, an FSDP all-gather buffer, an optimizer
moment); every other tensor is **real**: token ids, masks, indices, seeds, small float tensors (a masker's noise
draws), so ``nonzero``, boolean indexing and Python ``if`` on them run as written. Boolean indexing of a fake tensor
with a real mask is rewritten to the mask's real indices, so its result has a static shape.

What the model decides is unknowable without its values. Inside :meth:`SimulatedMemory.zero_decisions` (what a
sampler run uses), every result of a fake operation of at most ``fake_above`` elements becomes a real tensor of
zeros: the scores, token ids and probabilities the model's logits lead to. The loop then runs as it would for a
model that always proposes token 0 at probability 0, which is never EOS and never passes a threshold (random
weights come close: benchmarks/gpu.py measured no early stop and no threshold step at 7B): every row runs every
step and block to full length, decided positions are decided as the schedule says, and each step's tensors have the
shapes a real run's have. Outside it, when an operation would write fake values into a real
tensor (the sampler writing the tokens it chose into the canvas, or the rows whose tokens changed), the write is
resolved to the **worst case for memory**: a boolean tensor becomes all true (every row changed, every position
chosen), any other keeps its values (nothing gets unmasked: every step sees the first step's fully masked canvas,
the sampler's peak). Likewise a yes/no read of the model's values (``if tied.any():``) is yes, and a boolean index
made from them selects everything. A tensor that takes part in autograd written that way is an error naming the
operation: the simulation would lose the values' graph.

Every tensor storage made while the mode is active, or handed to :meth:`SimulatedMemory.track`, is counted by its
bytes until it is freed (a weak reference's callback; ``UntypedStorage.resize_``, which FSDP2 uses to free and
re-allocate its unsharded parameters, is followed), as ``device`` memory, or ``host`` memory for the storages
:meth:`SimulatedMemory.track` was told live there. Peaks are kept per kind and per named stage
(:meth:`SimulatedMemory.stage`). This is what CUDA's ``max_memory_allocated`` measures: the caching allocator's
reserve and fragmentation, CUDA context and NCCL buffers are not in it.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only

DEVICE, HOST = "device", "host"
GIB = 2**30
FAKE_ABOVE = 1 << 16  # elements: a float tensor made from nothing above this is fake
REAL_LIMIT_BYTES = 1 << 30  # a real tensor this big means the split failed: stop rather than fill the host


class SimulationError(RuntimeError):
    """The simulated code did something the simulation cannot follow; the message names the operation."""


@dataclass
class StagePeak:
    """The most memory alive at once during a stage, and what was alive when it began."""

    peak: dict[str, int] = field(default_factory=lambda: {DEVICE: 0, HOST: 0})
    start: dict[str, int] = field(default_factory=lambda: {DEVICE: 0, HOST: 0})

    def gib(self, kind: str = DEVICE) -> float:
        return self.peak[kind] / GIB


def _storages(tensor: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages behind ``tensor``: a DTensor's are its local shard's."""
    local = getattr(tensor, "_local_tensor", None)
    if local is not None:
        return _storages(local)
    return [tensor.untyped_storage()]


def _writes(func) -> list[int]:
    """Indices of the arguments ``func`` writes to (in-place and ``out=`` operations)."""
    return [i for i, arg in enumerate(func._schema.arguments) if arg.alias_info is not None and arg.alias_info.is_write]


class SimulatedMemory(TorchDispatchMode):
    """A dispatch mode that makes big tensors fake and counts every storage's bytes (see the module docstring).

    Use :meth:`fake_factory` (a context) to build a model fake, or rely on ``fake_above``; then run the code inside
    the mode and read :attr:`peak`, :attr:`current` and :attr:`stages`.
    """

    def __init__(self, fake_above: int = FAKE_ABOVE):
        super().__init__()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.fake_above = fake_above
        self.current = {DEVICE: 0, HOST: 0}
        self.peak = {DEVICE: 0, HOST: 0}
        self.stages: dict[str, StagePeak] = {}
        self._active: list[StagePeak] = []
        self._live: dict[int, tuple[int, str, weakref.ref]] = {}  # id(storage) -> (bytes, kind, ref)
        self._host_ids: set[int] = set()
        self._original_resize = torch.UntypedStorage.resize_
        self._zero_decisions = False

    # --- accounting ---------------------------------------------------------------------------------------------

    def _add(self, kind: str, nbytes: int) -> None:
        self.current[kind] += nbytes
        if self.current[kind] > self.peak[kind]:
            self.peak[kind] = self.current[kind]
        for stage in self._active:
            stage.peak[kind] = max(stage.peak[kind], self.current[kind])

    def _freed(self, key: int, _ref=None) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            self.current[entry[1]] -= entry[0]

    def _count(self, storage: torch.UntypedStorage, kind: str | None = None) -> None:
        key = id(storage)
        if key in self._live:
            return
        kind = kind or (HOST if key in self._host_ids else DEVICE)
        nbytes = storage.nbytes()
        self._live[key] = (nbytes, kind, weakref.ref(storage, lambda ref, key=key: self._freed(key)))
        self._add(kind, nbytes)

    def track(self, *objects: Any, host: bool = False) -> None:
        """Count tensors made before the mode started (or elsewhere): tensors, modules (parameters, buffers and
        gradients), optimizers (their state); ``host``: they live in host memory (an offloaded shard)."""
        for obj in objects:
            if isinstance(obj, torch.nn.Module):
                tensors = [*obj.parameters(), *obj.buffers()]
                tensors += [p.grad for p in obj.parameters() if p.grad is not None]
            elif isinstance(obj, torch.optim.Optimizer):
                tensors = [t for state in obj.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
            else:
                tensors = [obj]
            for tensor in tensors:
                for storage in _storages(tensor):
                    if host:
                        self._host_ids.add(id(storage))
                        self._freed(id(storage))  # counted again, as host memory
                    self._count(storage, HOST if host else None)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[StagePeak]:
        """Record the peak of ``name`` (the most alive at once from its start to its end; a stage run twice
        keeps the larger)."""
        record = StagePeak(peak=dict(self.current), start=dict(self.current))
        self._active.append(record)
        try:
            yield record
        finally:
            self._active.remove(record)
            kept = self.stages.get(name)
            if kept is None or record.peak[DEVICE] >= kept.peak[DEVICE]:
                self.stages[name] = record

    @contextlib.contextmanager
    def fake_factory(self) -> Iterator[None]:
        """Inside, every tensor made from nothing is fake (building a model's weights), whatever its size."""
        previous, self.fake_above = self.fake_above, -1
        try:
            yield
        finally:
            self.fake_above = previous

    @contextlib.contextmanager
    def zero_decisions(self) -> Iterator[None]:
        """Inside, small results of fake operations are real zeros (see the module docstring)."""
        previous, self._zero_decisions = self._zero_decisions, True
        try:
            yield
        finally:
            self._zero_decisions = previous

    # --- the mode -----------------------------------------------------------------------------------------------

    def __enter__(self):
        mode = self

        def resize_(storage, size):
            mode._original_resize(storage, size)
            entry = mode._live.get(id(storage))
            if entry is not None and entry[0] != storage.nbytes():
                mode.current[entry[1]] -= entry[0]
                mode._live[id(storage)] = (storage.nbytes(), entry[1], entry[2])
                mode._add(entry[1], storage.nbytes())

        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._original_resize
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(t.__name__ == "DTensor" for t in types):
            return NotImplemented  # DTensor turns itself into local-tensor operations, which come back here
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        if any(isinstance(t, FakeTensor) for t in tensors):
            out = self._fake_operation(func, args, kwargs)
            if self._zero_decisions:
                out = tree_map_only(FakeTensor, self._zeros_if_small, out)
        elif not tensors:
            out = self._factory(func, args, kwargs)
        else:
            out = func(*args, **kwargs)
        tree_map_only(torch.Tensor, self._count_output, out)
        return out

    def _zeros_if_small(self, tensor: FakeTensor) -> torch.Tensor:
        if tensor.numel() > self.fake_above:
            return tensor
        return torch.zeros(tensor.shape, dtype=tensor.dtype, device=tensor.device)

    def _count_output(self, tensor: torch.Tensor) -> None:
        for storage in _storages(tensor):
            if not isinstance(tensor, FakeTensor) and storage.nbytes() > REAL_LIMIT_BYTES:
                raise SimulationError(
                    f"a real tensor of {storage.nbytes() / GIB:.1f} GiB {tuple(tensor.shape)} {tensor.dtype} was "
                    f"made from real inputs only: the simulation would fill the host; make its inputs fake"
                )
            self._count(storage)

    def _factory(self, func, args, kwargs):
        """A tensor made from nothing: fake when it is floating point and big (or inside :meth:`fake_factory`)."""
        with self.fake_mode:
            shaped = func(*args, **kwargs)
        outputs = [t for t in tree_flatten(shaped)[0] if isinstance(t, torch.Tensor)]
        if all(t.is_floating_point() and t.numel() > self.fake_above for t in outputs):
            return shaped
        del shaped
        return func(*args, **kwargs)

    def _fake_operation(self, func, args, kwargs):
        written = [args[i] for i in _writes(func) if i < len(args) and isinstance(args[i], torch.Tensor)]
        real_written = [t for t in written if not isinstance(t, FakeTensor)]
        if real_written:
            return self._worst_case_write(func, real_written, args)
        if func in _SCALAR:
            if args[0].dtype != torch.bool:
                raise SimulationError(
                    f"the code reads a number from a fake {args[0].dtype} tensor {tuple(args[0].shape)} "
                    f"({func}); only a yes/no decision on the model's values can be simulated (as yes)"
                )
            return True
        if func in _INDEXING and any(_is_mask(index) for index in args[1] if index is not None):
            args = (args[0], _static_indices(args[1]), *args[2:])
        return func(*args, **kwargs)

    def _worst_case_write(self, func, real_written: list[torch.Tensor], args):
        for tensor in real_written:
            if tensor.requires_grad or tensor.grad_fn is not None:
                raise SimulationError(
                    f"{func} writes fake values into a real {tensor.dtype} tensor {tuple(tensor.shape)} that takes part "
                    f"in autograd: the simulation would lose the values' graph; make that tensor fake"
                )
            if tensor.dtype == torch.bool:
                tensor.fill_(True)
            # any other tensor keeps its values: nothing the model decided is written
        return args[_writes(func)[0]] if _writes(func) else real_written[0]


def _static_indices(indices: list) -> list:
    """Boolean indices as the integer indices they select, so that a fake result has a known shape: a real mask's
    own, a fake mask's all of them (the worst case).  # each mask [*S] -> len(S) index tensors [n]"""
    expanded = []
    for index in indices:
        if not _is_mask(index):
            expanded.append(index)
            continue
        if isinstance(index, FakeTensor):
            with unset_fake_temporarily():
                index = torch.ones(index.shape, dtype=torch.bool)
        expanded.extend(index.nonzero(as_tuple=True))
    return expanded


def _is_mask(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.bool


_SCALAR = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default}
_INDEXING = {
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put.default,
    torch.ops.aten.index_put_.default,
    torch.ops.aten._index_put_impl_.default,
}


@contextlib.contextmanager
def real_values() -> Iterator[None]:
    """Inside, nothing is fake (for code that must see values, e.g. a tokenizer)."""
    with unset_fake_temporarily():
        yield
