"""How much memory a sampler step needs per row, and how many rows fit a budget (no torch import).

The sampler's working memory is dominated by vocabulary-sized buffers that grow with the rows denoised
together: the model's logits for every position (``[rows, tokens, vocab]`` in the rollout dtype, twice when
shifted logits are aligned) and the fp32 buffers over the completion window (``[rows, window, vocab]``: the
``.float()`` logits, the kept logits of the fast path, top-p's sorted copies ...). At 7B scale (vocab 152k,
256 completion tokens) one row needs about 1.8 GB, so 80 rows at once would need 145 GB. :func:`rows_within`
turns a budget into a micro-batch, which the loop uses when ``micro_batch_size`` is not set: every row keeps its
own generator, so the split changes no output.

:mod:`diffugrpo_plugin.tools.step_memory` (``diffugrpo check-model``) counts the same terms from these functions.
"""

from __future__ import annotations

GIB = 2**30

WINDOW_COPIES = 10
"""fp32 window-sized buffers at a sampler step's peak: at the first step (every position masked), inside top-p,
the window's ``.float()`` logits (sampling/denoising.py), their live-row copy, the packed masked rows, the
temperature-scaled copy, top-p's sorted values, int64 indices (2), softmax, cumulative sum and its difference
(7 greedy without top-p; both measured by tests/test_check_model.py on a real sampler step)."""

DEFAULT_BUDGET_GIB = 16.0
"""The sampler's default budget for its vocabulary-sized buffers: 8 rows at a time for Dream-7B at 200 + 256
tokens (``diffugrpo check-model`` prints the micro-batch for a checkpoint and lengths), under what an 80 GB GPU has
left after an 8-GPU FSDP2 7B step's held memory."""


def logits_bytes_per_row(vocab: int, tokens: int, logits_dtype_bytes: int, logits_shift: bool) -> int:
    """The model's logits for one row's whole sequence; aligning shifted logits concatenates a copy."""
    copies = 2 if logits_shift else 1
    return copies * tokens * vocab * logits_dtype_bytes


def window_bytes_per_row(vocab: int, window: int, copies: int = WINDOW_COPIES) -> int:
    """The fp32 buffers over one row's completion window at a step's peak (see :data:`WINDOW_COPIES`)."""
    return copies * window * vocab * 4


def vocabulary_bytes_per_row(
    vocab: int, prompt_length: int, completion_length: int, logits_dtype_bytes: int, logits_shift: bool
) -> int:
    """Both of one row's vocabulary-sized terms, the window taken as the whole completion (an upper bound:
    a block's window is at most the completion, and LLaDA's revisiting loop's window is all of it)."""
    return logits_bytes_per_row(
        vocab, prompt_length + completion_length, logits_dtype_bytes, logits_shift
    ) + window_bytes_per_row(vocab, completion_length)


def rows_within(budget_bytes: float, row_bytes: int, rows: int) -> int:
    """Rows to denoise together so that ``rows x row_bytes`` stays under the budget: at least 1, at most ``rows``."""
    if budget_bytes <= 0:
        raise ValueError(f"memory_budget_gib must be > 0, got {budget_bytes / GIB:g} GiB")
    return max(1, min(rows, int(budget_bytes // max(row_bytes, 1))))
