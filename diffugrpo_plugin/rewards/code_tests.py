"""A row's tests, read from its columns: what :mod:`.test_runs` runs against a program.

Public API (used through :mod:`diffugrpo_plugin.rewards.judging` by the code rewards and ``diffugrpo eval``):

* :func:`extract_code` -- the first or last fenced Python block of a completion.
* :func:`tests_from_row` -- a :class:`TestSpec` from a dataset row, in one of these formats:
  assert strings (``test_cases`` as in DiffuCoder/AceCode, MBPP ``test_list`` with
  ``test_setup_code`` / sanitized-MBPP ``test_imports``), a ``check(candidate)`` module (``test`` +
  ``entry_point``: HumanEval, and LeetCodeDataset with ``Solution().method`` entry points and its
  ``prompt`` of helpers as ``test_imports``), stdin/stdout pairs (``inputs`` + ``outputs``, or
  ``test_cases`` given as ``[{"input": ..., "output": ...}]``) compared on the whole output,
  APPS/TACO's call-based tests (``fn_name``, or its raw ``input_output`` column), and another language's
  in-language tests (``test`` with ``language``: MultiPL-E).
* :func:`reference_from_row` -- the row's reference solution, for rewards that compare to it.

No torch.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from diffugrpo_plugin.rewards.task_code import (
    class_attributes,
    class_names,
    defined_names,
    entry_root,
    free_names,
    imported_names,
    parses,
)
from diffugrpo_plugin.sandbox.jobs import Job, Judged
from diffugrpo_plugin.sandbox.languages import language as get_language

BLOCK_CHOICES = ("first", "last")


FORMAT_ENDS = ("exact", "lenient")
"""What may follow the closing fence in DiffuCoder's format: exactly one newline (its pattern), or any
whitespace or nothing (a completion that stops at EOS right after the fence)."""


_FENCED_PYTHON = re.compile(r"```(?:python3?|py)[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


class TaskError(ValueError):
    """The task's own code or columns cannot be judged, whatever the program: a malformed test column, tests that do
    not parse, a ``check`` module without ``check``, a preamble that fails in the judge. That row has no score (None,
    with this as the reason) and the others are scored; never the program's fault, nor the harness's
    (:class:`~diffugrpo_plugin.sandbox.config.SandboxError`)."""


@dataclass(frozen=True)
class TestSpec:
    """A row's tests in one of four kinds: ``asserts``, ``check`` (HumanEval, LeetCodeDataset), ``stdio``, or
    ``program`` (another ``language``'s in-language tests, ``check_source``, compiled after the program: MultiPL-E).

    ``prelude`` is the task's preamble (imports, ``ListNode`` helpers), run before the program and on the
    judge's side; ``setup`` runs after the program (MBPP's ``test_setup_code`` builds objects from the
    program's classes); ``helpers`` is the task's reference code for a check, run on the judge's side for the
    helpers the check uses (HumanEval/38's ``encode_cyclic``); ``program_names`` are the names a test uses
    that mean the program's objects even where a builtin has the name (for asserts: everything the reference
    binds, MBPP 126's own ``sum``); ``has_reference``: whether the row says which names are the task's (without
    one, a builtin name the program redefines must pass both ways, see ``sandbox_judge``). In another
    ``language`` the prelude is source text put before the program (C++ includes, Java imports).
    """

    __test__ = False

    kind: str
    asserts: tuple[str, ...] = ()
    check_source: str = ""
    entry_point: str = ""
    stdio: tuple[tuple[str, str], ...] = ()
    prelude: str = ""
    setup: str = ""
    helpers: str = ""
    program_names: frozenset[str] = frozenset()
    has_reference: bool = True
    imports: tuple[tuple[str, str, str], ...] = ()
    language: str = "python"
    task_methods: tuple[tuple[str, tuple[str, ...]], ...] = ()  # see class_attributes (the reference's classes)

    def __len__(self) -> int:
        if self.kind == "asserts":
            return len(self.asserts)
        if self.kind in ("check", "program"):
            return 1
        return len(self.stdio)

    def jobs(self, code: str) -> list[Job]:
        """What one sandboxed process runs for each test, and what its judge runs against it."""
        if self.kind == "stdio":
            return [Job(code, stdin=stdin, preamble=self.prelude) for stdin, _ in self.stdio]
        context = {
            "preamble": self.prelude,
            "helpers": self.helpers,
            "program_names": self.program_names,
            "has_reference": self.has_reference,
            "imports": self.imports,
            "entry": self.entry_point,
            "task_methods": self.task_methods,
        }
        # The setup code is the test's: it runs on the judge's side, with the judge's builtins, before each test.
        setup = f"{self.setup}\n" if self.setup else ""
        tests = (
            [("assert", setup + test) for test in self.asserts]
            if self.kind == "asserts"
            else [("check", setup + self.check_source)]
        )
        tests = [
            Judged(
                kind,
                test,
                **context,
                shared_classes=tuple(name for name in class_names(self.helpers) if name not in self.program_names),
                free_names=names[0],
                called_only=names[1],
            )
            for kind, test in tests
            for names in [free_names(test, self.program_names if self.has_reference or kind == "check" else None)]
        ]
        return [Job(code, preamble=self.prelude, judged=test) for test in tests]


def extract_code(text: str, block: str = "first", language: str = "python") -> str | None:
    """The content of the first or last fenced block of ``text`` in ``language`` (```python, ```cpp, ...);
    None if there is none.

    ``first`` is DiffuCoder's choice, ``last`` open-r1's (a model that drafts then corrects
    itself is judged on its final answer).
    """
    if block not in BLOCK_CHOICES:
        raise ValueError(f"code block must be one of {BLOCK_CHOICES}, got {block!r}")
    fenced = _FENCED_PYTHON if language == "python" else _fenced_pattern(get_language(language).fences)
    blocks = fenced.findall(text or "")
    if not blocks:
        return None
    return blocks[0] if block == "first" else blocks[-1]


@functools.lru_cache(maxsize=None)
def _fenced_pattern(fences: tuple[str, ...]) -> re.Pattern:
    names = "|".join(re.escape(fence) for fence in fences)
    return re.compile(rf"```(?:{names})[ \t]*\r?\n(.*?)```", re.DOTALL | re.IGNORECASE)


def language_of(row: Mapping[str, Any]) -> str:
    """The row's ``language`` column as a canonical name (``python`` when absent); ValueError naming it."""
    value = row.get("language")
    return "python" if value is None else get_language(value).name


def _as_list(value: Any, column: str) -> list:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"column {column!r} is a string that is not a JSON list: {exc}") from exc
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"column {column!r} must be a list, got {type(value).__name__}")
    return list(value)


def _strings(values: list, column: str) -> tuple[str, ...]:
    for position, value in enumerate(values):
        if not isinstance(value, str):
            raise ValueError(f"column {column!r} item {position} must be a string, got {type(value).__name__}")
    return tuple(values)


def _joined(value: Any, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return "\n".join(_strings(_as_list(value, column), column))


def _stdio_pairs(inputs: list, outputs: list, column: str) -> tuple[tuple[str, str], ...]:
    if len(inputs) != len(outputs):
        raise ValueError(f"{column}: {len(inputs)} inputs but {len(outputs)} outputs")
    inputs, outputs = _lines_joined(inputs, f"{column} inputs"), _lines_joined(outputs, f"{column} outputs")
    return tuple(zip(_strings(inputs, f"{column} inputs"), _strings(outputs, f"{column} outputs")))


def _lines_joined(values: list, column: str) -> list:
    """An input or output given as its list of lines (as some APPS/TACO rows hold them) is those lines, one a line."""
    return [
        "".join(f"{line}\n" for line in _strings(value, column)) if isinstance(value, list) else value
        for value in values
    ]


def _list_tests(values: list, column: str, prelude: str, setup: str) -> TestSpec | None:
    """A list column: stdin/stdout dicts, or assert strings."""
    if values and all(isinstance(value, Mapping) for value in values):
        try:
            pairs = _stdio_pairs([v["input"] for v in values], [v["output"] for v in values], column)
        except KeyError as exc:
            raise ValueError(f"column {column!r}: stdin/stdout test is missing key {exc}") from exc
        return TestSpec(kind="stdio", stdio=pairs, prelude=prelude) if pairs else None
    asserts = _strings(values, column)
    return TestSpec(kind="asserts", asserts=asserts, prelude=prelude, setup=setup) if asserts else None


def _check_tests(row: Mapping[str, Any], prelude: str, setup: str) -> TestSpec:
    entry_point = row.get("entry_point")
    root = entry_root(entry_point) if isinstance(entry_point, str) else None
    if root is None:
        raise ValueError(
            f"column 'test' (HumanEval / LeetCodeDataset style) needs an 'entry_point' naming the "
            f"function (e.g. 'has_close_elements' or 'Solution().twoSum'), got {entry_point!r}"
        )
    reference = reference_from_row(row)
    return TestSpec(
        kind="check",
        check_source=str(row["test"]),
        entry_point=entry_point,
        prelude=prelude,
        setup=setup,
        helpers=reference or "",
        program_names=frozenset({root}),
        has_reference=reference is not None,
        task_methods=class_attributes(reference or ""),
    )


def _stdio_tests(row: Mapping[str, Any], prelude: str) -> TestSpec | None:
    if row.get("inputs") is None or row.get("outputs") is None:
        raise ValueError("stdin/stdout tests need both 'inputs' and 'outputs' columns")
    pairs = _stdio_pairs(_as_list(row["inputs"], "inputs"), _as_list(row["outputs"], "outputs"), "inputs/outputs")
    return TestSpec(kind="stdio", stdio=pairs, prelude=prelude) if pairs else None


def tests_from_row(row: Mapping[str, Any]) -> TestSpec | None:
    """The tests of a dataset row, or None when it has none (the ``code`` reward is then None).

    Columns read, first match wins: ``test`` + ``entry_point`` (a ``check(candidate)`` module: HumanEval,
    LeetCodeDataset); ``test_cases`` (assert strings, or stdin/stdout dicts with ``input``/``output``);
    ``test_list`` (MBPP) with ``test_setup_code`` and ``test_imports``; ``fn_name`` + ``inputs`` + ``outputs``
    (APPS/TACO's call-based tests); ``inputs`` + ``outputs`` (stdin/stdout); APPS/TACO's ``input_output`` (a JSON
    string of those) where no other column holds tests. Raises :class:`TaskError` naming the column when a present column is malformed, or when the
    task's own Python (its tests, preamble, setup) does not parse or its check module defines no ``check``.
    """
    try:
        spec = _read_tests(row)
    except TaskError:
        raise
    except ValueError as error:
        raise TaskError(str(error)) from error
    problem = _task_code_problem(spec) if spec is not None and spec.language == "python" else None
    if problem is not None:
        raise TaskError(problem)
    return spec


def _task_code_problem(spec: TestSpec) -> str | None:
    """Why the task's own Python cannot run in the judge, found by parsing it (never by running it); None if it can."""
    pieces = [("the preamble (test_imports)", spec.prelude), ("the setup code (test_setup_code)", spec.setup)]
    pieces += [(f"test {index}", test) for index, test in enumerate(spec.asserts)]
    if spec.kind == "check":
        pieces.append(("the check module (test)", spec.check_source))
    for name, source in pieces:
        if source and not parses(source):
            return f"{name} of the task does not parse as Python; fix the row's tests"
    if spec.kind == "check" and "check" not in defined_names(spec.check_source) | defined_names(spec.prelude):
        return "the check module (test) defines no function check(candidate); fix the row's tests"
    return None


def _apps_columns(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """APPS/TACO's ``input_output`` (a JSON string of ``inputs``, ``outputs`` and, for a call-based task,
    ``fn_name``) read as columns of the row; a row that has its tests in columns already is as it is."""
    if row.get("input_output") is None or any(row.get(c) is not None for c in ("test", "test_cases", "test_list")):
        return row
    tests = row["input_output"]
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except ValueError as exc:
            raise ValueError(f"column 'input_output' is a string that is not JSON: {exc}") from exc
    if not isinstance(tests, Mapping):
        raise ValueError(f"column 'input_output' must hold inputs and outputs, got {type(tests).__name__}")
    return {**row, **{key: tests[key] for key in ("inputs", "outputs", "fn_name") if key in tests}}


def _call_based_asserts(row: Mapping[str, Any]) -> list[str]:
    """APPS/TACO's call-based tests (``fn_name``; each input a list of arguments) as assert strings, judged as APPS's
    own ``testing_util`` judges them: the result (a tuple as a list) equals the output, or the output's one element
    (APPS stores most outputs wrapped in a list; APPS takes the first of a longer list too, which would pass a program
    returning one element of a list answer, so here only a one-element list is unwrapped). A task whose reference or
    starter code has ``class Solution`` calls its method; without either, the program's ``Solution`` if it has one.
    The test's own names carry :data:`APPS_PREFIX`, which no ``fn_name`` may: a task's function named ``result``,
    ``lists``, ``json`` or ``len`` is still the program's, and the test still uses its own."""
    name = row["fn_name"]
    if not isinstance(name, str) or not name.isidentifier() or name.startswith(APPS_PREFIX):
        raise ValueError(f"column 'fn_name' must name the function the tests call, got {name!r}")
    inputs, outputs = _as_list(row.get("inputs"), "inputs"), _as_list(row.get("outputs"), "outputs")
    if len(inputs) != len(outputs):
        raise ValueError(f"call-based tests (fn_name): {len(inputs)} inputs but {len(outputs)} outputs")
    # which of the two the task means: its reference's, else its starter code's, else the program's (as APPS asks)
    known = next((code for code in (reference_from_row(row), row.get("starter_code")) if isinstance(code, str)), None)
    function = f"{APPS_PREFIX}function"
    if known is None:
        chosen = f"try:\n    {function} = Solution().{name}\nexcept NameError:\n    {function} = {name}\n"
    else:
        chosen = f"{function} = {f'Solution().{name}' if 'class Solution' in known else name}\n"
    result, expected_name = f"{APPS_PREFIX}result", f"{APPS_PREFIX}expected"
    loads = f"{APPS_PREFIX}json.loads"  # json and the builtins under the prefix too: a task's function named json
    asserts = []
    for position, (arguments, expected) in enumerate(zip(inputs, outputs)):
        if not isinstance(arguments, list):
            raise ValueError(f"call-based tests (fn_name): input {position} must be a list of arguments")
        # as JSON in the test, read back by the judge's json: repr would write an infinity as `inf`, a name
        asserts.append(
            _APPS_VALUES
            + chosen
            + f"{result} = {APPS_PREFIX}lists({function}(*{APPS_PREFIX}from_json({loads}({json.dumps(arguments)!r}))))\n"
            f"{expected_name} = {APPS_PREFIX}from_json({loads}({json.dumps(expected)!r}))\n"
            f"assert {result} == {expected_name} or ({APPS_PREFIX}unwrapped({expected_name}) "
            f"and {result} == {expected_name}[0])"
        )
    return asserts


APPS_PREFIX = "_diffugrpo_apps_"
# APPS's testing_util compares lists (a tuple the program returns, at any depth, is a list) and reads JSON's
# string keys of a dict argument or output as the ints they were (only where each is an int as Python writes it:
# "01" stays a string, so {"1": 2, "01": 1} keeps two keys)
_APPS_VALUES = f"""import builtins as {APPS_PREFIX}builtins, json as {APPS_PREFIX}json
def {APPS_PREFIX}lists(value):
    if {APPS_PREFIX}builtins.isinstance(value, ({APPS_PREFIX}builtins.list, {APPS_PREFIX}builtins.tuple)):
        return [{APPS_PREFIX}lists(item) for item in value]
    if {APPS_PREFIX}builtins.isinstance(value, {APPS_PREFIX}builtins.dict):
        return {{key: {APPS_PREFIX}lists(item) for key, item in value.items()}}
    return value
def {APPS_PREFIX}from_json(value):
    b = {APPS_PREFIX}builtins
    if b.isinstance(value, b.list):
        return [{APPS_PREFIX}from_json(item) for item in value]
    if b.isinstance(value, b.dict):
        ints = b.all(b.isinstance(key, b.str) and key.lstrip("-").isdigit() and b.str(b.int(key)) == key for key in value)
        return {{(b.int(key) if ints else key): {APPS_PREFIX}from_json(item) for key, item in value.items()}}
    return value
def {APPS_PREFIX}unwrapped(expected):
    b = {APPS_PREFIX}builtins
    return b.isinstance(expected, b.list) and b.len(expected) == 1
"""


def _read_tests(row: Mapping[str, Any]) -> TestSpec | None:
    row = _apps_columns(row)
    prelude = _joined(row.get("test_imports"), "test_imports")
    language = language_of(row)
    if language != "python":
        return _other_language_tests(row, language, prelude)
    setup = _joined(row.get("test_setup_code"), "test_setup_code")
    if row.get("test") is not None and (row.get("entry_point") is not None or row.get("test_cases") is None):
        return _check_tests(row, prelude, setup)
    called = ()  # an APPS/TACO call-based row's function: the program's, even named like a builtin (max)
    if row.get("fn_name") is not None and row.get("test_cases") is None and row.get("test_list") is None:
        row, called = {**row, "test_cases": _call_based_asserts(row)}, (row["fn_name"], "Solution")
    for column in ("test_cases", "test_list"):
        if row.get(column) is not None:
            spec = _list_tests(_as_list(row[column], column), column, prelude, setup)
            if spec is not None and spec.kind == "asserts":
                reference = reference_from_row(row)
                imports = imported_names(reference or "")
                if not defined_names(reference or "") - {name for name, _, _ in imports}:
                    imports = ()  # a reference that only imports names its solution by import (``from math import gcd``)
                spec = TestSpec(
                    **{
                        **spec.__dict__,
                        "has_reference": reference is not None,
                        "program_names": defined_names(reference or "") - {name for name, _, _ in imports}
                        | set(called),
                        "imports": imports,
                        "task_methods": class_attributes(reference or ""),
                    }
                )
            return spec
    if row.get("inputs") is not None or row.get("outputs") is not None:
        return _stdio_tests(row, prelude)
    return None


def _other_language_tests(row: Mapping[str, Any], language: str, prelude: str) -> TestSpec | None:
    """Another language's tests: ``test`` (in-language tests, compiled after the program: MultiPL-E's form) or
    stdin/stdout pairs (``inputs`` + ``outputs``, or ``test_cases`` as input/output dicts)."""
    if row.get("test") is not None:
        if not isinstance(row["test"], str) or not row["test"].strip():
            raise ValueError(f"column 'test' must hold the {language} tests' source as a non-empty string")
        return TestSpec(kind="program", check_source=row["test"], prelude=prelude, language=language)
    if row.get("test_cases") is not None:
        spec = _list_tests(_as_list(row["test_cases"], "test_cases"), "test_cases", prelude, "")
        if spec is not None and spec.kind != "stdio":
            raise ValueError(
                f"column 'test_cases': assert strings are Python tests; a {language} row needs 'test' (in-language "
                "tests) or stdin/stdout pairs"
            )
        return None if spec is None else TestSpec(kind="stdio", stdio=spec.stdio, prelude=prelude, language=language)
    if row.get("inputs") is not None or row.get("outputs") is not None:
        spec = _stdio_tests(row, prelude)
        return None if spec is None else TestSpec(kind="stdio", stdio=spec.stdio, prelude=prelude, language=language)
    return None


def reference_from_row(row: Mapping[str, Any]) -> str | None:
    """The row's reference solution: ``reference_solution``, else HumanEval's ``prompt`` +
    ``canonical_solution``, else MBPP's ``code`` (only on rows with ``test_list``)."""
    if isinstance(row.get("reference_solution"), str) and row["reference_solution"].strip():
        return row["reference_solution"]
    if isinstance(row.get("canonical_solution"), str) and isinstance(row.get("prompt"), str):
        return row["prompt"] + row["canonical_solution"]
    if isinstance(row.get("code"), str) and row.get("test_list") is not None:
        return row["code"]
    return None
