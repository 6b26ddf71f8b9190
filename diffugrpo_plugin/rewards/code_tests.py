"""Tests and their verdicts: read a row's tests, run each against code in the sandbox, judge the result.

Public API (used through :mod:`diffugrpo_plugin.rewards.judging` by the code rewards and ``diffugrpo eval``):

* :func:`extract_code` -- the first or last fenced Python block of a completion.
* :func:`tests_from_row` -- a :class:`TestSpec` from a dataset row, in one of three formats:
  assert strings (``test_cases`` as in DiffuCoder/AceCode, MBPP ``test_list`` with
  ``test_setup_code`` / sanitized-MBPP ``test_imports``), a ``check(candidate)`` module (``test`` +
  ``entry_point``: HumanEval, and LeetCodeDataset with ``Solution().method`` entry points and its
  ``prompt`` of helpers as ``test_imports``), or stdin/stdout pairs (``inputs`` + ``outputs``, or
  ``test_cases`` given as ``[{"input": ..., "output": ...}]``) compared on the whole output, and
  APPS/TACO's call-based tests (``fn_name``, or its raw ``input_output`` column).
* :func:`run_tests` / :func:`run_tests_many` -- one :class:`TestOutcome` per test, each test its
  own sandboxed process with its own deadline, so one test that hangs fails only itself. An assert
  or check test is decided by the judge (``sandbox_judge``), a separate sandboxed process that runs
  the test's own code and asks the program's process for its values; stdin/stdout tests compare
  the captured output here (linear, on output capped at ``max_output_bytes``).
* :func:`reference_from_row` -- the row's reference solution, for rewards that compare to it.

Runs of the same code on the same tests are cached per process (bounded), so ``code``,
``efficiency`` and ``maintainability`` in one step share a single sandbox run. No torch.
"""

from __future__ import annotations

import ast
import builtins
import collections
import dataclasses
import enum
import functools
import json
import math
import re
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from diffugrpo_plugin.rewards.harnesses import program_harness, tests_harness
from diffugrpo_plugin.rewards.verdicts import parse_python
from diffugrpo_plugin.sandbox.config import SandboxError
from diffugrpo_plugin.sandbox.host import LINE_COUNT_SLOWDOWN, Sandbox, shared_sandbox
from diffugrpo_plugin.sandbox.jobs import Job, JobResult, Judged, escaped
from diffugrpo_plugin.sandbox.languages import COMPILER_ADDRESS_SPACE_MB
from diffugrpo_plugin.sandbox.languages import language as get_language

SIGXCPU = 24
CACHE_SIZE = 4096
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


class Outcome(str, enum.Enum):
    """The verdict of one test."""

    PASSED = "PASSED"
    FAILED = "FAILED"  # assertion failed or wrong output
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIME_LIMIT_EXCEEDED = "TIME_LIMIT_EXCEEDED"
    MEMORY_LIMIT_EXCEEDED = "MEMORY_LIMIT_EXCEEDED"
    SYNTAX_ERROR = "SYNTAX_ERROR"
    COMPILATION_ERROR = "COMPILATION_ERROR"  # another language's program did not compile (languages.py)


@dataclass(frozen=True)
class TestOutcome:
    """One test's verdict with what the sandbox measured for it (zero when it did not run).

    ``compared``: how many comparisons in this test the program's own code decided (``==`` between two
    of its objects); a pass with ``compared > 0`` depends on the program's comparison (see the
    trust rule in docs/guides/rewards.md). ``judged_inside``: the verdict is the program's own exit status
    (another language's in-language assertions, compiled into the program): a program can end itself
    early with success, so such a pass is the program's word, not the judge's."""

    __test__ = False  # not a pytest class

    index: int
    outcome: Outcome
    detail: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    memory_kb: int = 0  # peak resident memory above the bare interpreter
    instructions: int | None = None  # user-space instructions, where the CPU exposes a counter
    compared: int = 0
    lines: int | None = None  # executed source lines, in a run that counted them (the program's own claim)
    judged_inside: bool = False

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "cpu_s": self.cpu_s,
            "wall_s": self.wall_s,
            "memory_kb": self.memory_kb,
            "instructions": self.instructions,
            "compared": self.compared,
            "lines": self.lines,
            "judged_inside": self.judged_inside,
        }


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


def parses(code: str) -> bool:
    """Whether ``code`` is valid Python syntax (parsed only, never executed)."""
    try:
        parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


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
    return tuple(zip(_strings(inputs, f"{column} inputs"), _strings(outputs, f"{column} outputs")))


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


_ENTRY_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Call, ast.Load)


# a test that calls one of these may read a name through a string: ``globals()[op](*args)``, ``eval("LRUCache")``
NAMES_BY_STRING = frozenset({"eval", "exec", "globals", "locals", "vars"})


@functools.lru_cache(maxsize=CACHE_SIZE)
def free_names(test: str, own_names: frozenset[str] | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names a test's code reads and never binds (assigned, defined, imported, a parameter or an
    ``except`` name anywhere in it), sorted, and those of them it only ever calls: the judge resolves each
    as the task says (see ``sandbox_judge``). A test that reads names through strings (:data:`NAMES_BY_STRING`)
    reads the names its string constants hold too (an identifier, or the code ``eval`` is given): of ``own_names``
    (the reference's, where the row has one) only, since a method's name in a LeetCode driver's list of calls
    (``"put"``) is not a name of the task; without, every one of them."""
    try:
        tree = parse_python(test)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return (), ()
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    read, bound, not_called = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
            if isinstance(node.ctx, ast.Load) and id(node) not in called:
                not_called.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    free = read - bound
    if free & NAMES_BY_STRING:
        spoken = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 10_000:
                inner = free_names(node.value)[0] if node.value.strip() else ()
                spoken.update(name for name in inner if own_names is None or name in own_names)
        free |= spoken - bound
        not_called |= spoken  # read, as a plain name is: a module's name stays the judge's module
    return tuple(sorted(free)), tuple(sorted(free - not_called))


def entry_root(entry_point: str) -> str | None:
    """The program's name an entry point starts from (``Solution`` of ``Solution().twoSum``); None when the
    entry point is not a name followed by attributes and argument-free calls."""
    try:
        tree = parse_python(entry_point, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not all(isinstance(node, _ENTRY_NODES) for node in ast.walk(tree)) or any(
        isinstance(node, ast.Call) and (node.args or node.keywords) for node in ast.walk(tree)
    ):
        return None
    names = [node.id for node in ast.walk(tree) if isinstance(node, ast.Name)]
    return names[0] if len(names) == 1 else None


def defined_names(source: str) -> frozenset[str]:
    """Every name ``source`` binds at module level, as Python would see it after running it: ``def``, ``class``,
    assignments, imports, and the same inside module-level ``if``/``try``/``for``/``while``/``with`` blocks.
    In an assert test these are the program's: the task asks the program for them."""
    names = set()
    pending = list(_top_level(source))
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                names.add(child.id)
            elif isinstance(child, ast.ExceptHandler) and child.name:
                names.add(child.name)
            elif not isinstance(child, (ast.Lambda, ast.expr_context)):
                pending.append(child)
    return frozenset(names)


def class_names(source: str) -> tuple[str, ...]:
    """The classes ``source`` defines at module level: a check's reference's own (a ``Point`` the check builds its
    expected value from), as which the program's classes of those names are rebuilt in the judge."""
    return tuple(node.name for node in _top_level(source) if isinstance(node, ast.ClassDef))


# Builtin bases whose methods a class of the reference inherits, known without running it.
_BUILTIN_BASES = frozenset(("object", "str", "bytes", "list", "dict", "set", "frozenset", "tuple", "int", "float"))


def _instance_fields(method: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The attributes ``method`` sets on its instance (``self.count = 0``, ``self.items: list = []``, ``self.n += 1``):
    a task's ``Counter`` whose field is ``count`` offers ``.count``, as an instance of it does."""
    if not method.args.args:
        return set()
    instance = method.args.args[0].arg
    fields = set()
    for node in ast.walk(method):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        for target in targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                if (
                    isinstance(element, ast.Attribute)
                    and isinstance(element.value, ast.Name)
                    and element.value.id == instance
                ):
                    fields.add(element.attr)
    return fields


def class_attributes(source: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(class, public attributes)`` for each class ``source`` defines at module level
    (its other classes, builtins): what its body defines and what it inherits; ``("*",)`` for one whose bases or
    metaclass are not known here. The judge trusts a ``str`` method (``startswith``) that the test calls on a program
    object only where the reference's class of that name offers it."""
    classes = {node.name: node for node in _top_level(source) if isinstance(node, ast.ClassDef)}

    def attributes(name: str, seen: frozenset) -> set[str] | None:
        node = classes[name]
        if node.keywords or name in seen:
            return None  # a metaclass, or a cycle: what it offers is not known here
        names = set()
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names |= _instance_fields(statement)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(statement.name)
            elif isinstance(statement, ast.Assign):
                names.update(target.id for target in statement.targets if isinstance(target, ast.Name))
            elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                names.add(statement.target.id)
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                inherited = attributes(base.id, seen | {name})
                if inherited is None:
                    return None
                names |= inherited
            elif isinstance(base, ast.Name) and base.id in _BUILTIN_BASES:
                names.update(dir(getattr(builtins, base.id)))
            else:
                return None
        return {attribute for attribute in names if not attribute.startswith("_")}

    found = ((name, attributes(name, frozenset())) for name in classes)
    return tuple((name, tuple(sorted(names)) if names is not None else ("*",)) for name, names in found)


def imported_names(source: str) -> tuple[tuple[str, str, str], ...]:
    """``(name, module, attribute)`` for each name ``source`` binds at module level by importing it from the
    standard library or numpy (``attribute`` empty for a module): the judge binds its own, so a program that
    rebinds ``math`` or ``Counter`` changes nothing the tests use."""
    found = []
    for node in _top_level(source):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module = alias.name if alias.asname else alias.name.split(".")[0]
                found.append((alias.asname or module, module, ""))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.extend(
                (alias.asname or alias.name, node.module, alias.name) for alias in node.names if alias.name != "*"
            )
    return tuple(entry for entry in found if entry[1].split(".")[0] in (*sys.stdlib_module_names, "numpy"))


def _top_level(source: str) -> list[ast.stmt]:
    try:
        return parse_python(source).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []


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
    starter code has ``class Solution`` calls its method; without either, the program's ``Solution`` if it has one."""
    name = row["fn_name"]
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"column 'fn_name' must name the function the tests call, got {name!r}")
    inputs, outputs = _as_list(row.get("inputs"), "inputs"), _as_list(row.get("outputs"), "outputs")
    if len(inputs) != len(outputs):
        raise ValueError(f"call-based tests (fn_name): {len(inputs)} inputs but {len(outputs)} outputs")
    # which of the two the task means: its reference's, else its starter code's, else the program's (as APPS asks)
    known = next((code for code in (reference_from_row(row), row.get("starter_code")) if isinstance(code, str)), None)
    if known is None:
        function = f"try:\n    function = Solution().{name}\nexcept NameError:\n    function = {name}\n"
    else:
        function = f"function = {f'Solution().{name}' if 'class Solution' in known else name}\n"
    asserts = []
    for position, (arguments, expected) in enumerate(zip(inputs, outputs)):
        if not isinstance(arguments, list):
            raise ValueError(f"call-based tests (fn_name): input {position} must be a list of arguments")
        # as JSON in the test, read back by the judge's json: repr would write an infinity as `inf`, a name
        asserts.append(
            f"{function}result = function(*json.loads({json.dumps(arguments)!r}))\n"
            "result = list(result) if isinstance(result, tuple) else result\n"
            f"expected = json.loads({json.dumps(expected)!r})\n"
            "assert result == expected or (isinstance(expected, list) and len(expected) == 1 and result == expected[0])"
        )
    return asserts


def _read_tests(row: Mapping[str, Any]) -> TestSpec | None:
    row = _apps_columns(row)
    prelude = _joined(row.get("test_imports"), "test_imports")
    language = language_of(row)
    if language != "python":
        return _other_language_tests(row, language, prelude)
    setup = _joined(row.get("test_setup_code"), "test_setup_code")
    if row.get("test") is not None and (row.get("entry_point") is not None or row.get("test_cases") is None):
        return _check_tests(row, prelude, setup)
    if row.get("fn_name") is not None and row.get("test_cases") is None and row.get("test_list") is None:
        row = {**row, "test_cases": _call_based_asserts(row)}
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
                        "program_names": defined_names(reference or "") - {name for name, _, _ in imports},
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


FLOAT_TOLERANCE = 1e-6  # absolute or relative, the error Codeforces-style problems with real answers allow


def outputs_match(actual: str, expected: str) -> bool:
    """The token checker of Codeforces-style judges: the outputs' whitespace-separated tokens are equal in number
    and each pair is equal, or, where the expected token is a decimal with a fraction or an exponent (``3.3333``,
    ``1e-9``), both are finite numbers within :data:`FLOAT_TOLERANCE` absolute or relative. Line breaks and
    spacing do not count; an integer token is compared exactly; a prefix of the expected output does not match
    (unlike open-r1's zip)."""
    actual_tokens, expected_tokens = actual.split(), expected.split()
    if len(actual_tokens) != len(expected_tokens):
        return False
    return all(a == e or _reals_close(a, e) for a, e in zip(actual_tokens, expected_tokens, strict=True))


def _reals_close(actual: str, expected: str) -> bool:
    if not any(mark in expected for mark in ".eE") or len(actual) > 64 or len(expected) > 64:
        return False
    try:
        a, e = float(actual), float(expected)
    except ValueError:
        return False
    if not (math.isfinite(a) and math.isfinite(e)):
        return False
    return abs(a - e) <= FLOAT_TOLERANCE * max(1.0, abs(e))


def _memory_exhausted(result: JobResult) -> bool:
    return (
        result.oom_killed
        or result.exception == "MemoryError"
        or (
            result.status == "signal"
            and ("MemoryError" in result.stderr_tail or "Cannot allocate" in result.stderr_tail)
        )
    )


def _failure(result: JobResult, stdio: bool, timeout_s: float) -> tuple[Outcome, str] | None:
    """The verdict of a run that did not finish normally; None when it did."""
    status = result.status
    if status == "output_limit":
        return Outcome.FAILED, "output longer than the capture limit"
    if _memory_exhausted(result):
        return Outcome.MEMORY_LIMIT_EXCEEDED, "memory limit exceeded"
    if status == "timeout" or (status == "signal" and result.signal == SIGXCPU) or result.cpu_s > timeout_s:
        return Outcome.TIME_LIMIT_EXCEEDED, f"time limit exceeded ({result.cpu_s:.2f} s of CPU, limit {timeout_s} s)"
    if status == "exception" and result.exception == "SyntaxError":
        return Outcome.SYNTAX_ERROR, result.message
    if status == "exception" and result.exception == "AssertionError" and not stdio:
        return Outcome.FAILED, "assertion failed" + (f": {result.message}" if result.message else "")
    if status == "exception":
        return Outcome.RUNTIME_ERROR, f"{result.exception}: {result.message}"
    if status == "signal":
        return Outcome.RUNTIME_ERROR, f"killed by signal {result.signal}"
    if status == "vanished" and not (stdio and result.exit_code == 0):  # os._exit(0) ends a stdin/stdout program
        return Outcome.RUNTIME_ERROR, "exited without finishing the test"
    if status == "not_run":
        return Outcome.RUNTIME_ERROR, result.message or "not run: the sandbox stopped before this test"
    # sys.exit() is how a stdin/stdout program may end; in a judged test it ends the program before the test.
    if status == "exit" and (not stdio or result.exit_code not in (0, None)):
        return Outcome.RUNTIME_ERROR, f"exited with code {result.exit_code} before the test finished"
    return None


def _output_verdict(result: JobResult, expected: str) -> tuple[Outcome, str]:
    if result.stdout_truncated:
        return Outcome.FAILED, "output longer than the capture limit"
    if outputs_match(result.stdout, expected):
        return Outcome.PASSED, ""
    return Outcome.FAILED, "wrong output"


JUDGE_OUTCOMES = {
    "passed": Outcome.PASSED,
    "failed": Outcome.FAILED,
    "error": Outcome.RUNTIME_ERROR,
    "memory": Outcome.MEMORY_LIMIT_EXCEEDED,
    "ended": Outcome.RUNTIME_ERROR,
}


# The judge answers for every test it reaches, the program's crashes and hangs included ("ended"); it gives none
# only when it was stopped itself: over its CPU, memory or time on the values this program sent.
JUDGE_GAVE_NONE = "the judge gave no verdict (it exceeded its limits on this program's values)"


def _judge_verdict(verdict: dict) -> tuple[Outcome, str]:
    if verdict["outcome"] == "judge_error":
        raise TaskError(f"the task's own test code failed in the judge: {verdict['detail']}")
    return JUDGE_OUTCOMES[verdict["outcome"]], verdict["detail"]


def judge(result: JobResult, job: Job, index: int, timeout_s: float, expected_output: str | None) -> TestOutcome:
    """Turns what happened to test ``index``'s process (and its judge's verdict) into its verdict."""
    if result.status == "setup_error":
        raise SandboxError(f"the sandbox could not prepare a test: {result.message}")
    if result.verdict is not None and result.verdict["outcome"] == "judge_error":
        _judge_verdict(result.verdict)  # the task's own code failed: whatever the program did, no verdict
    judge_failed = expected_output is None and result.verdict is None and result.status != "not_run"
    verdict = (
        (Outcome.FAILED, JUDGE_GAVE_NONE) if judge_failed else _failure(result, expected_output is not None, timeout_s)
    )
    if verdict is None:
        verdict = (
            _output_verdict(result, expected_output) if expected_output is not None else _judge_verdict(result.verdict)
        )
    outcome, detail = verdict
    compared = result.verdict["compared"] if result.verdict else 0
    return TestOutcome(
        index=index,
        outcome=outcome,
        detail=detail,
        cpu_s=result.cpu_s,
        wall_s=result.wall_s,
        memory_kb=result.memory_kb,
        instructions=result.instructions,
        compared=compared,
        lines=result.lines,
    )


def _compile_failure(result: JobResult, limit_s: float) -> str:
    if result.status == "timeout" or result.cpu_s > limit_s:
        return f"compilation exceeded its limit ({limit_s} s of CPU)"
    if result.oom_killed:
        return "compilation exceeded the memory limit"
    where = f"signal {result.signal}" if result.signal is not None else f"exit code {result.exit_code}"
    return f"compilation failed ({where}): {_first_error_line(result.stderr_tail)}"


def _run_in_language(code: str, spec: TestSpec, sandbox: Sandbox, limit: float) -> list[TestOutcome]:
    """Another language's program (``languages.py``): compiled once, then one fresh process per test."""
    language = get_language(spec.language)
    missing = language.missing_tools()
    if missing:
        raise SandboxError(
            f"{language.name} tests need {', '.join(missing)} on this machine: apt-get install -y {language.package}"
        )
    if spec.kind == "program":
        harness = tests_harness(language, spec.prelude, code, spec.check_source)
    else:
        harness = program_harness(language, spec.prelude, code)
    files = harness.files
    memory = language.address_space_mb
    jobs = []
    compile_s = sandbox.config.compile_timeout_s
    # the program's compile, then (C++) the tests' in a job of their own, so the first never sees their files
    steps = [
        (command, step_files)
        for command, step_files in ((harness.compile, files), (harness.link, harness.link_files))
        if command
    ]
    for command, step_files in steps:
        compiler_memory = max(memory, COMPILER_ADDRESS_SPACE_MB)
        jobs.append(
            Job(
                "",
                timeout_s=compile_s,
                argv=command,
                files=step_files,
                compile=True,
                address_space_mb=compiler_memory,
            )
        )
    if steps:
        files = ()
    run = harness.run
    stdins = [stdin for stdin, _ in spec.stdio] if spec.kind == "stdio" else [""]
    # in-language tests share the program's process: no forked copy of it may try answers against them
    no_fork = spec.kind == "program"
    for position, stdin in enumerate(stdins):
        first = files if position == 0 else ()
        jobs.append(Job("", stdin, limit, argv=run, files=first, address_space_mb=memory, no_fork=no_fork))
    results = sandbox.run(jobs, harness.ro_binds)
    compiled, results = results[: len(steps)], results[len(steps) :]
    for step in compiled:  # a failed step leaves the next one not_compiled: the first failure is the reason
        if step.status == "setup_error":
            raise SandboxError(f"the sandbox could not prepare a test: {step.message}")
        if step.status != "ok":
            detail = _compile_failure(step, compile_s)
            return [TestOutcome(index, Outcome.COMPILATION_ERROR, detail) for index in range(len(stdins))]
    if spec.kind == "stdio":
        return [
            judge(result, jobs[-len(stdins) + index], index, limit, output)
            for index, (result, (_, output)) in enumerate(zip(results, spec.stdio))
        ]
    return [_judged_inside(results[0], limit, harness.marker)]


def _first_error_line(stderr: str) -> str:
    """The line of a failed run's stderr that says what went wrong (the first naming an error or assertion)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    named = [line for line in lines if any(word in line.lower() for word in ("error", "assert", "undefined reference"))]
    return escaped((named or lines or [""])[0], 300)


def _judged_inside(result: JobResult, limit: float, marker: str) -> TestOutcome:
    """The verdict of in-language tests: passed when the process exits 0 after the runner printed ``marker``
    (``harnesses``: the tests ran to their end)."""
    measured = {"cpu_s": result.cpu_s, "wall_s": result.wall_s, "memory_kb": result.memory_kb}
    if result.status == "setup_error":
        raise SandboxError(f"the sandbox could not prepare a test: {result.message}")
    failure = _failure(result, True, limit)
    if failure is None and marker in result.stdout.splitlines():
        return TestOutcome(0, Outcome.PASSED, "", judged_inside=True, **measured)
    if failure is None:
        detail = "the program ended (exit code 0) before its tests finished"
        return TestOutcome(0, Outcome.FAILED, detail, judged_inside=True, **measured)
    outcome, detail = failure
    if outcome is Outcome.RUNTIME_ERROR and result.status in ("exit", "signal"):  # a failed assertion ends it so
        how = f"signal {result.signal}" if result.status == "signal" else f"exit code {result.exit_code}"
        said = _first_error_line(result.stderr_tail)
        outcome, detail = Outcome.FAILED, f"the tests failed ({how}){': ' + said if said else ''}"
    return TestOutcome(0, outcome, detail, judged_inside=True, **measured)


def _run_uncached(
    code: str,
    spec: TestSpec,
    sandbox: Sandbox,
    timeout_s: float | None,
    count_lines: bool = False,
    no_fork: bool = False,
) -> list[TestOutcome]:
    limit = timeout_s if timeout_s is not None else sandbox.config.timeout_s
    if spec.language != "python":
        return _run_in_language(code, spec, sandbox, limit)
    if not parses(code):
        return [TestOutcome(index, Outcome.SYNTAX_ERROR, "the code does not parse") for index in range(len(spec))]
    jobs = [
        dataclasses.replace(job, timeout_s=limit, count_lines=count_lines, no_fork=no_fork) for job in spec.jobs(code)
    ]
    expected = [output for _, output in spec.stdio] if spec.kind == "stdio" else [None] * len(jobs)
    results = sandbox.run(jobs)
    cpu_limit = limit * LINE_COUNT_SLOWDOWN if count_lines else limit
    return [
        judge(result, job, index, cpu_limit, output)
        for index, (result, job, output) in enumerate(zip(results, jobs, expected))
    ]


class _RunCache:
    """Bounded LRU of finished runs plus the runs in flight, so equal requests run once."""

    def __init__(self, size: int):
        self.size = size
        self.lock = threading.Lock()
        self.entries: collections.OrderedDict[tuple, Future] = collections.OrderedDict()

    def get_or_run(self, key: tuple, run) -> list[TestOutcome]:
        with self.lock:
            future = self.entries.get(key)
            owner = future is None
            if owner:
                future = Future()
                self.entries[key] = future
                while len(self.entries) > self.size:
                    self.entries.popitem(last=False)
            else:
                self.entries.move_to_end(key)
        if owner:
            try:
                future.set_result(run())
            except BaseException as exc:
                with self.lock:
                    self.entries.pop(key, None)  # failures are not cached: the next call retries
                future.set_exception(exc)
        return future.result()


_cache = _RunCache(CACHE_SIZE)


def run_tests(
    code: str,
    spec: TestSpec,
    sandbox: Sandbox | None = None,
    timeout_s: float | None = None,
    cache: bool = True,
    count_lines: bool = False,
    no_fork: bool = False,
) -> list[TestOutcome]:
    """Runs every test of ``spec`` against ``code``; one outcome per test, in order.

    Code that does not parse gets SYNTAX_ERROR for every test without being run. ``timeout_s``
    overrides the sandbox's per-test limit; ``cache=False`` forces a fresh run (benchmarks);
    ``count_lines`` counts each test's executed lines (``TestOutcome.lines``) under a CPU limit
    ``sandbox.LINE_COUNT_SLOWDOWN`` times larger; ``no_fork`` runs a Python program where it can start threads but
    no process (``Job.no_fork``: what the ``efficiency`` reward measures). Raises :class:`SandboxError` (never a verdict) when the
    sandbox itself fails.
    """
    sandbox = sandbox or shared_sandbox()
    if not cache:
        return _run_uncached(code, spec, sandbox, timeout_s, count_lines, no_fork)
    key = (code, spec, timeout_s, sandbox.config, count_lines, no_fork)
    return _cache.get_or_run(key, lambda: _run_uncached(code, spec, sandbox, timeout_s, count_lines, no_fork))


def run_tests_many(
    items: Sequence[tuple[str, TestSpec]],
    sandbox: Sandbox | None = None,
    timeout_s: float | None = None,
    cache: bool = True,
    count_lines: bool = False,
    no_fork: bool = False,
) -> list[list[TestOutcome] | SandboxError | TaskError]:
    """:func:`run_tests` for many (code, spec) pairs, up to the sandbox's concurrency at once.

    A pair whose sandbox failed yields its :class:`SandboxError` in place of outcomes, one whose task's own code
    failed in the judge its :class:`TaskError`.
    """
    sandbox = sandbox or shared_sandbox()

    def one(item: tuple[str, TestSpec]) -> list[TestOutcome] | SandboxError | TaskError:
        try:
            return run_tests(item[0], item[1], sandbox, timeout_s, cache, count_lines, no_fork)
        except (SandboxError, TaskError) as exc:
            return exc

    if len(items) <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), sandbox.config.max_concurrency)) as pool:
        return list(pool.map(one, items))


def pass_rate(outcomes: Sequence[TestOutcome]) -> float | None:
    """Fraction of tests passed; None when there are no tests (not a division by zero)."""
    if not outcomes:
        return None
    return sum(outcome.passed for outcome in outcomes) / len(outcomes)
