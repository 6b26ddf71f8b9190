"""The ``maintainability`` reward: radon's maintainability index and lizard's cyclomatic
complexity, relative to the reference solution when the row has one, gated on correctness.

Zero unless every test passes; None when the row has no tests. Empty or trivial code (fewer
than ``min_statements`` statements besides docstrings and ``pass``) earns 0.0: radon gives
empty code an index of 100, which would reward writing nothing. Each of these says why. The reward is the mean of::

    index      = min(1, MI / reference MI)        or MI / 100 without a reference
    complexity = min(1, reference CC / CC)         or min(1, 5 / CC) without one (radon grade A)

where CC is the cyclomatic complexity of the program's most complex function, the code outside every def (module
and class bodies, lambdas bound there) counting as one function (1 for straight-line code), and MI
is computed on the program's structure alone: its source as ``ast.unparse`` writes it, without docstrings or
comments. Neither can be raised by padding: trivial functions added to a program leave its most complex function
as it was (a mean over functions would fall with each one) and add volume and lines, which lower MI; comments,
docstrings and formatting (one statement per line or many) do not reach MI at all (the ``comments`` reward judges
comments). A program gains only by making its worst function simpler or the whole program smaller.

Code the metrics cannot see scores 0 with the reason ``dynamic_code``: a program that runs source or bytecode it
builds from data (``exec``, ``eval``, ``compile``, ``__import__``, ``globals()``, the ``builtins`` module,
``sys.modules``, ``importlib``, ``marshal``, ``pickle``, ``runpy``, ``code``/``codeop``, ``ctypes``, code and
function objects built by hand or reached through ``__globals__``/``__code__``/``__subclasses__``, or another
process: ``subprocess``, ``os.system``/``popen``/``exec*``/``spawn*``) would be measured as the few lines that
start it. ``re.compile`` and the like are attributes of their module, not the builtin, and count as code.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

from diffugrpo_plugin import Explained, Reason, hookimpl
from diffugrpo_plugin.rewards.code_tests import reference_from_row
from diffugrpo_plugin.rewards.judging import code_outcomes, correctness_gate, python_only, rows_of
from diffugrpo_plugin.rewards.task_code import parse_python, parses
from diffugrpo_plugin.sandbox.host import Sandbox

GOOD_COMPLEXITY = 5.0
DYNAMIC_NAMES = frozenset({"exec", "eval", "compile", "__import__", "__builtins__", "globals"})
DYNAMIC_ATTRIBUTES = frozenset(
    {"FunctionType", "CodeType", "__code__", "__globals__", "__subclasses__", "__builtins__"}
)
DYNAMIC_MODULES = frozenset(
    {"builtins", "importlib", "marshal", "pickle", "runpy", "code", "codeop", "ctypes", "subprocess"}
)
PROCESS_CALLS = ("system", "popen", "exec", "spawn", "posix_spawn")


def dynamic_code(code: str) -> str | None:
    """What in ``code`` runs code the metrics cannot see (see module docstring), or None."""
    for node in ast.walk(parse_python(code)):
        if isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES:
            return node.id
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if (
                node.attr in DYNAMIC_ATTRIBUTES
                or (owner == "os" and node.attr.startswith(PROCESS_CALLS))
                or (owner == "sys" and node.attr == "modules")
            ):
                return f"{owner}.{node.attr}" if owner else node.attr
        if isinstance(node, ast.alias) and (
            node.name.split(".")[0] in DYNAMIC_MODULES or node.name.split(".")[-1] in DYNAMIC_NAMES | DYNAMIC_ATTRIBUTES
        ):
            return node.name
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in DYNAMIC_MODULES:
            return node.module
    return None


def meaningful_statements(code: str) -> int:
    """Statements that do something: not docstrings, bare constants or ``pass``."""
    count = 0
    for node in ast.walk(parse_python(code)):
        if not isinstance(node, ast.stmt) or isinstance(node, ast.Pass):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        count += 1
    return count


def structure(code: str) -> str:
    """The program as ``ast.unparse`` writes it, without docstrings: what it does, not how it is laid out."""
    tree = parse_python(code)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def maintainability_index(code: str) -> float:
    from radon.metrics import mi_visit

    return float(mi_visit(structure(code), multi=True))


def outside_functions(code: str) -> str:
    """The code no def holds (module and class bodies, the lambdas, decorators and defaults there), as the body of
    one function: lizard lists neither lambdas nor module-level code, so branches kept there would count as none."""
    tree = parse_python(code)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [ast.Pass()]
    return "def outside_functions():\n" + textwrap.indent(ast.unparse(tree) or "pass", "    ")


def max_complexity(code: str) -> float:
    """The cyclomatic complexity of the most complex function, the code outside functions counted as one more
    (1 for straight-line code). lizard reads the code as :func:`structure` writes it, each body on lines of its own:
    as written, a one-line ``def f(): return 0`` takes the branch on the line after it into ``f`` (lizard 1.24.3),
    so dead one-liners before each branch would make the function holding them look simpler."""
    import lizard

    functions = [
        *lizard.analyze_file.analyze_source_code("candidate.py", structure(code)).function_list,
        *lizard.analyze_file.analyze_source_code("outside.py", outside_functions(code)).function_list,
    ]
    return float(max(function.cyclomatic_complexity for function in functions))


def maintainability_score(code: str, reference: str | None, min_statements: int = 2) -> float:
    """The score of code already known to be correct (see module docstring)."""
    if meaningful_statements(code) < min_statements:
        return 0.0
    index, complexity = maintainability_index(code), max_complexity(code)
    if reference is not None and parses(reference) and meaningful_statements(reference) >= min_statements:
        index_score = min(1.0, index / max(maintainability_index(reference), 1.0))
        complexity_score = min(1.0, max_complexity(reference) / complexity)
    else:
        index_score = index / 100.0
        complexity_score = min(1.0, GOOD_COMPLEXITY / complexity)
    return 0.5 * index_score + 0.5 * complexity_score


def maintainability_reward(
    completions: list,
    *,
    code_block: str = "first",
    require_format: bool = True,
    format_end: str = "exact",
    timeout_s: float | None = None,
    sandbox: Sandbox | None = None,
    min_statements: int = 2,
    **columns: Any,
) -> list[float | Explained]:
    """Radon MI and lizard CC vs the reference; 0 unless all tests pass or for trivial code."""
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
    for row, one in zip(rows_of(columns, len(completions)), judged):
        if not one.all_passed:
            scores.append(correctness_gate(one))
        elif (runs := dynamic_code(one.code)) is not None:
            scores.append(
                Explained(
                    0.0, Reason("dynamic_code", f"runs code the metrics cannot read ({runs}): nothing to measure")
                )
            )
        elif meaningful_statements(one.code) < min_statements:
            scores.append(
                Explained(
                    0.0,
                    Reason(
                        "trivial_code",
                        f"fewer than {min_statements} statements that do something (docstrings and pass do not count)",
                    ),
                )
            )
        else:
            scores.append(maintainability_score(one.code, reference_from_row(row), min_statements))
    return scores


@hookimpl
def diffugrpo_reward_functions():
    return {"maintainability": python_only(maintainability_reward)}
