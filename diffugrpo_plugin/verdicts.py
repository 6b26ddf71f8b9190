"""Verdicts decided outside the sandbox: a test split into probes the candidate answers and a check it never sees.

An assert test such as ``assert set(similar((3, 4, 5), (5, 7, 4))) == set((4, 5))`` is cut into

* **probes**: the maximal subexpressions that need the candidate's code (``similar((3, 4, 5), (5, 7, 4))``).
  Only these are sent into the sandbox, which evaluates them after the candidate's program and
  returns each value in a type-exact encoding: builtin values, read through the builtin's own
  methods (an ``int`` subclass arrives as the int it holds), and any other object as an
  :class:`Opaque` (its type name and truth value, equal to nothing else), so nothing that compares
  equal to everything survives the trip. A probe never holds a comparison;
* **the check**: the rest (``set(__probe0) == set((4, 5))``), with the expected values, evaluated
  here on the decoded values by a restricted evaluator (whitelisted syntax, pure builtins, a few
  pure stdlib modules). The expected values never enter the sandbox.

HumanEval's ``check(candidate)`` bodies are planned here too: statements without the candidate
(local variables, loops over known values, stdlib imports) run in the restricted evaluator, and
each assert they reach becomes one split test with the known values written into its probes as
literals. A test that cannot be split (it feeds a candidate's value back into later statements,
uses syntax outside the whitelist, ...) still runs whole inside the sandbox and is counted as such.

Untrusted text is parsed here only under :data:`MAX_TEST_CHARS` and decoded under
:data:`MAX_VALUE_BYTES`. No torch.
"""

from __future__ import annotations

import ast
import builtins
import cmath
import copy
import json
import math
import random
import re
import string
import threading
import types
from dataclasses import dataclass, field
from typing import Any

_PARSE_LOCK = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse``, one thread at a time. CPython 3.11 keeps the AST converter's recursion depth in state
    shared by the interpreter's threads, so two rewards parsing at once in the test-runner's thread pool can
    raise ``SystemError: AST constructor recursion depth mismatch`` (seen in a training run: the ``code``
    reward then scores None for the step); 3.12 fixed it."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)

MAX_TEST_CHARS = 200_000
MAX_VALUE_BYTES = 1 << 20
MAX_VALUE_DEPTH = 64
PROBE_PREFIX = "__probe"
PLANNER_SEED = 0  # random values a HumanEval check draws are drawn once, the same for every completion

SAFE_BUILTIN_NAMES = ("abs", "all", "any", "ascii", "bin", "bool", "bytes", "chr", "complex", "dict", "divmod",
                      "enumerate", "filter", "float", "format", "frozenset", "hex", "int", "isinstance", "len", "list",
                      "map", "max", "min", "oct", "ord", "pow", "range", "repr", "reversed", "round", "set", "slice",
                      "sorted", "str", "sum", "tuple", "zip", "True", "False", "None", "Exception", "ValueError",
                      "TypeError", "KeyError", "IndexError")
SAFE_MODULES = {"math": math, "cmath": cmath, "string": string, "re": re, "random": random, "copy": copy}
_FRAME_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.Store, ast.Compare, ast.BoolOp, ast.BinOp,
                ast.UnaryOp, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Call, ast.keyword, ast.Subscript, ast.Slice,
                ast.IfExp, ast.Attribute, ast.Starred, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                ast.comprehension, ast.JoinedStr, ast.FormattedValue, ast.cmpop, ast.boolop, ast.operator,
                ast.unaryop, ast.expr_context)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class Unsplittable(ValueError):
    """The test cannot be judged outside the sandbox; it runs whole inside instead."""


@dataclass(frozen=True)
class SplitTest:
    """One assert cut in two: ``probes`` (expression sources the sandbox evaluates after the candidate's
    program, in its namespace) and ``check`` (a validated expression over ``__probe<i>`` and ``known``,
    the values the planner computed, evaluated here)."""

    probes: tuple[str, ...]
    check: str
    known: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __hash__(self) -> int:
        return hash((self.probes, self.check, repr(sorted(self.known.items()))))


def _safe_globals(known: dict[str, Any]) -> dict[str, Any]:
    namespace = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES if hasattr(builtins, name)}
    namespace.update(SAFE_MODULES)
    namespace.update(known)
    return {"__builtins__": {}, **namespace}


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound_in(node: ast.AST) -> set[str]:
    """Names a comprehension binds (its loop targets)."""
    return {n.id for c in ast.walk(node) if isinstance(c, ast.comprehension) for n in ast.walk(c.target)
            if isinstance(n, ast.Name)}


def _is_evaluable_here(node: ast.AST, safe: set[str]) -> bool:
    """Whether ``node`` uses only whitelisted syntax, safe names (or names its comprehensions bind) and
    attributes of the safe modules: then it can be evaluated outside the sandbox."""
    allowed = safe | _bound_in(node)
    for child in ast.walk(node):
        if not isinstance(child, _FRAME_NODES):
            return False
        if isinstance(child, ast.Name) and child.id not in allowed:
            return False
        if isinstance(child, ast.Attribute) and not (isinstance(child.value, ast.Name)
                                                     and child.value.id in SAFE_MODULES and child.value.id in allowed):
            return False
        if isinstance(child, ast.Name) and child.id.startswith("__") and not child.id.startswith(PROBE_PREFIX):
            return False
    return True


class _Carver(ast.NodeTransformer):
    """Replaces every maximal subexpression that cannot be evaluated here by ``__probe<i>``."""

    def __init__(self, safe: set[str]):
        self.safe = safe
        self.probes: list[ast.expr] = []

    def _probe(self, node: ast.expr) -> ast.Name:
        self.probes.append(node)
        return ast.copy_location(ast.Name(id=f"{PROBE_PREFIX}{len(self.probes) - 1}", ctx=ast.Load()), node)

    def visit(self, node: ast.AST) -> ast.AST:
        if not isinstance(node, ast.expr):
            return self.generic_visit(node)  # keywords: their values are carved like arguments
        if _is_evaluable_here(node, self.safe):
            return node
        structural = isinstance(node, (ast.Compare, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Tuple, ast.List,
                                       ast.Set, ast.Dict, ast.Subscript, ast.IfExp, ast.Starred))
        safe_call = (isinstance(node, ast.Call) and _is_evaluable_here(node.func, self.safe)
                     and not any(isinstance(arg, _COMPREHENSIONS) for arg in node.args))
        if structural or safe_call:
            return self.generic_visit(node)
        return self._probe(node)


def split_expression(expression: ast.expr, safe: set[str]) -> tuple[tuple[str, ...], str]:
    """(probe sources, check source) of one assert expression; :class:`Unsplittable` when the check part
    would still need something only the sandbox has."""
    carver = _Carver(safe)
    check = carver.visit(copy.deepcopy(expression))
    placeholders = {f"{PROBE_PREFIX}{i}" for i in range(len(carver.probes))}
    if not _is_evaluable_here(check, safe | placeholders):
        raise Unsplittable("the comparison needs values only the sandbox has")
    if any(isinstance(node, ast.Compare) for probe in carver.probes for node in ast.walk(probe)):
        # e.g. all(f(i) == i for i in ...): the comparison would run beside the candidate's objects
        raise Unsplittable("a comparison sits inside what only the sandbox can evaluate")
    return tuple(ast.unparse(probe) for probe in carver.probes), ast.unparse(check)


def _parsed(source: str) -> ast.Module:
    if len(source) > MAX_TEST_CHARS:
        raise Unsplittable(f"test longer than {MAX_TEST_CHARS} characters")
    try:
        return parse_python(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        raise Unsplittable(f"test does not parse: {error}") from error


def split_assert(source: str, shadowed: frozenset[str] = frozenset()) -> SplitTest:
    """A one-statement ``assert`` test (MBPP ``test_list``, AceCode ``test_cases``) split in two;
    ``shadowed``: safe names the candidate's program binds (see :func:`shadowed_names`)."""
    module = _parsed(source)
    if len(module.body) != 1 or not isinstance(module.body[0], ast.Assert):
        raise Unsplittable("not a single assert statement")
    probes, check = split_expression(module.body[0].test, _safe_names(shadowed))
    return SplitTest(probes, check)


def _safe_names(shadowed: frozenset[str] = frozenset()) -> set[str]:
    return (set(SAFE_BUILTIN_NAMES) | set(SAFE_MODULES)) - shadowed


def shadowed_names(source: str) -> frozenset[str]:
    """The safe names (builtins, the safe modules) ``source`` binds anywhere, by assignment, ``def``,
    ``class`` or import: a test that calls MBPP 126's own ``sum`` must ask the program, not the builtin."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names
                         if not (isinstance(node, ast.Import) and alias.name in SAFE_MODULES and alias.asname is None))
        elif isinstance(node, ast.Global):
            bound.update(node.names)
    return frozenset(bound & _safe_names())


# --------------------------------------------------------------------------- HumanEval-style check functions


class _Planner:
    """Runs a ``check(candidate)`` body here, statement by statement, in the restricted evaluator:
    each assert it reaches becomes a :class:`SplitTest` whose probes carry the known values as literals."""

    def __init__(self, candidate: str, shadowed: frozenset[str]):
        self.candidate = candidate
        self.safe = _safe_names(shadowed)
        self.known: dict[str, Any] = {}
        self.tests: list[SplitTest] = []
        self.random = _seeded_random()

    def evaluate(self, node: ast.expr) -> Any:
        if self.candidate in _names_in(node) or not _is_evaluable_here(node, self.safe | set(self.known)):
            raise Unsplittable(f"a statement outside an assert needs the candidate: {ast.unparse(node)[:80]}")
        namespace = _safe_globals(self.known)
        namespace["random"] = self.random  # seeded: every completion is asked the same questions
        try:
            return eval(compile(ast.Expression(node), "<check>", "eval"), namespace)  # noqa: S307 - validated AST
        except Exception as error:  # noqa: BLE001 - the dataset's own code failed here: run it inside instead
            raise Unsplittable(f"{type(error).__name__} while planning: {error}") from error

    def run(self, statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, ast.Assert):
                self.assertion(statement.test)
            elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                self.bind(statement.targets[0], self.evaluate(statement.value))
            elif isinstance(statement, ast.For) and not statement.orelse:
                for item in self.evaluate(statement.iter):
                    self.bind(statement.target, item)
                    self.run(statement.body)
            elif isinstance(statement, (ast.Import, ast.ImportFrom)):
                self.imports(statement)
            elif isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr)
                                                     and isinstance(statement.value, (ast.Constant, ast.Name))):
                continue  # a docstring, or a bare name such as HumanEval/129's lone `print`
            else:
                raise Unsplittable(f"statement {type(statement).__name__} is not planned outside the sandbox")

    def bind(self, target: ast.expr, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.known[target.id] = value
        elif isinstance(target, ast.Tuple) and all(isinstance(element, ast.Name) for element in target.elts):
            values = list(value)
            if len(values) != len(target.elts):
                raise Unsplittable("unpacking mismatch while planning")
            for element, item in zip(target.elts, values):
                self.known[element.id] = item
        else:
            raise Unsplittable("assignment target not planned outside the sandbox")

    def imports(self, statement: ast.Import | ast.ImportFrom) -> None:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.name not in SAFE_MODULES or alias.asname not in (None, alias.name):
                    raise Unsplittable(f"import of {alias.name}")
            return
        if statement.module not in SAFE_MODULES:
            raise Unsplittable(f"import from {statement.module}")
        module = self.random if statement.module == "random" else SAFE_MODULES[statement.module]
        for alias in statement.names:
            self.known[alias.asname or alias.name] = getattr(module, alias.name)

    def assertion(self, test: ast.expr) -> None:
        local_names = set(self.known)
        probes, check = split_expression(test, self.safe | local_names)
        rendered = tuple(self.with_literals(probe) for probe in probes)
        needed = _names_in(parse_python(check, mode="eval")) & local_names
        self.tests.append(SplitTest(rendered, check, {name: self.known[name] for name in needed}))

    def with_literals(self, probe: str) -> str:
        """The probe with every planner variable it reads written in as a literal (the sandbox has none)."""
        tree = parse_python(probe, mode="eval")
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in self.known:
                try:
                    literal = repr(self.known[node.id])
                    ast.literal_eval(literal)
                except (ValueError, SyntaxError, RecursionError) as error:
                    raise Unsplittable(f"value of {node.id} has no literal form") from error
        renamed = _Literals(self.known).visit(tree)
        return ast.unparse(renamed)


class _Literals(ast.NodeTransformer):
    def __init__(self, known: dict[str, Any]):
        self.known = known

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.known:
            return ast.copy_location(parse_python(repr(self.known[node.id]), mode="eval").body, node)
        return node


def plan_check(test_source: str, entry_point: str, shadowed: frozenset[str] = frozenset()) -> list[SplitTest]:
    """A HumanEval-style ``test`` (module with ``def check(candidate)``) as split tests, the parameter
    renamed to ``entry_point``; :class:`Unsplittable` when any part cannot be planned here."""
    module = _parsed(test_source)
    checks = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        raise Unsplittable("no check(candidate) function")
    candidate = checks[0].args.args[0].arg
    planner = _Planner(candidate, shadowed)
    planner.run(checks[0].body)
    if not planner.tests:
        raise Unsplittable("check() asserts nothing")
    return [SplitTest(tuple(_renamed(probe, candidate, entry_point) for probe in test.probes), test.check,
                      test.known) for test in planner.tests]


def _seeded_random() -> types.SimpleNamespace:
    """The ``random`` module as the planner offers it: its functions drawn from one seeded generator."""
    generator = random.Random(PLANNER_SEED)
    functions = {name: getattr(generator, name) for name in dir(generator)
                 if not name.startswith("_") and callable(getattr(generator, name))}
    return types.SimpleNamespace(Random=random.Random, **functions)


def _renamed(source: str, old: str, new: str) -> str:
    tree = parse_python(source, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == old:
            node.id = new
    return ast.unparse(tree)


# --------------------------------------------------------------------------- values and the verdict


class BadValue(ValueError):
    """A value report that is not a well-formed, type-exact encoding (or is too large)."""


def decode_value(encoded: Any, depth: int = 0) -> Any:
    """Plain Python from the sandbox's tagged JSON (see ``sandbox_launcher.encode``); anything else is
    :class:`BadValue`. Only exact builtin types and :class:`Opaque` come out: the check never meets
    a candidate's object."""
    if depth > MAX_VALUE_DEPTH:
        raise BadValue("value nested too deeply")
    if encoded is None or isinstance(encoded, (bool, str)):
        return encoded
    if not isinstance(encoded, list) or len(encoded) != 2 or not isinstance(encoded[0], str):
        raise BadValue(f"malformed value {str(encoded)[:60]!r}")
    tag, payload = encoded
    if tag == "int" and isinstance(payload, str) and re.fullmatch(r"-?[0-9]{1,4300}", payload):
        return int(payload)
    if tag == "float" and isinstance(payload, str):
        try:
            return float.fromhex(payload) if payload not in ("nan", "inf", "-inf") else float(payload)
        except ValueError as error:
            raise BadValue("malformed float") from error
    if tag == "complex" and isinstance(payload, list) and len(payload) == 2:
        return complex(decode_value(["float", payload[0]], depth + 1), decode_value(["float", payload[1]], depth + 1))
    if tag == "bytes" and isinstance(payload, str) and re.fullmatch(r"(?:[0-9a-f]{2})*", payload):
        return bytes.fromhex(payload)
    if tag in ("list", "tuple", "set", "frozenset") and isinstance(payload, list):
        items = [decode_value(item, depth + 1) for item in payload]
        try:
            return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
        except TypeError as error:  # an unhashable member of a set
            raise BadValue(str(error)) from error
    if tag == "dict" and isinstance(payload, list) and all(isinstance(p, list) and len(p) == 2 for p in payload):
        try:
            return {decode_value(k, depth + 1): decode_value(v, depth + 1) for k, v in payload}
        except TypeError as error:
            raise BadValue(str(error)) from error
    if tag == "opaque" and isinstance(payload, list) and len(payload) == 2 and isinstance(payload[0], str) \
            and isinstance(payload[1], bool):
        return Opaque(payload[0][:100], payload[1])
    raise BadValue(f"unknown value tag {tag!r}")


@dataclass(frozen=True, eq=False)
class Opaque:
    """A value of no builtin type (a ``re.Match``, a custom object): only its type's name and truth
    value came back, so ``assert f(x)`` can be judged; it equals nothing but itself."""

    type_name: str
    truthy: bool

    def __bool__(self) -> bool:
        return self.truthy

    def __repr__(self) -> str:
        return f"<{self.type_name} object>"


@dataclass(frozen=True)
class ProbeReport:
    """What the sandbox said about one probe: its value, or why it has none."""

    value: Any = None
    raised: str | None = None  # "ValueError: message" when evaluating the probe raised
    unserializable: str | None = None  # the type name of a value that is not plain data


def decode_reports(raw: Any, count: int) -> list[ProbeReport]:
    """The probes' reports from the sandbox's JSON list; :class:`BadValue` for anything malformed."""
    if not isinstance(raw, list) or len(raw) != count:
        raise BadValue(f"expected {count} probe reports")
    reports = []
    for item in raw:
        if not isinstance(item, dict) or len(item) != 1:
            raise BadValue("malformed probe report")
        (kind, payload), = item.items()
        if kind == "value":
            reports.append(ProbeReport(value=decode_value(payload)))
        elif kind in ("raised", "unserializable") and isinstance(payload, str):
            reports.append(ProbeReport(**{kind: payload[:500]}))
        else:
            raise BadValue("malformed probe report")
    return reports


def judge_split(test: SplitTest, reports: list[ProbeReport]) -> tuple[bool, str]:
    """(passed, why not) of a split test, deciding its check here on the probes' values."""
    for index, report in enumerate(reports):
        if report.raised is not None:
            return False, f"{test.probes[index][:80]} raised {report.raised}"
        if report.unserializable is not None:
            return False, (f"{test.probes[index][:80]} returned a {report.unserializable}, not a plain value "
                           f"(only builtin values are compared)")
    namespace = _safe_globals(test.known)
    namespace.update({f"{PROBE_PREFIX}{i}": report.value for i, report in enumerate(reports)})
    try:
        passed = bool(eval(compile(test.check, "<check>", "eval"), namespace))  # noqa: S307 - validated in split
    except Exception as error:  # noqa: BLE001 - a check that fails to evaluate is a failed test
        return False, f"the check raised {type(error).__name__}: {error}"[:300]
    return passed, "" if passed else "assertion failed (judged outside the sandbox)"


def encoded_report(text: bytes) -> Any:
    """The JSON document a probe run wrote, size-capped; :class:`BadValue` when it is not one."""
    if len(text) > MAX_VALUE_BYTES:
        raise BadValue(f"report larger than {MAX_VALUE_BYTES} bytes")
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise BadValue("report is not JSON") from error
