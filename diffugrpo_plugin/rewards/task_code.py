"""A task's own Python read without running it: the names a test reads and never binds (:func:`free_names`), what
a reference defines at its top level, its classes and the attributes they offer, what it imports. The judge resolves
a test's names by these (``sandbox_judge``). Untrusted source is parsed one thread at a time (:func:`parse_python`).
No torch.
"""

from __future__ import annotations

import ast
import builtins
import functools
import sys
import threading

_PARSE_LOCK = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse``, one thread at a time. CPython 3.11 keeps the AST converter's recursion depth in state
    shared by the interpreter's threads, so two rewards parsing at once in the test-runner's thread pool can
    raise ``SystemError: AST constructor recursion depth mismatch`` (seen in a training run: the ``code``
    reward then scores None for the step); 3.12 fixed it."""
    with _PARSE_LOCK:
        return ast.parse(source, mode=mode)


def parses(code: str) -> bool:
    """Whether ``code`` is valid Python syntax (parsed only, never executed)."""
    try:
        parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


_ENTRY_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Call, ast.Load)


# a test that calls one of these may read a name through a string: ``globals()[op](*args)``, ``eval("LRUCache")``
NAMES_BY_STRING = frozenset({"eval", "exec", "globals", "locals", "vars"})


@functools.lru_cache(maxsize=4096)
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
_BUILTIN_BASES = frozenset(
    (
        "object",
        "str",
        "bytes",
        "list",
        "dict",
        "set",
        "frozenset",
        "tuple",
        "int",
        "float",
        *(
            name
            for name, value in vars(builtins).items()
            if isinstance(value, type) and issubclass(value, BaseException)
        ),
    )
)
# standard-library bases a task class derives from (an ``Enum``, an ``ABC``, a ``Generic[T]``)
_STDLIB_BASES = frozenset(
    ("Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ABC", "Generic", "Protocol", "NamedTuple", "TypedDict")
)


def _base_name(base: ast.expr) -> str | None:
    """``Enum`` for ``Enum``, ``enum.Enum`` and ``Generic[T]``; None for any other form of base."""
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else None


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


_ANY_ATTRIBUTE = ("__getattr__", "__getattribute__")
DYNAMIC_FIELDS = "*fields"  # in class_attributes: fields of any name (sandbox_refusals.DYNAMIC_FIELDS reads it)


def _sets_named_fields(method: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``method`` gives its instance fields by names it is handed: ``setattr(self, name, ...)``,
    ``self.__dict__.update(...)``, ``vars(self).update(...)``."""
    if not method.args.args:
        return False
    own = method.args.args[0].arg
    for node in ast.walk(method):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Name) and function.id == "setattr" and node.args:
            target = node.args[0]
            if isinstance(target, ast.Name) and target.id == own:
                return True
        if isinstance(function, ast.Attribute) and function.attr == "update":
            holder = function.value
            if isinstance(holder, ast.Attribute) and holder.attr == "__dict__":
                holder = holder.value
            elif isinstance(holder, ast.Call) and isinstance(holder.func, ast.Name) and holder.func.id == "vars":
                holder = holder.args[0] if holder.args else None
            else:
                continue
            if isinstance(holder, ast.Name) and holder.id == own:
                return True
    return False


def class_attributes(source: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(class, public attributes)`` for each class ``source`` defines at module level
    (its other classes, builtins): what its body defines and what it inherits; ``("*",)`` for one whose bases or
    metaclass are not known here; :data:`DYNAMIC_FIELDS` among them for one whose fields are named by its caller or
    forwarded (``setattr(self, key, value)``, ``__getattr__``). The judge trusts a ``str`` method (``startswith``) that the test calls on a program
    object only where the reference's class of that name offers it."""
    classes = {node.name: node for node in _top_level(source) if isinstance(node, ast.ClassDef)}

    def attributes(name: str, seen: frozenset) -> set[str] | None:
        node = classes[name]
        if node.keywords or name in seen:
            return None  # a metaclass, or a cycle: what it offers is not known here
        names = set()
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                statement.name in _ANY_ATTRIBUTE or _sets_named_fields(statement)
            ):
                # a proxy answering any attribute it forwards, or fields named by the caller (Record(title=...)'s
                # setattr(self, key, value)): a field of any name is read (its value), no method of any name is
                names.add(DYNAMIC_FIELDS)
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
            elif _base_name(base) in _BUILTIN_BASES or _base_name(base) in _STDLIB_BASES:
                # a builtin's methods are answered by the builtin on the value a program object of that builtin
                # holds, never by a plain class of the program's (its own startswith on a Tag that is no str)
                continue
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
