"""The built-in rewards: DiffuCoder's format semantics, pass rate, syntax, efficiency and
maintainability (gated on correctness, formulas checked by hand), comments with a fake LLM
judge, and the no-torch rule."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from diffugrpo_plugin.rewards import code_tests as code_execution
from diffugrpo_plugin.rewards.judging import format_verdict
from diffugrpo_plugin.rewards.scoring import value_of
from diffugrpo_plugin.rewards.test_runs import Outcome, TestOutcome, run_tests
from diffugrpo_plugin.sandbox.probe import instruction_counter_available
from reward_plugins.code import code_reward
from reward_plugins.code_format import code_format_reward
from reward_plugins.comments import comments_reward, static_comment_score
from reward_plugins.efficiency import (
    CPU_SCORE_BAND,
    Runs,
    absolute_score,
    absolute_time,
    cost_ratio,
    efficiency_reward,
    relative_score,
    relative_time,
)
from reward_plugins.maintainability import maintainability_reward, maintainability_score, max_complexity
from reward_plugins.syntax import syntax_reward
from reward_support import tight_sandbox

REPO = Path(__file__).resolve().parents[1]
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]


def fenced(code: str, prose: str = "Here it is:\n") -> str:
    return f"{prose}```python\n{code}```\n"


def values(items: list) -> list:
    """The values of what a reward returned, without the reasons it gave (test_judging_reasons.py checks those)."""
    return [value_of(item) for item in items]


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=5.0, memory_mb=512)


# --- code_format -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, score",
    [
        ("```python\nx = 1\n```\n", 1.0),
        ("Sure, here:\n```python\nx = 1\n```\n", 1.0),
        ("```python\n```\n", 1.0),  # an empty block parses
        ("```python\ndef f(:\n```\n", 0.5),
        ("```python\n    x = 1\n```\n", 1.0),  # DiffuCoder parses the block stripped
        ("```python\nx = 1\n```", 0.0),  # stopped at EOS right after the fence: DiffuCoder's pattern wants a newline
        ("```python\nx = 1\n```\n\n  ", 0.0),  # ... and exactly one
        ("```python\nx = 1\n```\nHope this helps\n", 0.0),
        ("```python\nx = 1\n```\n```python\ny = 2\n```\n", 0.0),  # exactly one block
        ("```py\nx = 1\n```\n", 0.0),  # the tag is python
        ("no code at all\n", 0.0),
    ],
)
def test_code_format_has_diffucoder_semantics(text, score):
    assert format_verdict(text)[0] == score


def test_code_format_accepts_chat_messages():
    assert values(code_format_reward([[{"role": "assistant", "content": "```python\nx = 1\n```\n"}], "nope"])) == [
        1.0,
        0.0,
    ]


# --- code ------------------------------------------------------------------------------------


@pytest.mark.sandbox
def test_code_reward_is_the_pass_rate(box):
    right = fenced("def add(a, b):\n    return a + b\n")
    half = fenced("def add(a, b):\n    return 3\n")
    scores = code_reward([right, half, right], test_cases=[ADD_TESTS, ADD_TESTS, []], sandbox=box)
    assert values(scores) == [1.0, 0.5, None]  # no tests: not applicable, not a division by zero


@pytest.mark.sandbox
def test_code_reward_runs_only_well_formatted_completions(box):
    chatty = "```python\ndef add(a, b):\n    return a + b\n```\nHope this helps!\n"
    assert values(code_reward([chatty], test_cases=[ADD_TESTS], sandbox=box)) == [0.0]
    assert code_reward([chatty], test_cases=[ADD_TESTS], sandbox=box, require_format=False) == [1.0]


@pytest.mark.sandbox
def test_code_reward_block_choice(box):
    draft_then_fix = (
        "```python\ndef add(a, b):\n    return a - b\n```\nOops, fixed:\n"
        "```python\ndef add(a, b):\n    return a + b\n```\n"
    )
    first = code_reward([draft_then_fix], test_cases=[ADD_TESTS], sandbox=box, require_format=False)
    last = code_reward([draft_then_fix], test_cases=[ADD_TESTS], sandbox=box, require_format=False, code_block="last")
    assert (values(first), last) == ([0.0], [1.0])


def test_syntax_reward():
    assert values(syntax_reward([fenced("x = 1\n"), fenced("x = (\n"), "no block"])) == [1.0, 0.0, 0.0]


# --- efficiency ------------------------------------------------------------------------------


def _passed(cpu_s=0.0, memory_kb=0, instructions=None, lines=None):
    return TestOutcome(0, Outcome.PASSED, cpu_s=cpu_s, memory_kb=memory_kb, instructions=instructions, lines=lines)


def _runs(cpu_s=0.0, memory_kb=0, instructions=None, lines=None):
    """One test's plain run and, given ``lines``, its line-counted run."""
    counted = [_passed(lines=lines)] if lines is not None else None
    return Runs([_passed(cpu_s, memory_kb, instructions)], counted)


def test_relative_efficiency_by_hand():
    candidate, reference = _runs(cpu_s=0.095, memory_kb=3072), _runs(cpu_s=0.015, memory_kb=1024)
    # time: (0.015 + 0.005) / (0.095 + 0.005) = 0.2; memory: (1024 + 1024) / (3072 + 1024) = 0.5
    assert relative_score(candidate, reference, time_weight=0.5) == pytest.approx(0.35)
    # faster than the reference caps at 1
    assert relative_score(reference, candidate, time_weight=0.5) == pytest.approx(1.0)


def test_relative_efficiency_by_instruction_counts_ignores_cpu_time():
    candidate = _runs(cpu_s=9.0, instructions=15_000_000)
    reference = _runs(cpu_s=0.001, instructions=5_000_000)
    # (5e6 + 5e6) / (15e6 + 5e6) = 0.5, and the CPU seconds are ignored
    assert relative_score(candidate, reference, time_weight=1.0, measure="instructions") == pytest.approx(0.5)


def test_relative_efficiency_by_lines_by_hand():
    # floor: 0.005 s x 50M lines/s = 250,000 lines per test; (50,000 + 250,000) / (350,000 + 250,000) = 0.5,
    # and CPU time agrees: (0.005 + 0.005) / (0.015 + 0.005) = 0.5
    candidate, reference = _runs(cpu_s=0.015, lines=350_000), _runs(cpu_s=0.005, lines=50_000)
    assert relative_time(candidate, reference, "lines") == pytest.approx(0.5)


def test_a_line_count_stays_within_the_band_of_the_cpu_time_score():
    """A forged count of 0 lines on a program 11x slower by CPU time than the reference; and a program whose
    lines are many but cheap against a reference whose work is in C (``x in big_list`` is one line)."""
    forged, reference = _runs(cpu_s=0.105, lines=0), _runs(cpu_s=0.005, lines=50_000)
    by_cpu = (0.005 + 0.005) / (0.105 + 0.005)  # 0.0909
    assert relative_time(forged, reference, "cpu") == pytest.approx(by_cpu)
    assert relative_time(forged, reference, "lines") == pytest.approx(by_cpu + CPU_SCORE_BAND)
    python_set, c_scans = _runs(cpu_s=0.010, lines=2_250_000), _runs(cpu_s=0.136, lines=0)
    assert cost_ratio(python_set, c_scans, "lines") == pytest.approx(0.1)  # 250,000 / 2,500,000
    assert relative_time(python_set, c_scans, "lines") == pytest.approx(1.0 - CPU_SCORE_BAND)  # CPU time: 1.0
    # absolute scales: 5M lines per test (0.1 s x 50M) scores 0.5, as does 0.1 s of CPU per test
    assert absolute_time(_runs(cpu_s=0.1, lines=5_000_000), "lines", time_scale_s=0.1) == pytest.approx(0.5)
    # 0.3 s of CPU per test scores 0.1 / 0.4 = 0.25 by CPU time, so a count of 0 gets 0.35
    assert absolute_time(_runs(cpu_s=0.3, lines=0), "lines", time_scale_s=0.1) == pytest.approx(0.25 + CPU_SCORE_BAND)


def test_absolute_efficiency_by_hand():
    candidate = Runs([_passed(cpu_s=0.1, memory_kb=64 * 1024), _passed(cpu_s=0.1, memory_kb=0)])
    # 0.1 s per test at scale 0.1 -> 0.5; 64 MiB peak at scale 64 -> 0.5
    assert absolute_score(candidate, 0.5, time_scale_s=0.1, memory_scale_mb=64.0) == pytest.approx(0.5)


@pytest.mark.sandbox
def test_efficiency_is_gated_and_compares_to_the_reference(box):
    reference = "def add(a, b):\n    return a + b\n"
    slow = "def add(a, b):\n    total = 0\n    for _ in range(3_000_000):\n        total += 1\n    return a + b\n"
    wrong = "def add(a, b):\n    return a * b\n"
    completions = [fenced(reference), fenced(slow), fenced(wrong), fenced(reference)]
    columns = {"test_cases": [ADD_TESTS] * 3 + [[]], "reference_solution": [reference] * 4}
    for cost in ("cpu", "lines"):
        same, slower, failing, untested = values(efficiency_reward(completions, sandbox=box, cost=cost, **columns))
        assert same > 0.8  # equal code: ratio 1 up to timing noise, damped by the floors
        assert slower < 0.6 and slower < same
        assert (failing, untested) == (0.0, None)


@pytest.mark.sandbox
def test_efficiency_by_lines_is_the_same_on_every_run(box):
    """The 3M-iteration loop: 6,000,002 lines per test against the reference's 1, whatever the host's load."""
    reference = "def add(a, b):\n    return a + b\n"
    slow = "def add(a, b):\n    total = 0\n    for _ in range(3_000_000):\n        total += 1\n    return a + b\n"
    spec = code_execution.tests_from_row({"test_cases": ADD_TESTS})
    counts = [[o.lines for o in run_tests(slow, spec, box, cache=False, count_lines=True)] for _ in range(2)]
    # per test: `total = 0`, 3M + 1 `for` checks, 3M bodies, `return`: 6,000,003; the module's `def`: once more
    assert counts == [[6_000_004, 6_000_004]] * 2
    [score] = efficiency_reward(
        [fenced(slow)], test_cases=[ADD_TESTS], reference_solution=[reference], sandbox=box, cost="lines"
    )
    # the same count every time, so the same time score while CPU time's stays within its band:
    # (4 + 2 x 250,000) / (12,000,008 + 2 x 250,000); memory scores at most 1
    assert "time by executed lines: 12,000,008 against the reference's 4" in score.reason.detail
    time_score = 500_004 / 12_500_008
    assert 0.5 * time_score < score.value <= 0.5 * time_score + 0.5 + 1e-12


@pytest.mark.sandbox
def test_efficiency_says_a_cost_it_cannot_use(box):
    completion = fenced("def add(a, b):\n    return a + b\n")
    with pytest.raises(ValueError, match="cost must be one of"):
        efficiency_reward([completion], test_cases=[ADD_TESTS], sandbox=box, cost="wall")
    if not instruction_counter_available():
        with pytest.raises(ValueError, match="no hardware instruction counter.*set cost to lines or auto"):
            efficiency_reward([completion], test_cases=[ADD_TESTS], sandbox=box, cost="instructions")


# --- maintainability -------------------------------------------------------------------------

THREE_IFS = (
    "def sign(x):\n    if x > 0:\n        return 1\n    if x < 0:\n        return -1\n"
    "    if x == 0:\n        return 0\n    return None\n"
)
SIMPLE_SIGN = "def sign(x):\n    return (x > 0) - (x < 0)\n"
SIGN_TESTS = ["assert sign(5) == 1", "assert sign(-2) == -1", "assert sign(0) == 0"]


def test_cyclomatic_complexity_by_definition():
    assert max_complexity(THREE_IFS) == 4.0  # 1 + three decisions
    assert max_complexity(SIMPLE_SIGN) == 1.0


def test_cyclomatic_complexity_counts_the_code_outside_functions():
    # lizard lists no lambda and no module-level code: the branches of THREE_IFS moved there count all the same
    as_lambda = "sign = lambda x: 1 if x > 0 else -1 if x < 0 else 0 if x == 0 else None\n"
    in_a_class_body = (
        "class Signs:\n    sign = staticmethod(lambda x: 1 if x > 0 else -1 if x < 0 else 0 if x == 0 else None)\n"
    )
    at_module_level = "x = int(input())\nif x > 0:\n    print(1)\nif x < 0:\n    print(-1)\nif x == 0:\n    print(0)\n"
    for code in (as_lambda, in_a_class_body, at_module_level):
        assert max_complexity(code) == max_complexity(THREE_IFS) == 4.0, code
    # a def's own branches are not counted twice, and a def beside module code is measured alone
    assert max_complexity(THREE_IFS + "LIMIT = 0\n") == 4.0
    assert max_complexity(SIMPLE_SIGN + "if __name__ == '__main__':\n    print(sign(1))\n") == 2.0


def test_maintainability_relative_to_reference():
    assert maintainability_score(SIMPLE_SIGN, SIMPLE_SIGN) == pytest.approx(1.0)
    score = maintainability_score(THREE_IFS, SIMPLE_SIGN)
    # complexity part: reference CC 1 / candidate CC 4 = 0.25; the index part is at most 1
    assert 0.5 * 0.25 < score <= 0.5 * 0.25 + 0.5


def test_trivial_or_empty_code_earns_nothing():
    assert maintainability_score("pass\n", None) == 0.0
    assert maintainability_score('"""only a docstring"""\n', None) == 0.0
    assert maintainability_score("x = 1\n", None) == 0.0


@pytest.mark.sandbox
def test_maintainability_is_gated_on_correctness(box):
    wrong = "def sign(x):\n    return 1\n"
    scores = maintainability_reward(
        [fenced(SIMPLE_SIGN), fenced(wrong), fenced(SIMPLE_SIGN)],
        sandbox=box,
        test_cases=[SIGN_TESTS, SIGN_TESTS, []],
        reference_solution=[SIMPLE_SIGN, SIMPLE_SIGN, None],
    )
    assert values(scores) == [pytest.approx(1.0), 0.0, None]


# --- comments --------------------------------------------------------------------------------

DOCUMENTED = (
    'def max_len(words):\n    """Return the length of the longest word."""\n'
    "    # track the longest length seen so far\n    best = 0\n    for word in words:\n"
    "        best = max(best, len(word))  # update best\n    return best\n"
)


def test_static_comment_rules_by_hand():
    # density: 3 comment lines / 5 code lines = 0.6 > 0.5 -> 0.5 / 0.6; information: words beyond the code's
    # names, keywords and function words: the docstring 'length', 'longest' -> 1; 'track the longest length seen
    # so far' -> 1; 'update best' has only 'update' -> 0.5; mean 5/6; length: all three have 2-40 words -> 1.
    assert static_comment_score(DOCUMENTED) == pytest.approx((0.5 / 0.6 + 5 / 6 + 1) / 3)
    assert static_comment_score("def f(x):\n    return x\n") == 0.0
    # one one-word comment naming nothing, on a one-line program: density 1 -> 0.5, others 0
    assert static_comment_score("x = 1  # a\n") == pytest.approx(0.5 / 3)


class _FakeJudge(http.server.BaseHTTPRequestHandler):
    answer = "8"
    status = 200
    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, self.headers.get("Authorization"), body))
        payload = json.dumps({"choices": [{"message": {"content": type(self).answer}}]}).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def judge_server():
    _FakeJudge.seen, _FakeJudge.answer, _FakeJudge.status = [], "8", 200
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeJudge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


MAX_LEN_TESTS = {"test_cases": [["assert max_len(['a', 'abc']) == 3"]]}  # comments is gated on correctness


@pytest.mark.sandbox
def test_llm_judge_is_blended_in_and_reads_its_key_from_the_environment(judge_server, monkeypatch):
    monkeypatch.setenv("MY_JUDGE_KEY", "sk-test")
    [score] = comments_reward(
        [fenced(DOCUMENTED)],
        **MAX_LEN_TESTS,
        judge_url=judge_server,
        judge_model="m",
        judge_api_key_env="MY_JUDGE_KEY",
        judge_weight=0.5,
    )
    assert score == pytest.approx(0.5 * static_comment_score(DOCUMENTED) + 0.5 * 0.8)
    path, authorization, body = _FakeJudge.seen[0]
    assert (path, authorization, body["model"]) == ("/v1/chat/completions", "Bearer sk-test", "m")
    assert "max_len" in body["messages"][-1]["content"]


@pytest.mark.sandbox
def test_failing_judge_falls_back_to_static_rules(judge_server):
    _FakeJudge.answer = "I refuse"
    [score] = comments_reward([fenced(DOCUMENTED)], judge_url=judge_server, **MAX_LEN_TESTS)
    assert score.value == pytest.approx(static_comment_score(DOCUMENTED))
    assert score.reason.kind == "judge_failed" and judge_server in score.reason.detail


@pytest.mark.sandbox
def test_judge_is_off_by_default(judge_server):
    assert comments_reward([fenced(DOCUMENTED)], **MAX_LEN_TESTS) == [pytest.approx(static_comment_score(DOCUMENTED))]
    assert _FakeJudge.seen == []


# --- boundaries ------------------------------------------------------------------------------


def test_rewards_and_sandbox_import_no_torch():
    modules = [
        "diffugrpo_plugin.sandbox.host",
        "diffugrpo_plugin.rewards.code_tests",
        "diffugrpo_plugin.rewards.spec",
        "reward_plugins.code",
        "reward_plugins.code_format",
        "reward_plugins.syntax",
        "reward_plugins.efficiency",
        "reward_plugins.maintainability",
        "reward_plugins.comments",
        "reward_plugins.constant",
    ]
    code = f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
