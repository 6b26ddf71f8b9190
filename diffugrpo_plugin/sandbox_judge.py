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
VERDICT_KEYS = ("outcome", "detail", "compared", "untrusted", "sizes")
SIZE_KEYS = ("elements", "depth", "int_hex_digits")  # the largest value of a test, against sandbox_wire.LIMITS
BATCH_LIMIT = 1024  # items one iteration request may bring back
PASSED_DUNDERS = ("__name__", "__qualname__", "__doc__", "__module__", "__dict__")
BUILTIN_NAMES = frozenset(dir(builtins))


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
    travelled (``e.args[0] == 'x'``), else its message."""
    cls = program_exception_class(type_name, base_name)
    try:
        return cls(*args) if args is not None else cls(message)
    except Exception:  # noqa: BLE001 - arguments its builtin base refuses
        return cls(message)


class Judging:
    """The judge's end of one test's connection, and the counts that qualify its verdict."""

    def __init__(self, reading: int, writing: int, task_classes: dict):
        self.peer = wire.Peer(reading, writing, self.serve)
        self.task_classes = task_classes
        self.callbacks: list = []
        self.iterators: dict[int, RemoteIterator] = {}  # one per program iterator: its prefetched items stay
        self.namespace: dict = {}  # the test's globals, once made
        self.program_globals: set[str] = set()  # the names in it that are the program's
        self.compared = 0
        self.untrusted = 0
        self.sizes = dict.fromkeys(SIZE_KEYS, 0)

    # values both ways
    def encode(self, value):
        return wire.Encoder(self.task_classes, self._unknown).encode(value)

    def _unknown(self, value):
        if isinstance(value, Remote):
            return ["h", object.__getattribute__(value, "_id")]
        if isinstance(value, FromProgram) and isinstance(value, type):
            raise wire.BadValue("an exception class of the program is not sent back")
        if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):
            return self._value_of_iterator(value)
        if callable(value):
            self.callbacks.append(value)
            return ["cb", len(self.callbacks) - 1]
        raise wire.BadValue(f"a {type(value).__name__} cannot be sent to the program")

    def _value_of_iterator(self, iterator):
        """An iterator of the test (a generator expression as an argument) travels as the items it yields."""
        items = []
        for item in iterator:
            items.append(item)
            if len(items) > wire.LIMITS["elements"]:
                raise wire.BadValue(f"an iterator of more than {wire.LIMITS['elements']} items cannot be sent")
        return ["it", [wire.Encoder(self.task_classes, self._unknown)._value(item, 1) for item in items]]

    def iterator(self, remote: "Remote") -> "RemoteIterator":
        handle = object.__getattribute__(remote, "_id")
        if handle not in self.iterators:
            self.iterators[handle] = RemoteIterator(remote)
        return self.iterators[handle]

    def decode(self, encoded):
        decoder = wire.Decoder(self.task_classes, self._remote)
        value = decoder.decode(encoded)
        for key in SIZE_KEYS:
            self.sizes[key] = max(self.sizes[key], getattr(decoder, key))
        return value

    def _remote(self, encoded):
        if encoded[0] == "exc" and len(encoded) == 3 and type(encoded[1]) is str and type(encoded[2]) is str:
            return program_exception_class(encoded[1], encoded[2])
        if encoded[0] != "h" or len(encoded) != 4 or type(encoded[1]) is not int or type(encoded[2]) is not str:
            raise wire.BadValue("malformed handle")
        return (RemoteCallable if encoded[3] is True else Remote)(self, encoded[1], encoded[2][:100])

    def ask(self, request):
        """The program's answer to ``request``, decoded; its exception re-raised here."""
        try:
            answer = self.peer.request(request)
        except wire.WireClosed:
            raise ProgramEnded() from None
        return self.answer(answer)

    def answer(self, answer):
        if not wire._is_list(answer) or not answer or type(answer[0]) is not str:
            raise wire.BadValue("malformed answer")
        if answer[0] == "raise" and len(answer) in (3, 5) and type(answer[1]) is str and type(answer[2]) is str:
            if answer[1] == wire.OVER_LIMIT:
                raise wire.BadValue(answer[2][:MESSAGE_CHARS])
            base, args = (answer[3], answer[4]) if len(answer) == 5 else ("", None)
            arguments = self.decode(args) if args is not None else None
            raise program_exception(answer[1][:100], answer[2][:MESSAGE_CHARS], base if type(base) is str else "",
                                    tuple(arguments) if type(arguments) is list else None)
        if answer[0] == "ok" and len(answer) == 2:
            return self.decode(answer[1])
        raise wire.BadValue("malformed answer")

    def serve(self, request):
        """A call the program makes to one of the test's own callables (a ``key=lambda ...`` it was given)."""
        try:
            if not (wire._is_list(request, 4) and request[0] == "callback" and type(request[1]) is int
                    and 0 <= request[1] < len(self.callbacks) and wire._is_list(request[2])
                    and wire._is_list(request[3])):
                raise wire.BadValue("malformed callback")
            args = [self.decode(item) for item in request[2]]
            kwargs = {}
            for pair in request[3]:
                if not wire._is_list(pair, 2) or type(pair[0]) is not str:
                    raise wire.BadValue("malformed keyword")
                kwargs[pair[0]] = self.decode(pair[1])
            return ["ok", self.encode(self.callbacks[request[1]](*args, **kwargs))]
        except Exception as error:  # noqa: BLE001 - the test's callable failed: the program sees the exception
            return ["raise", type(error).__name__, _text(error)]

    def call(self, handle: int, args: tuple, kwargs: dict):
        """Calls a program callable; arguments the program changed in place are changed here too."""
        encoded_args = [self.encode(arg) for arg in args]
        encoded_kwargs = [[name, self.encode(value)] for name, value in kwargs.items()]
        try:
            answer = self.peer.request(["call", handle, encoded_args, encoded_kwargs])
        except wire.WireClosed:
            raise ProgramEnded() from None
        if wire._is_list(answer, 4) and answer[0] == "ok" and wire._is_list(answer[2]) and wire._is_list(answer[3]):
            for position, state in answer[2]:
                target = args[position] if type(position) is int and 0 <= position < len(args) else (
                    kwargs.get(position) if type(position) is str else None)
                if target is not None:
                    _update_in_place(target, self.decode(state))
            for name, state in answer[3]:
                if type(name) is str and name in self.program_globals:
                    self._update_global(name, self.decode(state))
            answer = answer[:2]
        return self.answer(answer)

    def _update_global(self, name: str, value) -> None:
        current = self.namespace.get(name)
        if type(current) is type(value) and isinstance(value, (list, dict, set, bytearray)):
            _update_in_place(current, value)  # the test may hold it under another name too
        else:
            self.namespace[name] = value


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


class Remote:
    """One of the program's objects, used through requests; never equal to a value of this side."""

    __slots__ = ("_judging", "_id", "_type")

    def __init__(self, judging: Judging, handle: int, type_name: str):
        object.__setattr__(self, "_judging", judging)
        object.__setattr__(self, "_id", handle)
        object.__setattr__(self, "_type", type_name)

    def _op(self, name: str, *operands):
        judging = object.__getattribute__(self, "_judging")
        return judging.ask(["op", name, object.__getattribute__(self, "_id"),
                            [judging.encode(operand) for operand in operands]])

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name not in PASSED_DUNDERS:
            # numpy's __array_interface__ and its kind would have this process read what the program points at
            raise AttributeError(f"{name} of a program object is not asked for")
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

    def __len__(self) -> int:
        return _typed(self._op("len"), int, "__len__")

    def __bool__(self) -> bool:
        return _typed(self._op("bool"), bool, "__bool__")

    def __iter__(self):
        iterator = self._op("iter")
        if not isinstance(iterator, Remote):
            return iter(iterator)
        return object.__getattribute__(self, "_judging").iterator(iterator)

    def __next__(self):
        return next(object.__getattribute__(self, "_judging").iterator(self))

    def __getitem__(self, key):
        return self._op("getitem", key)

    def __setitem__(self, key, value) -> None:
        self._op("setitem", key, value)

    def __delitem__(self, key) -> None:
        self._op("delitem", key)

    def __contains__(self, item) -> bool:
        if isinstance(item, Remote):
            object.__getattribute__(self, "_judging").compared += 1
            return _typed(self._op("contains", item), bool, "__contains__")
        # A value of the test is never handed to the program to judge: its items are compared here.
        return any(element is item or element == item for element in self)

    def __hash__(self) -> int:
        return hash(("program object", object.__getattribute__(self, "_id")))

    def __instancecheck__(self, instance) -> bool:
        return isinstance(instance, Remote) and _typed(instance._op("isinstance", self), bool, "isinstance")

    def __subclasscheck__(self, subclass) -> bool:
        return isinstance(subclass, Remote) and _typed(subclass._op("issubclass", self), bool, "issubclass")

    def _compare(self, name: str, other):
        judging = object.__getattribute__(self, "_judging")
        if not isinstance(other, Remote):
            if name in ("eq", "ne"):
                judging.untrusted += 1
            return NotImplemented  # Python's default: identity for ==, TypeError for ordering
        judging.compared += 1
        return self._op(name, other)

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

    def __round__(self, digits=None):
        return self._op("round", digits)


def _binary(name: str):
    """An operator between two of the program's objects is the program's (counted like ==); with a value of the
    test it is refused, as a builtin refuses an unknown type: the test's value never reaches the program's
    operator, so ``abs(f(x) - 3.14) < 1e-6`` cannot be answered by an object that subtracts to zero."""
    def forward(self, other):
        judging = object.__getattribute__(self, "_judging")
        if not isinstance(other, Remote):
            judging.untrusted += 1
            return NotImplemented
        judging.compared += 1
        return self._op(name, other)
    forward.__name__ = f"__{name}__"
    return forward


for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift",
              "matmul", "radd", "rsub", "rmul", "rtruediv", "rfloordiv", "rmod", "rpow", "rand", "ror", "rxor"):
    setattr(Remote, f"__{_name}__", _binary(_name))


class RemoteCallable(Remote):
    """A program object that can be called (a function, a class, a bound method)."""

    __slots__ = ()

    def __call__(self, *args, **kwargs):
        return object.__getattribute__(self, "_judging").call(object.__getattribute__(self, "_id"), args, kwargs)


def _typed(value, kind: type, what: str):
    if type(value) is not kind and not (kind is int and type(value) is bool):
        raise TypeError(f"{what} of the program's object returned {type(value).__name__}, not {kind.__name__}")
    return value


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
        items, tail = self.remote._op("next", self.batch)
        self.batch = min(BATCH_LIMIT, self.batch * 2)
        self.buffer, self.position = list(items), 0
        if tail == "stop":
            self.end = StopIteration()
        elif tail is not None:
            self.end = program_exception(str(tail[0])[:100], str(tail[1])[:MESSAGE_CHARS], str(tail[2])[:100])


# --------------------------------------------------------------------------- one row's tests


def _stdlib_module(name: str):
    if name not in sys.stdlib_module_names or name.startswith("_"):
        return None
    try:
        __import__(name)
    except Exception:  # noqa: BLE001 - not importable here: the name stays unbound
        return None
    return sys.modules.get(name)


class Row:
    """What every test of a row shares: the preamble run here, the task's helpers, its classes."""

    def __init__(self, spec: dict):
        self.base = {"__name__": "__test__", "__builtins__": builtins}
        self.program_names = frozenset(spec.get("program_names") or ())
        self.entry = spec.get("entry") or ""
        exec(compile(spec.get("preamble") or "", "<preamble>", "exec"), self.base)  # noqa: S102 - the task's code
        self.task_classes = {name: value for name, value in self.base.items()
                             if isinstance(value, type) and value.__module__ == "__test__"}
        helpers = spec.get("helpers") or ""
        if helpers:
            self._helpers(helpers)

    def _helpers(self, helpers: str) -> None:
        """The task's reference code run here for the helpers a check uses (HumanEval/38's ``encode_cyclic``);
        the entry point itself is always the program's."""
        namespace = dict(self.base)
        try:
            exec(compile(helpers, "<task>", "exec"), namespace)  # noqa: S102 - the task's own code
        except Exception:  # noqa: BLE001 - a reference that fails to load offers no helpers
            pass
        for name, value in namespace.items():
            if name not in self.base and name not in self.program_names:
                self.base[name] = value

    def namespace(self, judging: Judging, free_names: list[str]) -> dict:
        """The test's globals: the row's own names, then each name the test reads without binding it
        (``free_names``, found by the harness) as the rule in the module docstring says."""
        namespace = dict(self.base)
        wanted = []
        for name in free_names:
            if name in self.program_names:
                namespace.pop(name, None)
                wanted.append(name)
            elif name in namespace or name in BUILTIN_NAMES:
                continue
            else:
                module = _stdlib_module(name)
                if module is not None:
                    namespace[name] = module
                else:
                    wanted.append(name)
        if wanted:
            found = judging.ask(["names", wanted])
            if type(found) is not dict:
                raise wire.BadValue("malformed names answer")
            for name in wanted:
                if name in found:
                    namespace[name] = found[name]
                    judging.program_globals.add(name)
        judging.namespace = namespace
        return namespace


def judge_test(row: Row, test: dict, reading: int, writing: int) -> dict:
    """Runs one test against the program at the other end of the two pipes; its verdict as a dict of
    :data:`VERDICT_KEYS`."""
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
    code = test["code"]
    try:
        namespace = row.namespace(judging, test["names"])
        exec(compile(code, "<test>", "exec"), namespace)  # noqa: S102 - the test's own code, run here
        if test["kind"] == "check":
            namespace["check"](judging.ask(["entry", row.entry]))
    except ProgramEnded:
        return "ended", "the program's process ended during the test"
    except wire.BadValue as error:
        return "failed", f"the program's answer could not be read: {error}"
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
    return (" (a program object was compared with a builtin value: its own __eq__ is not trusted; "
            "return the builtin value itself)")


def _verdict(outcome: str, detail: str, judging: Judging) -> dict:
    return {"outcome": outcome, "detail": detail[:MESSAGE_CHARS], "compared": judging.compared,
            "untrusted": judging.untrusted, "sizes": judging.sizes}


def main(payload_fd: int, channels: list[tuple[int, int]], verdict_fd: int) -> None:
    """The judge process: reads the row's tests, judges each in turn, writes one verdict line per test."""
    chunks = []
    while chunk := os.read(payload_fd, 1 << 20):
        chunks.append(chunk)
    os.close(payload_fd)
    spec = wire.json_loads(b"".join(chunks).decode("utf-8"))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * wire.LIMITS["depth"] + 1000))
    sys.set_int_max_str_digits(0)
    try:
        row = Row(spec)
    except BaseException as error:  # noqa: BLE001 - the task's preamble fails: every test says so
        row, broken = None, f"the task's preamble failed: {type(error).__name__}: {_text(error)}"
    for index, test in enumerate(spec["tests"]):
        if row is None:
            verdict = {"outcome": "judge_error", "detail": broken, "compared": 0, "untrusted": 0,
                       "sizes": dict.fromkeys(SIZE_KEYS, 0)}
        else:
            verdict = judge_test(row, test, *channels[index])
        for fd in channels[index]:
            os.close(fd)
        line = wire.json_dumps({"index": index, **verdict}).encode("ascii") + b"\n"
        os.write(verdict_fd, line)
