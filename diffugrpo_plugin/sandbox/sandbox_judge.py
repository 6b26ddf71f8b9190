"""The judge: the side of a test that decides its verdict, and never runs the program's code.

Forked inside the sandbox by the launcher (as its own uid in root mode, with its own CPU and
memory limits and the seccomp filter), it reads the row's tests from a descriptor the program
never holds, and runs each test's own code (an assert, a HumanEval/LeetCode ``check(candidate)``
module with its constants and helpers, the task's preamble) with real Python semantics. Where
that code needs the program, it asks the program's process over :mod:`sandbox_wire`: names and the
entry point come back as values or handles (:class:`Remote`), calls carry their arguments there
and their results (and the arguments' new state, for functions that mutate their input) back.

**Names mean what the task says.** A name the test uses is the test's own (module level, the
preamble, the task's helpers) or else Python's builtin or standard-library object, unless the
task's own code defines it (``program_names``: the reference solution's top-level names, the entry
point); only then, and for names nobody else defines, is the program asked.

**The trust rule.** Values are compared here, by Python's own operators on real values. The only
place the program's code decides anything is a handle's own behaviour: ``==`` between two of the
program's objects asks the program (counted as ``compared``: the verdict depends on the program's
own comparison), and a program object compared with a builtin value is never equal to it
(counted as ``untrusted``), whatever its ``__eq__`` says.

Standard library only (numpy imported only when a numpy value arrives).
"""

from __future__ import annotations

import builtins
import os
import sys

import sandbox_wire as wire

MESSAGE_CHARS = 500
STATE_DEPTH = 200  # nested program objects compared field by field, at most
_STDOUT = [sys.stdout]  # the judge's own stdout: another one in its place is a test's redirect_stdout
PASSED_DUNDERS = ("__name__", "__qualname__", "__doc__", "__module__", "__dict__")
BUILTIN_NAMES = frozenset(dir(builtins))
# The methods of str and bytes (``startswith``, ``isdigit``, ``split``): asked of a program object whose class the
# task never names, the test expected a string there. (Container methods such as ``add`` or ``get`` are what the
# task's own classes offer too, so those stay the program's.)
BUILTIN_METHODS = frozenset(name for kind in (str, bytes) for name in dir(kind) if not name.startswith("_"))


class ProgramEnded(BaseException):
    """The program's process closed the connection (it exited, crashed or was killed); a BaseException so
    that a test's ``except Exception`` cannot swallow it."""


class FromProgram:
    """Mixed into the exceptions re-raised here for the program, so the verdict can tell them from the test's own."""


_PROGRAM_EXCEPTIONS: dict[tuple[str, str], type] = {}
# Raised by the program, these would end the test's own iteration or the judge itself (PEP 479's reasoning):
# they arrive as RuntimeError.
_NOT_PASSED_THROUGH = ("StopIteration", "StopAsyncIteration", "GeneratorExit", "SystemExit", "KeyboardInterrupt")


def program_exception_class(type_name: str, base_name: str = "") -> type:
    """The class standing for one of the program's exception classes: named like it, derived from its nearest
    builtin base (so ``except ValueError`` in a test catches its ``BadInput(ValueError)``), one class per name
    (so ``except BadInput`` with the program's class catches it too)."""
    key = (type_name[:100], base_name[:100])
    cls = _PROGRAM_EXCEPTIONS.get(key)
    if cls is None:
        base = getattr(builtins, base_name or type_name, None)
        if not (isinstance(base, type) and issubclass(base, Exception)) or base.__name__ in _NOT_PASSED_THROUGH:
            base = RuntimeError if (base_name or type_name) in _NOT_PASSED_THROUGH else Exception
        try:
            cls = type(key[0], (base, FromProgram), {})
        except TypeError:  # a builtin that cannot be subclassed
            cls = type(key[0], (Exception, FromProgram), {})
        if len(_PROGRAM_EXCEPTIONS) < 1024:
            _PROGRAM_EXCEPTIONS[key] = cls
    return cls


def program_exception(type_name: str, message: str, base_name: str = "", args: tuple | None = None) -> BaseException:
    """The exception the program raised (see :func:`program_exception_class`), with its arguments where they
    travelled (``e.args[0] == 'x'``), else its message; one its base cannot rebuild (an ``ExceptionGroup``)
    arrives as a plain exception of its name, never as a ``TypeError`` a test might catch."""
    cls = program_exception_class(type_name, base_name)
    for attempt in (
        lambda: cls(*args) if args is not None else cls(message),
        lambda: cls(message),
        lambda: program_exception_class(type_name, "Exception")(message),
    ):
        try:
            return attempt()
        except Exception:  # noqa: BLE001 - arguments its builtin base refuses
            continue
    return program_exception_class("Exception", "Exception")(message)


class Unreadable(BaseException):
    """The program's answer could not be read (malformed, or over a limit). A BaseException, like
    :class:`ProgramEnded`: a test's own ``except ValueError`` must never take it for the program's error."""


class Unsendable(BaseException):
    """The test handed the program a value that cannot travel to another process (an open file, a compiled
    pattern, an object of a class the test defines): the test fails saying so, and no ``except TypeError``
    in it can take that for the program's error."""


class NoGroundTruth(BaseException):
    """A check uses a helper the task's own code does not define: asking the program for it would let the program
    define what is right, so the row gets no verdict."""


class Untrusted(BaseException):
    """The test asked a question only the program's own code could answer about a value of the test
    (membership by its ``__contains__``): not trusted, so the test fails saying so."""


_ANSWER_ERRORS = (wire.BadValue, ValueError, TypeError, IndexError, KeyError, AttributeError)


def _readable(read):
    """``read()``, with a malformed answer turned into :class:`Unreadable` (the program's own exceptions pass)."""
    try:
        return read()
    except _ANSWER_ERRORS as error:
        if isinstance(error, FromProgram):
            raise
        raise Unreadable(
            str(error) if isinstance(error, wire.BadValue) else f"malformed answer ({type(error).__name__})"
        ) from None


ALLOWED_MODULES = ("numpy",)  # besides the standard library: modules a program's names may come from
# Modules whose objects a program's name may stand for (``from collections import Counter``): value types
# and pure functions. Never builtins (pure ones travel as such), os, pickle, subprocess and the like, whose
# functions the test might call on the program's values.
VALUE_MODULES = (
    "math",
    "cmath",
    "statistics",
    "itertools",
    "functools",
    "operator",
    "heapq",
    "bisect",
    "collections",
    "fractions",
    "decimal",
    "string",
    "re",
    "datetime",
    "array",
    "copy",
    "enum",
    "numbers",
    "numpy",
)


class Judging:
    """The judge's end of one test's connection, and the counts that qualify its verdict."""

    def __init__(self, reading: int, writing: int, task_classes: dict):
        self.peer = wire.Peer(reading, writing, self.serve)
        self.task_classes = task_classes
        self.callbacks: list = []
        self.remotes: dict[int, Remote] = {}  # one per program object, so `is` and hashing hold
        self.iterators: dict[int, RemoteIterator] = {}  # one per program iterator: its prefetched items stay
        self.namespace: dict = {}  # the test's globals, once made
        self.program_globals: set[str] = set()  # the names in it that are the program's
        self.program_names: frozenset[str] = frozenset()  # the names the task's code defines
        self.failed_callbacks: list[AssertionError] = []
        self.ambiguous: set[str] = set()  # builtin names the program redefines, in a row without a reference
        self.random_state = None  # random's state as the program's process last had it from this side
        self.state_depth = 0  # nested field comparisons of program objects in progress (see same_state)
        self.compared = 0
        self.untrusted = 0
        self.sizes = dict.fromkeys(wire.SIZE_KEYS, 0)

    # values both ways
    def encode(self, value):
        return wire.Encoder(self.task_classes, self._unknown).encode(value)

    def _unknown(self, value):
        if isinstance(value, Remote):
            return ["h", _handle(value)]
        if isinstance(value, FromProgram) and isinstance(value, type):
            raise wire.BadValue("an exception class of the program is not sent back")
        if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):
            return self._value_of_iterator(value)
        if (
            isinstance(value, type)
            and value.__name__ in wire.BUILTIN_EXCEPTIONS
            and getattr(builtins, value.__name__) is value
        ):
            return ["bi", value.__name__]
        if _test_function(value):
            self.callbacks.append(value)
            return ["cb", len(self.callbacks) - 1]
        raise wire.BadValue(
            f"a {type(value).__name__} of the test cannot be sent to the program (only its own "
            f"functions and values travel)"
        )

    def _value_of_iterator(self, iterator):
        """An iterator of the test (a generator expression as an argument) travels as the items it yields."""
        items = []
        for item in iterator:
            items.append(item)
            if len(items) > wire.LIMITS["elements"]:
                raise wire.BadValue(f"an iterator of more than {wire.LIMITS['elements']} items cannot be sent")
        return ["it", [wire.Encoder(self.task_classes, self._unknown)._value(item, 1) for item in items]]

    def iterator(self, remote: "Remote") -> "RemoteIterator":
        handle = _handle(remote)
        if handle not in self.iterators:
            self.iterators[handle] = RemoteIterator(remote)
        return self.iterators[handle]

    def decode(self, encoded, names: bool = False):
        """A value the program sent. ``names``: an answer to the names request, the only one where a module
        or a module's object (``["mod", ...]``, ``["std", ...]``) may stand for what the program imported."""
        decoder = wire.Decoder(self.task_classes, self._remote if names else self._remote_value)
        value = decoder.decode(encoded)
        for key in wire.SIZE_KEYS:
            self.sizes[key] = max(self.sizes[key], getattr(decoder, key))
        return value

    def _remote_value(self, encoded):
        if encoded[0] in ("mod", "std"):
            raise wire.BadValue("a module travels only as what a program's name was imported as")
        return self._remote(encoded)

    def _remote(self, encoded):
        tag = encoded[0]
        if tag == "cb" and len(encoded) == 2 and type(encoded[1]) is int and 0 <= encoded[1] < len(self.callbacks):
            return self.callbacks[encoded[1]]  # the test's own callable, handed back (a lambda kept in a dict)
        if tag == "exc" and len(encoded) == 3 and type(encoded[1]) is str and type(encoded[2]) is str:
            return program_exception_class(encoded[1], encoded[2])
        if tag in ("mod", "std"):
            return _module_object(encoded)
        if (
            tag != "h"
            or len(encoded) != 4
            or type(encoded[1]) is not int
            or type(encoded[2]) is not str
            or not wire._is_list(encoded[3])
            or not set(map(str, encoded[3])) <= set(wire.CAPABILITIES)
        ):
            raise wire.BadValue("malformed handle")
        handle = encoded[1]
        if handle not in self.remotes:
            self.remotes[handle] = remote_class(frozenset(encoded[3]))(self, handle, encoded[2][:100])
        if encoded[2] == "coroutine" and "__await__" in encoded[3]:
            return _coroutine(self.remotes[handle])  # a real coroutine, for asyncio.run and create_task
        return self.remotes[handle]

    def ask(self, request):
        """The program's answer to ``request``, decoded; its exception re-raised here."""
        return self.answer(self._request(request))

    def _request(self, request):
        try:
            return self.peer.request(request)
        except wire.WireClosed:
            raise ProgramEnded() from None
        except wire.BadValue as error:
            raise Unreadable(str(error)) from None

    def answer(self, answer):
        def read():
            if not wire._is_list(answer) or not answer or type(answer[0]) is not str:
                raise wire.BadValue("malformed answer")
            if answer[0] == "ok" and len(answer) == 2:
                return False, self.decode(answer[1])
            if answer[0] == "raise" and len(answer) in (3, 5) and type(answer[1]) is str and type(answer[2]) is str:
                if answer[1] == wire.OVER_LIMIT:
                    raise wire.BadValue(answer[2][:MESSAGE_CHARS])
                base, args = (answer[3], answer[4]) if len(answer) == 5 else ("", None)
                arguments = self.decode(args) if args is not None else None
                return True, program_exception(
                    answer[1][:100],
                    answer[2][:MESSAGE_CHARS],
                    base if type(base) is str else "",
                    tuple(arguments) if type(arguments) is list else None,
                )
            raise wire.BadValue("malformed answer")

        raised, value = _readable(read)
        if raised:
            raise value
        return value

    def names(self, wanted: list[str]) -> dict:
        """The program's values of ``wanted`` (those it has), each decoded on its own."""
        answer = self._request(["names", wanted])

        def read():
            if not (wire._is_list(answer, 2) and answer[0] == "names" and wire._is_list(answer[1])):
                return self.answer(answer)  # the program failed while answering: its exception
            found = {}
            for name, encoded in answer[1]:
                if type(name) is str and name in wanted:
                    found[name] = self.decode(encoded, names=True)
            return found

        return _readable(read)

    def serve(self, request):
        """A call the program makes to one of the test's own callables (a ``key=lambda ...`` it was given)."""
        try:
            if not (
                wire._is_list(request, 4)
                and request[0] == "callback"
                and type(request[1]) is int
                and 0 <= request[1] < len(self.callbacks)
                and wire._is_list(request[2])
                and wire._is_list(request[3])
            ):
                raise wire.BadValue("malformed callback")
            args = [self.decode(item) for item in request[2]]
            kwargs = {}
            for pair in request[3]:
                if not wire._is_list(pair, 2) or type(pair[0]) is not str:
                    raise wire.BadValue("malformed keyword")
                kwargs[pair[0]] = self.decode(pair[1])
            return ["ok", self.encode(self.callbacks[request[1]](*args, **kwargs))]
        except Exception as error:  # noqa: BLE001 - the test's callable failed: the program sees the exception
            if isinstance(error, AssertionError) and not isinstance(error, FromProgram):
                self.failed_callbacks.append(error)  # an assertion of the test fails the test, caught or not
            return ["raise", type(error).__name__, _text(error)]

    def call(self, handle: int, args: tuple, kwargs: dict):
        """Calls a program callable. Arguments the program changed in place are changed here too, the
        program's globals the test holds are refreshed, and a result that is one of the arguments is that
        argument (``b = copy_list(a); assert b is not a`` holds as in Python)."""
        try:
            request = [
                "call",
                handle,
                [self.encode(arg) for arg in args],
                [[name, self.encode(value)] for name, value in kwargs.items()],
            ]
        except wire.BadValue as error:
            raise Unsendable(str(error)) from None
        answer = self._request([*request, self._process_state()])
        if not (wire._is_list(answer, 6) and answer[0] == "ok"):
            return self.answer(answer)

        def read():
            self._mirror_back(answer[5])
            for position, state in answer[2]:
                target = (
                    args[position]
                    if type(position) is int and 0 <= position < len(args)
                    else (kwargs.get(position) if type(position) is str else None)
                )
                if target is not None:
                    _update_in_place(target, self.decode(state))
            for name, state in answer[3]:
                if type(name) is str and name in self.program_globals:
                    self._update_global(name, self.decode(state))
            same = answer[4]
            if type(same) is int and 0 <= same < len(args):
                return args[same]
            if type(same) is str and same in kwargs:
                return kwargs[same]
            return self.decode(answer[1])

        return _readable(read)

    def same_state(self, one: "Remote", other: "Remote") -> bool:
        """Whether two program objects the program calls equal hold equal fields (compared here, field by field;
        a field that is itself a program object by the same rule): an ``__eq__`` that says True to anything
        does not make two different objects equal. Past :data:`STATE_DEPTH` nested comparisons, not equal."""
        if _handle(one) == _handle(other):
            return True
        if self.state_depth >= STATE_DEPTH:
            return False
        self.state_depth += 1
        try:
            return _readable(lambda: one._op("state") == other._op("state"))
        finally:
            self.state_depth -= 1

    def _process_state(self) -> dict:
        """What the test set in this process that a call must see in the program's (as one process would):
        the recursion limit, ``random``'s state once the test has used it, whether stdout is redirected."""
        state = {"recursion_limit": sys.getrecursionlimit(), "stdout": sys.stdout is not _STDOUT[0]}
        random = sys.modules.get("random")
        if random is not None:
            now = random.getstate()
            if now != self.random_state:
                state["random"] = self.encode(now)
                self.random_state = now
        return state

    def _mirror_back(self, after) -> None:
        """The call's effect on that state: what the program printed goes to the test's stdout (a
        ``redirect_stdout`` target), and ``random`` continues from where the program left it."""
        if type(after) is not dict:
            raise wire.BadValue("malformed call state")
        printed = after.get("stdout")
        if type(printed) is str:
            sys.stdout.write(printed)
        if "random" in after and "random" in sys.modules:
            state = self.decode(after["random"])
            sys.modules["random"].setstate(state)
            self.random_state = state

    def _update_global(self, name: str, value) -> None:
        current = self.namespace.get(name)
        if type(current) is type(value) and isinstance(value, (list, dict, set, bytearray)):
            _update_in_place(current, value)  # the test may hold it under another name too
        else:
            self.namespace[name] = value


TEST_FILES = ("<test>", "<preamble>", "<task>")


def _test_function(value) -> bool:
    """A function (or lambda, or bound method of a task object) the test, the preamble or the task's code
    defines: the only callables the program may call back. Never a judge object a program value led to."""
    function = getattr(value, "__func__", value)
    code = getattr(function, "__code__", None) if type(function).__name__ == "function" else None
    return code is not None and code.co_filename in TEST_FILES


def _module_object(encoded):
    """A module, or an object of one, that the program's name was bound to by an import: the judge's own copy
    (a program that patched ``np.allclose`` in its process changes nothing here)."""
    if not all(type(part) is str for part in encoded[1:]) or len(encoded) != (2 if encoded[0] == "mod" else 3):
        raise wire.BadValue("malformed module reference")
    module_name = encoded[1]
    refused = wire.BadValue(f"{'.'.join(encoded[1:])[:80]} is not something the judge takes from a program's names")
    if encoded[0] == "mod":
        if module_name.split(".")[0] not in (*sys.stdlib_module_names, *ALLOWED_MODULES) or not all(
            part.isidentifier() for part in module_name.split(".")
        ):
            raise refused
    elif module_name not in VALUE_MODULES or not encoded[2].isidentifier() or encoded[2].startswith("_"):
        raise refused  # one attribute of a value module: no path through it to another module (os, builtins)
    try:
        __import__(module_name)
        value = sys.modules[module_name]
        if encoded[0] == "std":
            value = getattr(value, encoded[2])
    except (ImportError, AttributeError):
        raise wire.BadValue(f"{'.'.join(encoded[1:])[:80]} is not importable here") from None
    defined_in = str(getattr(value, "__module__", ""))
    if encoded[0] == "std" and (
        isinstance(value, type(sys))
        or not (defined_in in (module_name, f"_{module_name}") or defined_in.startswith(f"{module_name}."))
    ):
        raise refused  # what the module merely re-exports (a module, a builtin such as exec) is not its own
    return value


def _update_in_place(target, state) -> None:
    """Gives a mutable argument the state the program left it in (the judge holds its own copy)."""
    kind = type(target)
    if type(state) is not kind:
        return
    if kind in (list, bytearray):
        target[:] = state
    elif isinstance(target, dict) or isinstance(target, set):
        target.clear()
        target.update(state)
    elif hasattr(target, "extend") and hasattr(target, "clear"):  # deque
        target.clear()
        target.extend(state)
    else:
        attributes = object.__getattribute__(target, "__dict__")
        attributes.clear()
        attributes.update(object.__getattribute__(state, "__dict__"))


def _text(error: BaseException) -> str:
    try:
        return str(error)[:MESSAGE_CHARS]
    except Exception:  # noqa: BLE001
        return "<unprintable>"


def _judging(remote) -> Judging:
    return object.__getattribute__(remote, "_diffugrpo_judging")


def _handle(remote) -> int:
    return object.__getattribute__(remote, "_diffugrpo_handle")


def _typed(value, kind: type, what: str):
    if type(value) is not kind and not (kind is int and type(value) is bool):
        raise TypeError(f"{what} of the program's object returned {type(value).__name__}, not {kind.__name__}")
    return value


class Remote:
    """One of the program's objects, used through requests; never equal to a value of this side. The special
    methods its object's type lacks are absent here too (see :func:`remote_class`)."""

    __slots__ = ("_diffugrpo_judging", "_diffugrpo_handle", "_diffugrpo_type")
    __hash__ = None  # unhashable unless its object's type is hashable (remote_class adds __hash__)

    def __init__(self, judging: Judging, handle: int, type_name: str):
        object.__setattr__(self, "_diffugrpo_judging", judging)
        object.__setattr__(self, "_diffugrpo_handle", handle)
        object.__setattr__(self, "_diffugrpo_type", type_name)

    def _op(self, name: str, *operands):
        judging = _judging(self)
        try:
            encoded = [judging.encode(operand) for operand in operands]
        except wire.BadValue as error:
            raise Unsendable(str(error)) from None
        return judging.ask(["op", name, _handle(self), encoded])

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name not in PASSED_DUNDERS:
            # numpy's __array_interface__ and its kind would have this process read what the program points at
            raise AttributeError(f"{name} of a program object is not asked for")
        judging = _judging(self)
        kind = object.__getattribute__(self, "_diffugrpo_type")
        if name in BUILTIN_METHODS and kind not in judging.program_globals and kind not in judging.program_names:
            judging.untrusted += 1
            raise Untrusted(
                f"the test called .{name} on a program object of class {kind}, a class the task never names: a "
                f"method of a builtin type answered by the program's own code is not trusted (return the builtin value)"
            )
        return self._op("getattr", name)

    def __setattr__(self, name: str, value) -> None:
        self._op("setattr", name, value)

    def __delattr__(self, name: str) -> None:
        self._op("delattr", name)

    def __repr__(self) -> str:
        return _typed(self._op("repr"), str, "__repr__")

    def __str__(self) -> str:
        return _typed(self._op("str"), str, "__str__")

    def __format__(self, spec: str) -> str:
        return _typed(self._op("format", spec), str, "__format__")

    def __bool__(self) -> bool:
        return _typed(self._op("bool"), bool, "__bool__")

    def __instancecheck__(self, instance) -> bool:
        return isinstance(instance, Remote) and _typed(instance._op("isinstance", self), bool, "isinstance")

    def __subclasscheck__(self, subclass) -> bool:
        return isinstance(subclass, Remote) and _typed(subclass._op("issubclass", self), bool, "issubclass")

    def _compare(self, name: str, other):
        judging = _judging(self)
        if not isinstance(other, Remote):
            if name in ("eq", "ne"):  # Python's default for objects of unrelated types: identity
                judging.untrusted += 1
                return (name == "ne") != (other is self)
            raise TypeError(f"'{name}' is not supported between a program object and a {type(other).__name__}")
        judging.compared += 1
        answer = self._op(name, other)
        if name in ("eq", "ne") and answer is (name == "eq") and not judging.same_state(self, other):
            judging.untrusted += 1  # equal by its own __eq__ alone, with different fields: not trusted
            return name == "ne"
        return answer

    def __eq__(self, other):
        return self._compare("eq", other)

    def __ne__(self, other):
        return self._compare("ne", other)

    def __lt__(self, other):
        return self._compare("lt", other)

    def __le__(self, other):
        return self._compare("le", other)

    def __gt__(self, other):
        return self._compare("gt", other)

    def __ge__(self, other):
        return self._compare("ge", other)

    def __int__(self):
        return _typed(self._op("int"), int, "__int__")

    def __float__(self):
        return _typed(self._op("float"), float, "__float__")

    def __index__(self):
        return _typed(self._op("index"), int, "__index__")

    def __neg__(self):
        return self._op("neg")

    def __pos__(self):
        return self._op("pos")

    def __abs__(self):
        return self._op("abs")

    def __invert__(self):
        return self._op("invert")

    def __round__(self, digits=None):
        return self._op("round", digits)


def _binary(name: str):
    """An operator between two of the program's objects is the program's (counted like ==); with a value of the
    test it is refused, as a builtin refuses an unknown type: the test's value never reaches the program's
    operator, so ``abs(f(x) - 3.14) < 1e-6`` cannot be answered by an object that subtracts to zero."""

    def forward(self, other):
        judging = _judging(self)
        if not isinstance(other, Remote):
            judging.untrusted += 1
            raise TypeError(f"unsupported operand for {name}: a program object and a {type(other).__name__}")
        judging.compared += 1
        return self._op(name, other)

    forward.__name__ = f"__{name}__"
    return forward


for _name in (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
    "matmul",
    "radd",
    "rsub",
    "rmul",
    "rtruediv",
    "rfloordiv",
    "rmod",
    "rpow",
    "rand",
    "ror",
    "rxor",
):
    setattr(Remote, f"__{_name}__", _binary(_name))


def _iterate(self):
    iterator = self._op("iter")
    if not isinstance(iterator, Remote):
        return iter(iterator)
    return _judging(self).iterator(iterator)


def _contains(self, item) -> bool:
    judging = _judging(self)
    if not isinstance(item, Remote):
        judging.untrusted += 1
        raise Untrusted(
            "membership of a test's value in a program object is decided by its own __contains__: "
            "not trusted (return a list, set or dict)"
        )
    judging.compared += 1
    return _typed(self._op("contains", item), bool, "__contains__")


def _exit(self, *exc_info):
    """The program's ``__exit__``, told nothing of an exception in the test's ``with`` body, and never allowed to
    suppress one: an ``AssertionError`` of the test always goes on."""
    self._op("exit")
    return False


def _reversed(self):
    answer = self._op("reversed")
    return iter(list(RemoteIterator(answer))) if isinstance(answer, Remote) else iter(answer)


def _await(self):
    """``await`` on a program's awaitable: the program runs it to its end in its own event loop."""
    return self._op("await")
    yield  # a generator, as __await__ must return an iterator


async def _coroutine(awaitable):
    return await awaitable


_CAPABILITY_METHODS = {
    "__iter__": _iterate,
    "__next__": lambda self: next(_judging(self).iterator(self)),
    "__len__": lambda self: _typed(self._op("len"), int, "__len__"),
    "__getitem__": lambda self, key: self._op("getitem", key),
    "__setitem__": lambda self, key, value: self._op("setitem", key, value),
    "__delitem__": lambda self, key: self._op("delitem", key),
    "__contains__": _contains,
    "__call__": lambda self, *args, **kwargs: _judging(self).call(_handle(self), args, kwargs),
    "__reversed__": _reversed,
    "__enter__": lambda self: self._op("enter"),
    "__exit__": _exit,
    "__hash__": lambda self: _typed(self._op("hash"), int, "__hash__"),
    "__await__": _await,
}
_REMOTE_CLASSES: dict[frozenset, type] = {}


def remote_class(capabilities: frozenset) -> type:
    """The handle class offering exactly ``capabilities`` (see ``sandbox_wire.CAPABILITIES``), made once per set."""
    if capabilities not in _REMOTE_CLASSES:
        methods = {name: _CAPABILITY_METHODS[name] for name in capabilities}
        _REMOTE_CLASSES[capabilities] = type("Remote", (Remote,), {"__slots__": (), **methods})
    return _REMOTE_CLASSES[capabilities]


class RemoteIterator:
    """Iteration over a program's iterator, fetched in growing batches (one request per batch, not per item)."""

    def __init__(self, remote: Remote, batch: int = 1):
        self.remote = remote
        self.buffer: list = []
        self.position = 0
        self.batch = batch
        self.end: BaseException | None = None

    def __iter__(self):
        return self

    def __next__(self):
        if self.position == len(self.buffer):
            if self.end is not None:
                raise self.end
            self._fetch()
        if self.position == len(self.buffer):
            raise self.end
        item = self.buffer[self.position]
        self.position += 1
        return item

    def _fetch(self) -> None:
        answer = self.remote._op("next", self.batch)

        def read():
            items, tail = answer
            return list(items), tail

        self.batch = min(wire.BATCH_LIMIT, self.batch * 2)
        (self.buffer, tail), self.position = _readable(read), 0
        if tail == "stop":
            self.end = StopIteration()
        elif tail is not None:
            self.end = _readable(
                lambda: program_exception(str(tail[0])[:100], str(tail[1])[:MESSAGE_CHARS], str(tail[2])[:100])
            )


# --------------------------------------------------------------------------- one row's tests


def _stdlib_module(name: str):
    if name not in sys.stdlib_module_names or name.startswith("_"):
        return None
    try:
        __import__(name)
    except Exception:  # noqa: BLE001 - not importable here: the name stays unbound
        return None
    return sys.modules.get(name)


def _imported(module: str, attribute: str):
    """What ``import module`` / ``from module import attribute`` in the task's code binds, this process's own
    (the standard library or numpy); None where it cannot be imported here."""
    if module.split(".")[0] not in (*sys.stdlib_module_names, *ALLOWED_MODULES):
        return None
    try:
        value = __import__(module, fromlist=["_"])
        if not attribute:
            return value
        if not hasattr(value, attribute):
            __import__(f"{module}.{attribute}")
        return getattr(value, attribute)
    except Exception:  # noqa: BLE001 - not importable here: the name is resolved as any other
        return None


class Row:
    """What every test of a row shares: the preamble run here, the task's helpers, its classes."""

    def __init__(self, spec: dict):
        # A real module in sys.modules, as the program's side has: a preamble's dataclass looks its module up,
        # and a class rebuilt from its reduced state is found by its module's name.
        module = sys.modules["__test__"] = type(sys)("__test__")
        self.base = module.__dict__
        self.base["__builtins__"] = builtins
        self.program_names = frozenset(spec.get("program_names") or ())
        self.imports = {entry[0]: entry[1:] for entry in spec.get("imports") or () if len(entry) == 3}
        self.has_reference = bool(spec.get("has_reference", True))
        self.entry = spec.get("entry") or ""
        exec(compile(spec.get("preamble") or "", "<preamble>", "exec"), self.base)  # noqa: S102 - the task's code
        self.task_classes = {
            name: value
            for name, value in self.base.items()
            if isinstance(value, type) and value.__module__ == "__test__"
        }
        self.shared_classes = spec.get("shared_classes") or ()
        helpers = spec.get("helpers") or ""
        if helpers:
            self._helpers(helpers)

    def _helpers(self, helpers: str) -> None:
        """A check's reference code run here for the helpers the check uses (HumanEval/38's ``encode_cyclic``);
        the entry point itself is always the program's."""
        namespace = dict(self.base)
        try:
            exec(compile(helpers, "<task>", "exec"), namespace)  # noqa: S102 - the task's own code
        except Exception:  # noqa: BLE001 - a reference that fails to load offers no helpers
            pass
        shared = set(self.shared_classes)
        for name, value in namespace.items():
            if name not in self.base and name not in self.program_names:
                self.base[name] = value
                if name in shared and isinstance(value, type) and value.__module__ == "__test__":
                    self.task_classes[name] = value  # the program's class of that name arrives as this one

    def namespace(
        self,
        judging: Judging,
        free_names: list[str],
        called_only: list[str],
        programs_builtins: bool = False,
        check: bool = False,
    ) -> dict:
        """The test's globals: the row's own names, then each name the test reads without binding it
        (``free_names``, found by the harness) as the rule in the module docstring says. A name the test only
        ever calls cannot mean a module: it is the program's (a task's own ``tokenize`` or ``copy``). In a row
        without a reference, a builtin name the program redefines is ambiguous (a task's own ``max``, or a
        forged ``abs``): it is noted in ``judging.ambiguous``, and bound to the program's object only with
        ``programs_builtins`` (the test must pass both ways). A ``check`` module's helpers are the task's: one that
        neither the check, the preamble, the reference nor Python defines is :class:`NoGroundTruth`."""
        namespace = dict(self.base)
        judging.program_names = self.program_names
        wanted, builtin_named = [], []
        for name in free_names:
            if name in self.imports and name not in namespace:
                imported = _imported(*self.imports[name])
                if imported is not None:
                    namespace[name] = imported
                    continue
            if name in self.program_names or (
                name in called_only and name not in namespace and name not in BUILTIN_NAMES
            ):
                namespace.pop(name, None)
                wanted.append(name)
            elif name in BUILTIN_NAMES and name not in namespace and not self.has_reference:
                builtin_named.append(name)
            elif name in namespace or name in BUILTIN_NAMES:
                continue
            else:
                module = _stdlib_module(name)
                if module is not None:
                    namespace[name] = module
                else:
                    wanted.append(name)
        unfounded = [name for name in wanted if name not in self.program_names]
        if check and unfounded:
            raise NoGroundTruth(
                f"the check uses {', '.join(unfounded)}, which the task's own code does not define: "
                f"no ground truth (the program is never asked for a check's helpers)"
            )
        if wanted or builtin_named:
            found = judging.names(wanted + builtin_named)
            for name in wanted:
                if name in found:
                    namespace[name] = found[name]
                    judging.program_globals.add(name)
            for name in builtin_named:
                if name in found and found[name] is not getattr(builtins, name):
                    judging.ambiguous.add(name)
                    if programs_builtins:
                        namespace[name] = found[name]
        judging.namespace = namespace
        return namespace


def judge_test(row: Row, test: dict, reading: int, writing: int) -> dict:
    """Runs one test against the program at the other end of the two pipes; its verdict as a dict of
    :data:`sandbox_wire.VERDICT_KEYS`."""
    judging = Judging(reading, writing, row.task_classes)
    try:
        message = wire.receive_frame(reading)
        if message != ["ready"]:
            return _verdict("failed", "the program's process did not start the test", judging)
        outcome, detail = _run(row, test, judging)
    except wire.WireClosed:
        outcome, detail = "ended", "the program's process ended"
    except wire.BadValue as error:
        outcome, detail = "failed", f"the program's answer could not be read: {error}"
    try:
        wire.send_frame(writing, ["bye"])
    except (OSError, wire.WireClosed):
        pass
    return _verdict(outcome, detail, judging)


def _run(row: Row, test: dict, judging: Judging) -> tuple[str, str]:
    """The test's verdict; where a builtin name is ambiguous (see :meth:`Row.namespace`), it must pass with
    Python's builtin and again with the program's own object."""
    outcome, detail = _attempt(row, test, judging, programs_builtins=False)
    if outcome != "passed" or not judging.ambiguous:
        return outcome, detail
    outcome, detail = _attempt(row, test, judging, programs_builtins=True)
    if outcome == "passed":
        return outcome, detail
    names = ", ".join(sorted(judging.ambiguous))
    return outcome, (
        f"{detail} (with the program's own {names}; without a reference solution a test that uses a "
        f"builtin the program redefines must pass both with the builtin and with the program's)"
    )


def _attempt(row: Row, test: dict, judging: Judging, programs_builtins: bool) -> tuple[str, str]:
    code = test["code"]
    try:
        namespace = row.namespace(
            judging, test["names"], test["called"], programs_builtins, check=test["kind"] == "check"
        )
        exec(compile(code, "<test>", "exec"), namespace)  # noqa: S102 - the test's own code, run here
        if test["kind"] == "check":
            namespace["check"](judging.ask(["entry", row.entry]))
        if judging.failed_callbacks:
            raise judging.failed_callbacks[0]
    except NoGroundTruth as error:
        return "judge_error", str(error)
    except ProgramEnded:
        return "ended", "the program's process ended during the test"
    except Unreadable as error:
        return "failed", f"the program's answer could not be read: {error}"
    except Untrusted as error:
        return "failed", str(error)
    except Unsendable as error:
        return "failed", f"the test handed the program a value that cannot be sent to it: {error}"
    except AssertionError as error:
        if isinstance(error, FromProgram):
            return "failed", f"the program raised AssertionError: {_text(error)}"
        return "failed", f"assertion failed: {_failed_line(error, code)}{_untrusted_note(judging)}"
    except MemoryError as error:
        if isinstance(error, FromProgram):
            return "memory", "memory limit exceeded"
        return "failed", "the judge ran out of memory on the program's values"
    except RecursionError as error:
        return ("error" if isinstance(error, FromProgram) else "failed"), f"RecursionError: {_text(error)}"
    except Exception as error:  # noqa: BLE001 - the test raised: the program's error, or the test's on its values
        return "error", f"{type(error).__name__}: {_text(error)}"
    return "passed", ""


def _failed_line(error: AssertionError, code: str) -> str:
    """The test's own line that failed (and the assert's message, if it has one)."""
    lines = code.splitlines()
    traceback, number = error.__traceback__, None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == "<test>":
            number = traceback.tb_lineno
        traceback = traceback.tb_next
    line = lines[number - 1].strip() if number is not None and 0 < number <= len(lines) else ""
    message = _text(error)
    return f"{line[:200]}" + (f" ({message})" if message else "")


def _untrusted_note(judging: Judging) -> str:
    if not judging.untrusted:
        return ""
    return (
        " (a program object's own __eq__ is not trusted where it was compared with a builtin value, or called "
        "equal an object with other fields; return the builtin value itself)"
    )


def _verdict(outcome: str, detail: str, judging: Judging) -> dict:
    return {
        "outcome": outcome,
        "detail": detail[:MESSAGE_CHARS],
        "compared": judging.compared,
        "untrusted": judging.untrusted,
        "sizes": judging.sizes,
    }


def main(payload_fd: int, channels: list[tuple[int, int]], verdict_fd: int) -> None:
    """The judge process: reads the row's tests, judges each in turn, writes one verdict line per test."""
    chunks = []
    while chunk := os.read(payload_fd, 1 << 20):
        chunks.append(chunk)
    os.close(payload_fd)
    spec = wire.json_loads(b"".join(chunks).decode("utf-8"))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * wire.LIMITS["depth"] + 1000))
    sys.set_int_max_str_digits(0)
    _STDOUT[0] = sys.stdout
    try:
        row = Row(spec)
    except BaseException as error:  # noqa: BLE001 - the task's preamble fails: every test says so
        row, broken = None, f"the task's preamble failed: {type(error).__name__}: {_text(error)}"
    for index, test in enumerate(spec["tests"]):
        if row is None:
            verdict = {
                "outcome": "judge_error",
                "detail": broken,
                "compared": 0,
                "untrusted": 0,
                "sizes": dict.fromkeys(wire.SIZE_KEYS, 0),
            }
        else:
            verdict = judge_test(row, test, *channels[index])
        for fd in channels[index]:
            os.close(fd)
        line = wire.json_dumps({"index": index, **verdict}).encode("ascii") + b"\n"
        os.write(verdict_fd, line)
