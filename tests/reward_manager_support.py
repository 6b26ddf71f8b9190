"""verl rows for the reward manager's tests, and the byte-level tokenizer they are written with (not a test module)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl import DataProto

PROMPT_LENGTH, RESPONSE_LENGTH = 8, 160
CORRECT = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```\n"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```\n"
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {char: index for index, char in enumerate(alphabet)}
    vocab.update({"<pad>": len(vocab), "<eos>": len(vocab) + 1})
    byte_level = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    byte_level.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    byte_level.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=byte_level, pad_token="<pad>", eos_token="<eos>")


def _row(tokenizer, response: str, extra: dict, **top_level) -> DataProto:
    """One verl row: left-padded prompt, right-padded response, non-tensor columns as verl stores them."""
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert len(response_ids) <= RESPONSE_LENGTH
    prompt_ids = tokenizer("add?", add_special_tokens=False)["input_ids"]
    prompts = torch.full((1, PROMPT_LENGTH), tokenizer.pad_token_id)
    prompts[0, PROMPT_LENGTH - len(prompt_ids) :] = torch.tensor(prompt_ids)
    responses = torch.full((1, RESPONSE_LENGTH), tokenizer.pad_token_id)
    responses[0, : len(response_ids)] = torch.tensor(response_ids)
    attention_mask = torch.zeros((1, PROMPT_LENGTH + RESPONSE_LENGTH), dtype=torch.long)
    attention_mask[0, PROMPT_LENGTH - len(prompt_ids) : PROMPT_LENGTH + len(response_ids)] = 1
    non_tensors = {
        "data_source": np.array(["unit"], dtype=object),
        "reward_model": np.array([{"ground_truth": "", "style": "rule"}], dtype=object),
        "extra_info": np.array([extra], dtype=object),
        **{key: np.array([value], dtype=object) for key, value in top_level.items()},
    }
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attention_mask},
        non_tensors=non_tensors,
        meta_info={"global_steps": 3},
    )
