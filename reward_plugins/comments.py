"""The ``comments`` reward: are the code's comments present, sized sensibly and about the code?

Static rules (always on), each in [0, 1], averaged:

* density -- comment lines (``#`` comments and docstring lines) per code line: 1.0 inside
  [0.1, 0.5], proportionally less below, ``0.5 / density`` above (a wall of comments).
* information -- what each comment says beyond the code's own names: its words of three letters or more that are
  not words of the code's identifiers (``max_len`` contributes ``max`` and ``len``), Python keywords or common
  function words, ``min(1, count / 2)`` per comment, a comment repeated counting once; averaged over comments.
  A comment that only restates identifiers (``# max len words``) scores 0 here.
* length -- the share of comments between 2 and 40 words.

Gated on correctness, as ``maintainability``: 0.0 unless every test passes (the ``code`` reward's run, cached),
None on a row without tests, each with the reason, so a wrong program keeps no comments score under ``fixed``
aggregation either. Code without comments scores 0.0, saying why.

Optional LLM judge (off by default): with ``judge_url`` set, the code is sent to an
OpenAI-compatible ``/chat/completions`` endpoint (a local vLLM server, say) asking for a 0-10
comment-quality grade; the key, if any, is read from the environment variable named by
``judge_api_key_env``. The reward becomes ``(1 - judge_weight) * static + judge_weight * judge``;
if the judge fails, the static score is used, and the failure is logged and given as the reason.
"""

from __future__ import annotations

import ast
import io
import json
import keyword
import logging
import os
import re
import tokenize
import urllib.request
from typing import Any

from diffugrpo_plugin import Explained, Reason, hookimpl
from diffugrpo_plugin.rewards.judging import code_outcomes, correctness_gate, python_only
from diffugrpo_plugin.rewards.task_code import parse_python
from diffugrpo_plugin.sandbox.host import Sandbox

logger = logging.getLogger("diffugrpo.rewards")

DENSITY_BAND = (0.1, 0.5)
WORDS_PER_COMMENT = (2, 40)
MIN_WORD_LENGTH = 3
INFORMATIVE_WORDS = 2  # words beyond the code's names for a comment's full information score
FUNCTION_WORDS = frozenset(
    "the and for this that with from into are was were its has have had all any not but our you your then than "
    "when here there each via can will would should could does did been being which who what how why also only "
    "just some more most such very use used uses".split()
)
JUDGE_PROMPT = (
    "Grade the comments and docstrings of the following Python code from 0 (none, useless or "
    "misleading) to 10 (clear, accurate, explain why). Answer with the number only."
)


def _comments(code: str) -> tuple[list[str], set[int], set[int]]:
    """Comment texts (``#`` comments and docstrings), the lines they occupy, and the lines that
    are nothing but comment or docstring."""
    texts, comment_lines, pure_lines = [], set(), set()
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT:
            texts.append(token.string.lstrip("#").strip())
            comment_lines.add(token.start[0])
            if not token.line[: token.start[1]].strip():
                pure_lines.add(token.start[0])
    for node in ast.walk(parse_python(code)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and ast.get_docstring(
            node
        ):
            texts.append(ast.get_docstring(node))
            first = node.body[0]
            lines = set(range(first.lineno, first.end_lineno + 1))
            comment_lines |= lines
            pure_lines |= lines
    return [text for text in texts if text], comment_lines, pure_lines


def _identifier_words(code: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(parse_python(code)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    words = set()
    for name in names:
        for part in re.split(r"_|(?<=[a-z0-9])(?=[A-Z])", name):
            if len(part) >= MIN_WORD_LENGTH:
                words.add(part.lower())
    return words


def density_score(comment_lines: int, code_lines: int) -> float:
    if code_lines == 0:
        return 0.0
    density = comment_lines / code_lines
    low, high = DENSITY_BAND
    if density < low:
        return density / low
    return 1.0 if density <= high else high / density


def static_comment_score(code: str) -> float:
    """The mean of density, relevance and length (see module docstring); 0.0 without comments."""
    comments, comment_lines, pure_lines = _comments(code)
    if not comments:
        return 0.0
    nonblank = {number for number, line in enumerate(code.splitlines(), start=1) if line.strip()}
    density = density_score(len(comment_lines), len(nonblank - pure_lines))
    words_of = [re.findall(r"[A-Za-z0-9]+", comment) for comment in comments]
    information = _information(words_of, _identifier_words(code) | {word.lower() for word in keyword.kwlist})
    shortest, longest = WORDS_PER_COMMENT
    length = sum(shortest <= len(words) <= longest for words in words_of) / len(comments)
    return (density + information + length) / 3.0


def _information(words_of: list[list[str]], known: set[str]) -> float:
    """The mean over comments of ``min(1, new words / INFORMATIVE_WORDS)`` (see module docstring)."""
    seen: set[tuple[str, ...]] = set()
    total = 0.0
    for words in words_of:
        lowered = tuple(word.lower() for word in words)
        if lowered in seen:
            continue
        seen.add(lowered)
        new = {
            word
            for word in lowered
            if len(word) >= MIN_WORD_LENGTH and word.isalpha() and word not in known | FUNCTION_WORDS
        }
        total += min(1.0, len(new) / INFORMATIVE_WORDS)
    return total / len(words_of)


def judge_score(code: str, url: str, model: str, api_key_env: str, timeout_s: float) -> float:
    """The judge's 0-10 grade scaled to [0, 1]; raises on any transport or format problem."""
    body = {
        "model": model,
        "temperature": 0,
        "max_tokens": 8,
        "messages": [{"role": "system", "content": JUDGE_PROMPT}, {"role": "user", "content": code}],
    }
    headers = {"Content-Type": "application/json"}
    if os.environ.get(api_key_env):
        headers["Authorization"] = f"Bearer {os.environ[api_key_env]}"
    request = urllib.request.Request(
        url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - configured endpoint
        answer = json.loads(response.read(1 << 20))["choices"][0]["message"]["content"]
    grade = re.search(r"\d+(?:\.\d+)?", answer)
    if grade is None or not 0 <= float(grade.group()) <= 10:
        raise ValueError(f"the judge answered {answer!r}, not a grade from 0 to 10")
    return float(grade.group()) / 10.0


def comments_reward(
    completions: list,
    *,
    code_block: str = "first",
    require_format: bool = True,
    format_end: str = "exact",
    timeout_s: float | None = None,
    sandbox: Sandbox | None = None,
    judge_url: str | None = None,
    judge_model: str = "judge",
    judge_api_key_env: str = "DIFFUGRPO_JUDGE_API_KEY",
    judge_weight: float = 0.5,
    judge_timeout_s: float = 30.0,
    **columns: Any,
) -> list[float | Explained]:
    """Comment density, information and length of code that passes its tests; optionally blended with an LLM
    judge's grade."""
    judged = code_outcomes(
        completions,
        columns,
        code_block=code_block,
        require_format=require_format,
        format_end=format_end,
        timeout_s=timeout_s,
        sandbox=sandbox,
    )
    scores: list[float | Explained] = []
    for one in judged:
        if not one.all_passed:
            scores.append(correctness_gate(one))
            continue
        code = one.code
        if not _comments(code)[0]:
            scores.append(Explained(0.0, Reason("no_comments", "the code has no comments or docstrings")))
            continue
        static = static_comment_score(code)
        if judge_url is None:
            scores.append(static)
            continue
        try:
            judged = judge_score(code, judge_url, judge_model, judge_api_key_env, judge_timeout_s)
        except Exception as exc:  # noqa: BLE001 - the judge is optional: fall back to the static rules
            logger.warning("comments: the LLM judge at %s failed (%s); using the static score", judge_url, exc)
            scores.append(
                Explained(
                    static,
                    Reason(
                        "judge_failed", f"the LLM judge at {judge_url} failed ({type(exc).__name__}): static rules only"
                    ),
                )
            )
            continue
        scores.append((1.0 - judge_weight) * static + judge_weight * judged)
    return scores


@hookimpl
def diffugrpo_reward_functions():
    return {"comments": python_only(comments_reward)}
