"""What the code rewards and the evaluation share: the code a completion offers, its test outcomes,
and the reason a completion scored less than full marks.

* :func:`format_verdict`: DiffuCoder's format rule (one fenced ```python block ending the text,
  then exactly one newline; ``format_end="lenient"`` also accepts other whitespace or none) and,
  where it fails, how.
* :func:`offered_code`: the code a completion offers for judging, or the reason it offers none.
* :func:`code_outcomes`: per completion, the row's tests, the code judged, every test's sandboxed
  outcome and the reason it did not pass; ``code``, ``efficiency``, ``maintainability``,
  ``diffugrpo eval`` and ``diffugrpo rewards score`` all judge through it, so a score means the
  same everywhere.
* :func:`rows_of` / :func:`completion_text`: TRL's column-per-field calling convention.

Reasons are :class:`~diffugrpo_plugin.hooktypes.Reason` values; the kinds given here:

==================  ==========================================================================
``empty``           the completion is empty
``too_long``        longer than :data:`MAX_COMPLETION_CHARS`: never parsed
``no_code_block``   no fenced ```python block (a bare body counts only where asked for)
``format``          not in the training format: how (first fence, unclosed block, text after it)
``syntax_error``    the code does not parse: the line and the parser's message
``no_tests``        the row has no tests (the reward is None, not 0)
``tests_failed``    how many tests failed, and the first one's outcome and detail
``not_applicable``  a Python-only reward on another language's row (:func:`python_only`): None, not 0
``task_error``      the task's own tests or code cannot be judged (:class:`~.code_tests.TaskError`): None, not 0
==================  ==========================================================================

Sits below the reward plugins (``reward_plugins/`` imports it, never the other way) on top of
:mod:`~diffugrpo_plugin.rewards.code_tests`. No torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from diffugrpo_plugin.hooktypes import Explained, Reason
from diffugrpo_plugin.rewards.code_tests import (
    FORMAT_ENDS,
    TaskError,
    TestSpec,
    extract_code,
    language_of,
    tests_from_row,
)
from diffugrpo_plugin.rewards.task_code import parse_python
from diffugrpo_plugin.rewards.test_runs import Outcome, TestOutcome, run_tests_many
from diffugrpo_plugin.sandbox.config import SandboxError
from diffugrpo_plugin.sandbox.host import Sandbox
from diffugrpo_plugin.sandbox.languages import language as get_language

# Far beyond any rollout (about 25k tokens); longer text is not parsed here at all: it scores as no code.
MAX_COMPLETION_CHARS = 100_000
FENCE = "```"
EXCERPT_CHARS = 60
NO_CODE_BLOCK = Reason("no_code_block", "no closed, fenced ```python block")
NO_TESTS = Reason(
    "no_tests",
    "the row has no tests (no test_cases, test_list, test + entry_point or "
    "inputs/outputs column): not applicable, None rather than 0",
)


def completion_text(completion: Any) -> str:
    """A completion as text: plain strings, or TRL's conversational form (last message's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion and isinstance(completion[-1], Mapping):
        return str(completion[-1].get("content", ""))
    raise TypeError(f"a completion must be a string or a list of chat messages, got {type(completion).__name__}")


def _shortened(text: str) -> str:
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."


def _excerpt(text: str) -> str:
    """A piece of the completion, quoted so that its whitespace shows."""
    return repr(_shortened(text))


def syntax_problem(code: str, lines_before: int = 0) -> Reason | None:
    """Why ``code`` does not parse (parsed only, never executed); None when it does. ``lines_before``: lines of
    the block cut off before ``code``, so that the reason names the block's own line."""
    try:
        parse_python(code)
    except SyntaxError as error:
        line = error.lineno + lines_before if error.lineno is not None else None
        return Reason("syntax_error", f"syntax error at line {line} of the code: {error.msg}")
    except ValueError as error:  # a null byte
        return Reason("syntax_error", f"the code cannot be parsed: {error}")
    except (RecursionError, MemoryError):
        return Reason("syntax_error", "the code is nested too deeply to parse")
    return None


def _unfenced(text: str, language: str = "python") -> Reason:
    if not text.strip():
        return Reason("empty", "the completion is empty")
    return Reason("no_code_block", f"no fenced ```{_fence(language)} block")


def _fence(language: str) -> str:
    return get_language(language).fences[0]


def _opener(text: str, at: int, language: str) -> str | None:
    """The opening fence line of ``language``'s block at ``at`` (```python alone for Python, as DiffuCoder's pattern
    has it; any of the language's names otherwise: ```cpp or ```c++), or None."""
    fences = ("python",) if language == "python" else get_language(language).fences
    for fence in fences:
        if text.startswith(f"{FENCE}{fence}\n", at):
            return f"{FENCE}{fence}\n"
    return None


def _format_shape(text: str, format_end: str = "exact", language: str = "python") -> tuple[str | None, Reason | None]:
    """The code of DiffuCoder's single block, or how ``text`` misses that shape.

    DiffuCoder's pattern (``re.fullmatch``): no ``` before the ```python fence (the ``language``'s fence), none
    inside the block, and the closing fence followed by exactly one newline ends the text. With
    ``format_end="lenient"`` the closing fence may be followed by any whitespace or by nothing (a
    completion that stops at EOS right after the fence).
    """
    if format_end not in FORMAT_ENDS:
        raise ValueError(f"format_end must be one of {FORMAT_ENDS}, got {format_end!r}")
    first = text.find(FENCE)
    if first == -1:
        return None, _unfenced(text, language)
    fence = _fence(language)
    opener = _opener(text, first, language)
    if opener is None:
        found = text[first:].split("\n", 1)[0]
        return None, Reason(
            "format", f"the first fence opens {_excerpt(found)}; the format needs ```{fence} alone on its line"
        )
    body = first + len(opener)
    close = text.find(FENCE, body)
    if close == -1:
        return None, Reason("format", f"the ```{fence} block is never closed (was the completion cut off?)")
    tail = text[close + len(FENCE) :]
    if FENCE in tail:
        return None, Reason("format", f"{text.count(FENCE)} ``` fences; the format allows exactly one block")
    if tail.strip():
        return None, Reason(
            "format", f"text after the closing fence: {_excerpt(tail.strip())}; the block must end the completion"
        )
    if format_end == "exact" and tail != "\n":
        found = "nothing" if not tail else _excerpt(tail)
        return None, Reason(
            "format",
            f"{found} after the closing fence; DiffuCoder's format ends with exactly one "
            f"newline there (format_end=lenient accepts any whitespace or none)",
        )
    return text[body:close], None


def format_verdict(text: str, format_end: str = "exact", language: str = "python") -> tuple[float, Reason | None]:
    """DiffuCoder's format reward and, below 1.0, why: 0.0 (wrong shape, or longer than
    :data:`MAX_COMPLETION_CHARS`), 0.5 (right shape, the code does not parse) or 1.0.
    ``format_end``: what may follow the closing fence (:data:`~diffugrpo_plugin.rewards.code_tests.FORMAT_ENDS`).
    Another ``language`` (DiffuCoder's ``get_code_format_reward(language)``): its fence, and 1.0 on the shape alone
    (no parser here; its compiler decides, for the ``code`` reward)."""
    if len(text) > MAX_COMPLETION_CHARS:
        return 0.0, Reason("too_long", f"{len(text)} characters, over the {MAX_COMPLETION_CHARS} judged: not parsed")
    code, reason = _format_shape(text, format_end, language)
    if code is None:
        return 0.0, reason
    if language != "python":
        return 1.0, None
    # DiffuCoder parses the block stripped (``code.strip()``): whitespace before its first line is no syntax error
    # here (running the code still fails, for the code reward, as there)
    stripped = code.strip()
    problem = syntax_problem(stripped, lines_before=code[: len(code) - len(code.lstrip())].count("\n"))
    return (0.5, problem) if problem is not None else (1.0, None)


@dataclass(frozen=True)
class Offer:
    """The code a completion offers for judging, or None and the :class:`Reason` it offers none."""

    code: str | None
    reason: Reason | None = None


def offered_code(
    completion: Any,
    code_block: str = "first",
    require_format: bool = True,
    bare_code: bool = False,
    starter: str | None = None,
    format_end: str = "exact",
    language: str = "python",
) -> Offer:
    """The code a completion offers for judging, or the reason it offers none.

    With ``require_format`` (DiffuCoder's behaviour) only completions whose format score is 1.0
    count (``format_end`` as in :func:`format_verdict`); they hold exactly one block, so
    ``code_block`` matters only without it. With
    ``bare_code``, a completion without any ``` fence is code itself, HumanEval-style: appended
    to ``starter`` (the signature and docstring the prompt showed) when there is one. Text longer
    than :data:`MAX_COMPLETION_CHARS` offers none: it is never parsed. ``language``: the row's, whose fence counts.
    """
    text = completion_text(completion)
    if len(text) > MAX_COMPLETION_CHARS:
        return Offer(None, format_verdict(text, format_end, language)[1])
    if bare_code and FENCE not in text and text.strip():
        return Offer(f"{starter.rstrip()}\n{text}" if starter else text)
    if require_format:
        score, reason = format_verdict(text, format_end, language)
        if score != 1.0:
            return Offer(None, reason)
    code = extract_code(text, code_block, language)
    if code is None:
        reason = _unfenced(text, language) if FENCE not in text else _format_shape(text, format_end, language)[1]
        return Offer(None, reason or Reason("no_code_block", f"no closed, fenced ```{_fence(language)} block"))
    return Offer(code)


def outcomes_reason(code: str, outcomes: Sequence[TestOutcome]) -> Reason | None:
    """Why ``code`` did not pass every test (None when it did): the syntax error, or how many tests
    failed and how the first one did."""
    failed = [outcome for outcome in outcomes if not outcome.passed]
    if not failed:
        return None
    problem = syntax_problem(code) if failed[0].outcome is Outcome.SYNTAX_ERROR else None  # Python's parser only
    if problem is not None:
        return problem
    first = failed[0]
    detail = f": {_shortened(first.detail)}" if first.detail else ""
    return Reason(
        "tests_failed",
        f"{len(failed)} of {len(outcomes)} tests failed; first: test {first.index} {first.outcome.value}{detail}",
    )


def rows_of(columns: Mapping[str, Sequence], count: int) -> list[dict[str, Any]]:
    """Per-completion rows from TRL-style columns (each a list with one value per completion)."""
    rows: list[dict[str, Any]] = [{} for _ in range(count)]
    for name, values in columns.items():
        if not isinstance(values, (list, tuple)) or len(values) != count:
            length = len(values) if hasattr(values, "__len__") else "no"
            raise ValueError(f"column {name!r} must be a list with one value per completion ({count}), got {length}")
        for row, value in zip(rows, values):
            row[name] = value
    return rows


def row_languages(columns: Mapping[str, Any], count: int) -> list[str]:
    """Each completion's language, from the ``language`` column (``python`` where there is none)."""
    if "language" not in columns:
        return ["python"] * count
    return [language_of(row) for row in rows_of({"language": columns["language"]}, count)]


def python_only(reward):
    """A reward that reads Python (its parser, its metrics) scores None, not applicable, on another language's
    rows, and runs on the Python rows alone. Keyword arguments holding one value per completion are columns."""

    @functools.wraps(reward)
    def scored(completions: list, **keywords: Any) -> list:
        count = len(completions)
        languages = row_languages(keywords, count)
        python = [position for position, language in enumerate(languages) if language == "python"]
        if len(python) == count:
            return reward(completions, **keywords)
        results: list = [
            Explained(None, Reason("not_applicable", f"{reward.__name__} reads Python; this row is {language}"))
            for language in languages
        ]
        if python:
            picked = {
                name: [value[position] for position in python]
                if isinstance(value, (list, tuple)) and len(value) == count
                else value
                for name, value in keywords.items()
            }
            for position, result in zip(python, reward([completions[position] for position in python], **picked)):
                results[position] = result
        return results

    return scored


def outcomes_for(
    pairs: Sequence[tuple[str, TestSpec] | None],
    sandbox: Sandbox | None,
    timeout_s: float | None,
    count_lines: bool = False,
    no_fork: bool = False,
) -> list[list[TestOutcome] | None]:
    """Sandboxed outcomes for each (code, tests) pair, concurrently and cached; None for a None pair, and for one
    whose task's own code failed in the judge (``count_lines``, ``no_fork``: see
    :func:`~diffugrpo_plugin.rewards.test_runs.run_tests`).

    Raises the :class:`SandboxError` of a pair whose sandbox failed: a harness fault is never the
    code's fault and never a score (the rewards core then scores the rows it concerns None, flagged).
    """
    return [
        None if isinstance(result, TaskError) else result
        for result in _results_for(pairs, sandbox, timeout_s, count_lines, no_fork)
    ]


def _results_for(
    pairs: Sequence[tuple[str, TestSpec] | None],
    sandbox: Sandbox | None,
    timeout_s: float | None,
    count_lines: bool,
    no_fork: bool = False,
) -> list[list[TestOutcome] | TaskError | None]:
    """:func:`outcomes_for` with the :class:`TaskError` of a pair whose task's code failed in the judge kept."""
    wanted = [pair for pair in pairs if pair is not None]
    results = iter(run_tests_many(wanted, sandbox, timeout_s, count_lines=count_lines, no_fork=no_fork))
    outcomes: list[list[TestOutcome] | TaskError | None] = []
    for pair in pairs:
        result = next(results) if pair is not None else None
        if isinstance(result, SandboxError):
            raise result
        outcomes.append(result)
    return outcomes


def task_error_reason(error: TaskError) -> Reason:
    """What a row whose task cannot be judged scores with: None, and this."""
    return Reason("task_error", f"the task cannot be judged, whatever the program: {error}")


@dataclass(frozen=True)
class Judged:
    """One completion judged against its row: the row's tests (None: it has none, or they cannot be judged), the
    code offered (or why none), one outcome per test (None: not run, for want of tests or code), and where the
    task's own tests or code cannot be judged, why (``task_error``: the row scores None)."""

    spec: TestSpec | None
    offer: Offer
    outcomes: list[TestOutcome] | None
    task_error: Reason | None = None

    @property
    def code(self) -> str | None:
        return self.offer.code

    @property
    def all_passed(self) -> bool | None:
        """The correctness gate of the quality rewards: None when the row has no tests, False when
        there is no code or a test failed, True when all passed."""
        if self.spec is None or self.task_error is not None:
            return None
        return self.outcomes is not None and all(outcome.passed for outcome in self.outcomes)

    @property
    def reason(self) -> Reason | None:
        """Why not every test passed: the task cannot be judged, no tests, no code (the tests were not run), or the
        failures."""
        if self.task_error is not None:
            return self.task_error
        if self.spec is None:
            return NO_TESTS
        if self.offer.code is None or self.outcomes is None:
            why = self.offer.reason or NO_CODE_BLOCK
            return Reason(why.kind, f"tests not run: {why.detail}")
        return outcomes_reason(self.offer.code, self.outcomes)


def code_outcomes(
    completions: Sequence,
    columns: Mapping[str, Sequence],
    *,
    code_block: str = "first",
    require_format: bool = True,
    format_end: str = "exact",
    timeout_s: float | None = None,
    sandbox: Sandbox | None = None,
) -> list[Judged]:
    """Every completion judged against its row's tests (see :class:`Judged`).

    Runs are cached, so the quality rewards reuse the ``code`` reward's run. A row whose task cannot be judged (a
    malformed test column, tests that do not parse, a preamble that fails in the judge: :class:`TaskError`) is
    judged alone, with that reason (:attr:`Judged.task_error`); the other rows are judged as usual. Raises
    :class:`~diffugrpo_plugin.sandbox.host.SandboxError` when the sandbox itself failed.
    """
    rows = rows_of(columns, len(completions))
    specs: list[TestSpec | None] = []
    broken: list[Reason | None] = []
    for row in rows:
        try:
            specs.append(tests_from_row(row))
            broken.append(None)
        except TaskError as error:
            specs.append(None)
            broken.append(task_error_reason(error))
    offers = [
        _offer_of(completion, row, code_block, require_format, format_end) for completion, row in zip(completions, rows)
    ]
    pairs = [
        (offer.code, spec) if offer.code is not None and spec is not None else None
        for offer, spec in zip(offers, specs)
    ]
    judged = []
    for spec, offer, result, why in zip(specs, offers, _results_for(pairs, sandbox, timeout_s, False), broken):
        if isinstance(result, TaskError):
            judged.append(Judged(None, offer, None, task_error_reason(result)))
        else:
            judged.append(Judged(spec, offer, result, why))
    return judged


def _offer_of(completion: Any, row: Mapping[str, Any], code_block: str, require_format: bool, format_end: str) -> Offer:
    try:
        language = language_of(row)
    except ValueError:  # the row's language column is the task's fault: its tests say so, the code is not judged
        return Offer(None, NO_CODE_BLOCK)
    return offered_code(completion, code_block, require_format, format_end=format_end, language=language)


def correctness_gate(judged: Judged) -> Explained:
    """What a quality reward scores a completion that did not pass every test: None when the row
    has no tests or its task cannot be judged, else 0.0, each with the reason."""
    if judged.task_error is not None:
        return Explained(None, judged.task_error)
    if judged.spec is None:
        return Explained(None, NO_TESTS)
    reason = judged.reason
    if reason is None:
        raise ValueError("correctness_gate is for a completion that did not pass every test; this one did")
    return Explained(0.0, Reason(reason.kind, f"scores only code that passes every test: {reason.detail}"))
