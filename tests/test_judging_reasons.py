"""Every "why is this 0 (or None)?" has an answer: each reason kind with its detail, from the format
rule, the code offered, the test run and every built-in reward, and as ``rewards score`` prints it.
The format is DiffuCoder's exactly by default; with ``format_end="lenient"`` the closing fence may end a
completion without a newline, or be followed by other whitespace."""

from __future__ import annotations

import json
import random
import re

import pytest

from diffugrpo_plugin import Explained, Reason
from diffugrpo_plugin.rewards.judging import MAX_COMPLETION_CHARS, Offer, format_verdict, offered_code
from reward_plugins.code import code_reward
from reward_plugins.code_format import code_format_reward
from reward_plugins.comments import comments_reward
from reward_plugins.efficiency import efficiency_reward
from reward_plugins.maintainability import maintainability_reward
from reward_plugins.syntax import syntax_reward
from reward_support import tight_sandbox

ADD = "def add(a, b):\n    return a + b\n"
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
# DiffuCoder's format pattern; the lenient end lets whitespace, or nothing, follow the closing fence.
DIFFUCODER_PATTERN = re.compile(r"^(?:(?!```)[\s\S])*?```python\n((?:(?!```)[\s\S])*?)```\n$")
RELAXED_PATTERN = re.compile(r"^(?:(?!```)[\s\S])*?```python\n((?:(?!```)[\s\S])*?)```\s*$")


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=5.0, memory_mb=512)


def kind_and_detail(item) -> tuple[str, str]:
    assert isinstance(item, Explained), item
    return item.reason.kind, item.reason.detail


# --- the format rule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, score, kind, detail",
    [
        ("", 0.0, "empty", "the completion is empty"),
        ("I would use a loop.\n", 0.0, "no_code_block", "no fenced ```python block"),
        (
            "x" * (MAX_COMPLETION_CHARS + 1),
            0.0,
            "too_long",
            f"{MAX_COMPLETION_CHARS + 1} characters, over the {MAX_COMPLETION_CHARS} judged: not parsed",
        ),
        (
            "```py\nx = 1\n```\n",
            0.0,
            "format",
            "the first fence opens '```py'; the format needs ```python alone on its line",
        ),
        (
            "Here:\n```python\nx = 1\n",
            0.0,
            "format",
            "the ```python block is never closed (was the completion cut off?)",
        ),
        (
            "```python\nx = 1\n```\nHope this helps!\n",
            0.0,
            "format",
            "text after the closing fence: 'Hope this helps!'; the block must end the completion",
        ),
        (
            "```python\nx = 1\n```\n```python\ny = 2\n```\n",
            0.0,
            "format",
            "4 ``` fences; the format allows exactly one block",
        ),
        (
            "```python\ndef f(:\n    pass\n```\n",
            0.5,
            "syntax_error",
            "syntax error at line 1 of the code: invalid syntax",
        ),
        (
            "```python\nx = 1\ny = (\n```\n",
            0.5,
            "syntax_error",
            "syntax error at line 2 of the code: '(' was never closed",
        ),
    ],
)
def test_each_format_failure_says_how(text, score, kind, detail):
    assert format_verdict(text) == (score, Reason(kind, detail))
    assert code_format_reward([text]) == [Explained(score, Reason(kind, detail))]


@pytest.mark.parametrize("ending", ["```", "```\n", "```\n\n", "```  \n  "])
def test_with_the_lenient_end_a_closing_fence_needs_no_newline_after_it(ending):
    text = f"Sure:\n```python\n{ADD}{ending}"
    assert format_verdict(text, "lenient") == (1.0, None)
    assert offered_code(text, format_end="lenient") == offered_code(f"Sure:\n```python\n{ADD}```\n")
    assert code_format_reward([text], format_end="lenient") == [1.0]


@pytest.mark.parametrize(
    "ending, found", [("```", "nothing"), ("```\n\n", r"'\n\n'"), ("```  \n  ", r"'  \n  '"), ("``` \n", r"' \n'")]
)
def test_by_default_the_closing_fence_is_followed_by_exactly_one_newline(ending, found):
    text = f"Sure:\n```python\n{ADD}{ending}"
    reason = Reason(
        "format",
        f"{found} after the closing fence; DiffuCoder's format ends with exactly one newline "
        f"there (format_end=lenient accepts any whitespace or none)",
    )
    assert format_verdict(text) == (0.0, reason)
    assert code_format_reward([text]) == [Explained(0.0, reason)]
    assert offered_code(text) == Offer(None, reason)


@pytest.mark.parametrize("format_end, pattern", [("exact", DIFFUCODER_PATTERN), ("lenient", RELAXED_PATTERN)])
def test_the_rule_is_diffucoders_pattern_or_its_lenient_end(format_end, pattern):
    pieces = ["```", "```python\n", "```py\n", "python", "\n", " ", "x = 1", "(", "`"]
    generator = random.Random(0)
    for _ in range(5000):
        text = "".join(generator.choice(pieces) for _ in range(generator.randint(0, 8)))
        assert (format_verdict(text, format_end)[0] > 0.0) == (pattern.fullmatch(text) is not None), text
        if DIFFUCODER_PATTERN.fullmatch(text):
            assert RELAXED_PATTERN.fullmatch(text) is not None, text  # the lenient end accepts all DiffuCoder does


# --- the code rewards ------------------------------------------------------------------------


@pytest.mark.sandbox
def test_a_correct_completion_closed_without_a_newline_passes_with_the_lenient_end_only(box):
    no_newline = f"```python\n{ADD}```"
    assert code_reward([no_newline], test_cases=[ADD_TESTS], sandbox=box, format_end="lenient") == [1.0]
    [exact] = code_reward([no_newline], test_cases=[ADD_TESTS], sandbox=box)
    assert exact.value == 0.0 and kind_and_detail(exact)[1].startswith("tests not run: nothing after the closing fence")


@pytest.mark.sandbox
def test_the_code_reward_says_why_the_tests_were_not_run(box):
    chatty = f"```python\n{ADD}```\nHope this helps!"
    [score] = code_reward([chatty], test_cases=[ADD_TESTS], sandbox=box)
    assert score.value == 0.0
    assert kind_and_detail(score) == (
        "format",
        "tests not run: text after the closing fence: 'Hope this helps!'; the block must end the completion",
    )
    [score] = code_reward(["    return a + b\n"], test_cases=[ADD_TESTS], sandbox=box)
    assert kind_and_detail(score) == ("no_code_block", "tests not run: no fenced ```python block")


@pytest.mark.sandbox
def test_the_code_reward_names_the_syntax_error_line(box):
    broken = "```python\ndef add(a, b):\n    return (a +\n```\n"
    [strict] = code_reward([broken], test_cases=[ADD_TESTS], sandbox=box)
    [lenient] = code_reward([broken], test_cases=[ADD_TESTS], sandbox=box, require_format=False)
    assert kind_and_detail(strict) == (
        "syntax_error",
        "tests not run: syntax error at line 2 of the code: '(' was never closed",
    )
    assert (lenient.value, kind_and_detail(lenient)) == (
        0.0,
        ("syntax_error", "syntax error at line 2 of the code: '(' was never closed"),
    )


@pytest.mark.sandbox
def test_the_code_reward_says_which_test_failed_and_when_a_row_has_none(box):
    half = "```python\ndef add(a, b):\n    return 3\n```\n"
    failed, untested = code_reward([half, f"```python\n{ADD}```\n"], test_cases=[ADD_TESTS, []], sandbox=box)
    assert failed.value == 0.5
    kind, detail = kind_and_detail(failed)
    assert kind == "tests_failed" and detail.startswith("1 of 2 tests failed; first: test 1 FAILED: assertion failed")
    assert untested.value is None
    assert kind_and_detail(untested) == (
        "no_tests",
        "the row has no tests (no test_cases, test_list, test + "
        "entry_point or inputs/outputs column): not applicable, None "
        "rather than 0",
    )


@pytest.mark.sandbox
def test_the_quality_rewards_say_they_are_gated_or_why_they_give_nothing(box):
    wrong = "```python\ndef add(a, b):\n    return a * b\n```\n"
    [gated] = efficiency_reward([wrong], test_cases=[ADD_TESTS], sandbox=box)
    kind, detail = kind_and_detail(gated)
    assert gated.value == 0.0 and kind == "tests_failed"
    assert detail.startswith("scores only code that passes every test: 2 of 2 tests failed; first: test 0 FAILED")
    trivial = "```python\nadd = lambda a, b: a + b\n```\n"
    [score] = maintainability_reward([trivial], test_cases=[ADD_TESTS], sandbox=box)
    assert (score.value, kind_and_detail(score)) == (
        0.0,
        ("trivial_code", "fewer than 2 statements that do something (docstrings and pass do not count)"),
    )
    uncommented, unparsable = comments_reward(
        [f"```python\n{ADD}```\n", "```python\ndef f(:\n```\n"], test_cases=[ADD_TESTS] * 2, sandbox=box
    )
    assert kind_and_detail(uncommented) == ("no_comments", "the code has no comments or docstrings")
    assert kind_and_detail(unparsable)[0] == "syntax_error"  # gated: the tests were not run
    [no_block] = syntax_reward(["no code here"])
    assert (no_block.value, kind_and_detail(no_block)) == (0.0, ("no_code_block", "no fenced ```python block"))


@pytest.mark.sandbox
def test_efficiency_says_which_cost_measured_it(box):
    tracer_replaced = "```python\nimport sys\nsys.settrace(None)\ndef add(a, b):\n    return a + b\n```\n"
    honest, replaced = efficiency_reward(
        [f"```python\n{ADD}```\n", tracer_replaced],
        test_cases=[ADD_TESTS] * 2,
        reference_solution=[ADD] * 2,
        sandbox=box,
        cost="lines",
    )
    assert kind_and_detail(honest)[0] == "measured"
    assert kind_and_detail(honest)[1].startswith("time by executed lines: 4 against the reference's 4; peak memory")
    assert kind_and_detail(replaced)[1].startswith(
        "time by CPU time (the line-counted run gave no count: it failed "
        "a test, ran over its limit or replaced the tracer): "
    )
    [absolute] = efficiency_reward([f"```python\n{ADD}```\n"], test_cases=[ADD_TESTS], sandbox=box, cost="cpu")
    assert "s over 2 tests, on absolute scales (no passing reference solution)" in kind_and_detail(absolute)[1]


@pytest.mark.sandbox
def test_full_marks_need_no_reason(box):
    completion = f"```python\n{ADD}```\n"
    assert code_reward([completion], test_cases=[ADD_TESTS], sandbox=box) == [1.0]
    assert code_format_reward([completion]) == [1.0] and syntax_reward([completion]) == [1.0]


# --- as `diffugrpo rewards score` prints them ---------------------------------------------------


@pytest.mark.sandbox
def test_rewards_score_prints_each_rows_reasons(tmp_path, capsys):
    from diffugrpo_plugin.cli import main

    rows = [
        {"completion": f"```python\n{ADD}```\n", "test_cases": ADD_TESTS},
        {"completion": "    return a + b\n", "test_cases": ADD_TESTS},
        {"completion": f"```python\n{ADD}```\n"},
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["rewards", "score", str(path), "--timeout-s", "5"]) == 0
    passed, bare, untested = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert passed["rewards"] == {"code": 1.0, "code_format": 1.0} and "reasons" not in passed
    assert bare["rewards"] == {"code": 0.0, "code_format": 0.0} and bare["tests"] is None
    assert bare["reasons"] == {
        "code": {"kind": "no_code_block", "detail": "tests not run: no fenced ```python block"},
        "code_format": {"kind": "no_code_block", "detail": "no fenced ```python block"},
    }
    assert untested["rewards"]["code"] is None and untested["reasons"]["code"]["kind"] == "no_tests"
