"""The program's objects as the test holds them (:class:`Remote`): each a handle whose every use is a request to the
program's process, with the special methods its object's type has and no others (:func:`remote_class`), operators
forwarded by the trust rule (``sandbox_judge``'s module docstring), and the program's iterators fetched in batches
(:class:`RemoteIterator`). Runs inside the sandbox beside :mod:`sandbox_judge`. Standard library only.
"""

from __future__ import annotations

import abc
import builtins
import sys
import types
from typing import TYPE_CHECKING

import sandbox_wire as wire
from sandbox_refusals import (
    BUILTIN_METHODS,
    CLASS_DUNDERS,
    DYNAMIC_FIELDS,
    MESSAGE_CHARS,
    PASSED_DUNDERS,
    FromProgram,
    Unsendable,
    Untrusted,
    _readable,
    _test_function,
    _text,
    program_exception,
)

if TYPE_CHECKING:  # the conversation a Remote's requests go through
    from sandbox_judge import Judging


def _judging(remote) -> Judging:
    return object.__getattribute__(remote, "_diffugrpo_judging")


# Python's types of the program's objects a handle stands for where the test asks for its __class__ (a program class
# named like one of them gains nothing: the honest object is as cheap)
BUILTIN_KINDS = {
    "generator": types.GeneratorType,
    "coroutine": types.CoroutineType,
    "async_generator": types.AsyncGeneratorType,
    "function": types.FunctionType,
    "method": types.MethodType,
    "builtin_function_or_method": types.BuiltinFunctionType,
    "property": property,
    "staticmethod": staticmethod,
    "classmethod": classmethod,
}


def _equal_visible_states(one, other) -> bool:
    """Whether two program objects' stored states (``sandbox_program._state``: class name, fields, a builtin value)
    are equal and hold something: an empty state proves nothing about what the objects keep."""
    holds_something = wire._is_list(one) and len(one) >= 2 and (bool(one[1]) or len(one) > 2)
    return holds_something and one == other


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
    _diffugrpo_value_type = None  # the builtin whose value the object holds (a Stack(list)'s list), if any

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
        kind = object.__getattribute__(self, "_diffugrpo_type")
        is_class = kind == "type"
        passed = PASSED_DUNDERS + CLASS_DUNDERS if kind == "type" else PASSED_DUNDERS
        if name.startswith("__") and name.endswith("__") and name not in passed:
            # numpy's __array_interface__ and its kind would have this process read what the program points at
            raise AttributeError(f"{name} of a program object is not asked for")
        judging = _judging(self)
        # the class itself (Employee.count, TextUtils.split): what the task's class of that name offers
        kind = judging.class_names.get(_handle(self), kind) if kind == "type" else kind
        if name in BUILTIN_METHODS:
            value_type = object.__getattribute__(self, "_diffugrpo_value_type")
            if value_type is not None and hasattr(value_type, name):
                # a str method of the program's Word(str) (or list's count of its Stack): the builtin's own, on the
                # value it holds, never the program's override (these methods only read the value)
                return getattr(self._diffugrpo_value(), name)
            # With a reference, the class must be one the reference defines, offering the method (a class name is the
            # program's to choose: one named like the task's function is not the task's); without, only a class the
            # test took from the program by that name answers, for itself (Employee.count) and for an object the test
            # made by calling it (Stack().count()), never for an object a call returned (a Solution().greet()
            # returning a Solution whose startswith answers True).
            offered = judging.task_methods.get(kind)  # what the reference's class of that name has ("*": unknown)
            if judging.has_reference:
                named = offered is not None
                trusted = named and ("*" in offered or name in offered)
                if named and not trusted and DYNAMIC_FIELDS in offered:
                    # a class whose fields the caller names (Record(title=...)): a field's value is read, never a
                    # method of the program's answering for a str's
                    value = self._op("getattr", name)
                    if not isinstance(value, Remote):
                        return value
            else:
                named = kind in judging.class_names.values()
                trusted = named and (is_class or _handle(self) in judging.made_by_test)
            if not trusted:
                judging.untrusted += 1
                never = (
                    "a class the task's reference does not define"
                    if judging.has_reference
                    else "a class the task never names"
                )
                raise Untrusted(
                    f"the test called .{name} on a program object of class {kind}, "
                    + (never if not named else "whose class in the task has no such method")
                    + ": a method of a builtin type answered by the program's own code is not trusted (return "
                    "the builtin value)"
                )
        return self._op("getattr", name)

    @property
    def __class__(self):
        """``obj.__class__`` in the test's own code is the program's class (``obj.__class__ is Node``), as ``type(obj)``
        there is, or Python's own type for a generator, function or property (so the test's ``isinstance(gen,
        types.GeneratorType)`` holds); everywhere else (isinstance's fallback inside this process's own code) the
        handle's class."""
        if sys._getframe(1).f_globals is _judging(self).namespace:
            builtin_kind = BUILTIN_KINDS.get(object.__getattribute__(self, "_diffugrpo_type"))
            if builtin_kind is not None:
                return builtin_kind
            kind = self._op("type")
            if isinstance(kind, Remote):
                return kind
        return type(self)

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
        if not isinstance(other, Remote) and object.__getattribute__(self, "_diffugrpo_value_type") is not None:
            return _OPERATORS[name](self._diffugrpo_value(), other)  # its builtin value, compared here
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

    def __floor__(self):
        return self._op("floor")

    def __ceil__(self):
        return self._op("ceil")

    def __trunc__(self):
        return self._op("trunc")

    def __complex__(self):
        return _typed(self._op("complex"), complex, "__complex__")

    def __bytes__(self):
        return _typed(self._op("bytes"), bytes, "__bytes__")

    def __copy__(self):
        return self._op("copy")  # a copy made by the program, of its own object, as copy.copy would make it there

    def __deepcopy__(self, memo):
        return self._op("deepcopy")

    def __reduce_ex__(self, protocol):
        raise TypeError("a program object cannot be pickled in the judge")

    def __mro_entries__(self, bases):
        """``class Loud(Greeter)`` in a test, ``Greeter`` a program class: see :class:`TestSubclass`."""
        return (type("ProgramClass", (TestSubclass,), {"_diffugrpo_parent": self}),)

    def _diffugrpo_value(self):
        """The builtin value the object holds now (read by its builtin base's own methods there), or None."""
        kind = object.__getattribute__(self, "_diffugrpo_value_type")
        return None if kind is None else _typed(self._op("value"), kind, "its builtin value")


class TestSubclass:
    """The base a test's subclass of a program class gets (``class Loud(Greeter)``): the class is made in the
    program's process too, deriving from the program's class, its methods the test's own functions called back
    here (so the program's ``greet`` calls the test's ``greeting``); instantiating it makes the program's object."""

    _diffugrpo_parent = None
    _diffugrpo_made = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_diffugrpo_parent" in vars(cls):
            return  # the base __mro_entries__ made
        body = {
            name: value
            for name, value in vars(cls).items()
            if _test_function(value) or (not name.startswith("__") and type(value) in (int, float, str, bool))
        }
        parent = next(base._diffugrpo_parent for base in cls.__mro__ if "_diffugrpo_parent" in vars(base))
        cls._diffugrpo_made = parent._op("subclass", cls.__name__, body)

    def __new__(cls, *args, **kwargs):
        return cls._diffugrpo_made(*args, **kwargs)


def _binary(name: str):
    """An operator between two of the program's objects is the program's (counted like ==); with a value of the
    test it is refused, as a builtin refuses an unknown type: the test's value never reaches the program's
    operator, so ``abs(f(x) - 3.14) < 1e-6`` cannot be answered by an object that subtracts to zero."""

    def forward(self, other):
        judging = _judging(self)
        if not isinstance(other, Remote) and object.__getattribute__(self, "_diffugrpo_value_type") is not None:
            value = self._diffugrpo_value()  # its builtin value, computed with here
            if name in _OPERATORS:
                return _OPERATORS[name](value, other)
            return _OPERATORS[name[1:]](other, value)  # a reflected one (radd: other + value)
        if name == "radd" and type(other) is int and other == 0:
            # sum() of program objects starts from 0, which tells the program nothing of an expected value; its
            # answer must be its own object, never a number the test would compare
            total = self._op(name, 0)
            if isinstance(total, Remote):
                return total
            judging.untrusted += 1
            raise TypeError("sum() of program objects: 0 + obj must give a program object")
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
    "divmod",
    "rdivmod",
):
    setattr(Remote, f"__{_name}__", _binary(_name))


def _in_place(name: str):
    """``a += b`` between two of the program's objects is the program's own ``+=`` (a ``Vector`` that adds in
    place, a class with ``__iadd__`` alone); with a value of the test it falls back on ``+`` (see :func:`_binary`)."""

    def forward(self, other):
        if not isinstance(other, Remote):
            return NotImplemented
        _judging(self).compared += 1
        return self._op(f"i{name}", other)

    forward.__name__ = f"__i{name}__"
    return forward


for _name in wire.IN_PLACE_OPERATORS:
    setattr(Remote, f"__i{_name}__", _in_place(_name))


def _iterate(self):
    iterator = self._op("iter")
    if not isinstance(iterator, Remote):
        return iter(iterator)
    if iterator is self:
        return self  # an iterator object of the program's (iter(it) is it); its __next__ still fetches in batches
    return _judging(self).iterator(iterator)


def _contains(self, item) -> bool:
    judging = _judging(self)
    if not isinstance(item, Remote) and object.__getattribute__(self, "_diffugrpo_value_type") is not None:
        return item in self._diffugrpo_value()
    if not isinstance(item, Remote):
        judging.untrusted += 1
        raise Untrusted(
            "membership of a test's value in a program object is decided by its own __contains__: "
            "not trusted (return a list, set or dict)"
        )
    judging.compared += 1
    return _typed(self._op("contains", item), bool, "__contains__")


def _exit(self, exc_type=None, exc=None, traceback=None, operation: str = "exit"):
    """The program's ``__exit__``, told of an exception in the test's ``with`` body as its nearest builtin class and
    message (a transaction rolls back), and never allowed to suppress one: the test's ``AssertionError`` or a
    ``TypeError`` its checks raised always goes on."""
    if isinstance(exc, Exception) and not isinstance(exc, FromProgram):
        base = next(kind.__name__ for kind in type(exc).__mro__ if getattr(builtins, kind.__name__, None) is kind)
        self._op(operation, base, _text(exc))
    elif isinstance(exc, Exception):  # the program's own: its class of that name
        self._op(operation, type(exc).__name__, _text(exc))
    else:
        self._op(operation)
    return False


def _reversed(self):
    answer = self._op("reversed")
    return iter(list(RemoteIterator(answer))) if isinstance(answer, Remote) else iter(answer)


def _await(self):
    """``await`` on a program's awaitable: the program runs it to its end in its own event loop."""
    return self._op("await")
    yield  # a generator, as __await__ must return an iterator


async def _async_next(self):
    """``async for`` over a program's async iterator: each step runs to its end in the program's process."""
    answer = self._op("anext")
    if not (wire._is_list(answer, 2) and type(answer[0]) is bool):
        raise TypeError("the program's async iterator gave no step")
    if not answer[0]:
        raise StopAsyncIteration
    return answer[1]


async def _async_enter(self):
    return self._op("aenter")


async def _async_exit(self, exc_type=None, exc=None, traceback=None):
    """``async with``'s end: the program's ``__aexit__``, told as :func:`_exit` tells ``__exit__``, never suppressing."""
    return _exit(self, exc_type, exc, traceback, operation="aexit")


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
    "__aiter__": lambda self: self._op("aiter"),
    "__anext__": lambda self: _async_next(self),
    "__aenter__": lambda self: _async_enter(self),
    "__aexit__": lambda self, *exception: _async_exit(self, *exception),
}


_REMOTE_CLASSES: dict[tuple, type] = {}


_REMOTE_OWN = frozenset((*dir(Remote), *_CAPABILITY_METHODS)) - frozenset(PASSED_DUNDERS)


_OPERATORS = wire.BINARY_OPERATORS


def _forwarded(self, name: str):
    """Attribute lookup on a handle whose class also derives from task classes: the handle's own machinery here,
    anything else the program's object's (the task class's ``describe`` runs there, with the program's ``area``)."""
    if name in _REMOTE_OWN:
        return object.__getattribute__(self, name)
    return Remote.__getattr__(self, name)


def remote_class(
    capabilities: frozenset, name: str = "Remote", task_bases: tuple = (), value_type: type | None = None
) -> type:
    """The handle class offering exactly ``capabilities`` (see ``sandbox_wire.CAPABILITIES``), named like its
    object's class (``type(d).__name__ == 'Dog'``), deriving from the task classes that class derives from (so
    ``isinstance(circle, Shape)`` holds for the preamble's ``Shape``), made once per kind."""
    task_bases = tuple(base for base in task_bases if _plain_task_class(base))
    key = (capabilities, name, task_bases, value_type)
    cls = _REMOTE_CLASSES.get(key)
    if cls is None:
        methods = {attribute: _CAPABILITY_METHODS[attribute] for attribute in capabilities}
        # __doc__ is the program's (a wrapper functools.wraps made carries the test function's), not this class's
        body = {"__slots__": (), "_diffugrpo_value_type": value_type, "__doc__": _PROGRAM_DOC, **methods}
        if value_type is not None:
            # isinstance(x, int) of the program's IntEnum member holds, as Python's falls back on __class__; type(x)
            # stays the handle's class, so nothing here takes the handle for a real int
            stands_for = type(name if name.isidentifier() else "Remote", (value_type,), {"__module__": __name__})
            body["__class__"] = property(lambda self: stands_for)
        if task_bases:
            body["__getattribute__"] = _forwarded
        label = name if name.isidentifier() else "Remote"
        try:
            cls = type(label, (Remote, *task_bases), body)
            # an ABC base's abstract methods are the program object's to answer (through its handle), not missing
            cls.__abstractmethods__ = frozenset()
        except TypeError:  # a task class that cannot be a base of the handle's
            body.pop("__getattribute__", None)
            cls = type(label, (Remote,), body)
        if len(_REMOTE_CLASSES) < 1024:
            _REMOTE_CLASSES[key] = cls
    return cls


_PROGRAM_DOC = property(lambda self: Remote.__getattr__(self, "__doc__"))


def _plain_task_class(cls) -> bool:
    """A task class whose instances hold only attributes (no builtin base, no slots, no metaclass of its own but
    ``abc.ABCMeta``: a preamble's ``Shape(ABC)``)."""
    return (
        type(cls) in (type, abc.ABCMeta)
        and all(base in (object, abc.ABC) or "__slots__" not in vars(base) for base in cls.__mro__)
        and all(base in (object, abc.ABC) or base.__module__ == "__test__" for base in cls.__mro__)
    )


# A program's iterator gives its first items one request each, as next() would: a test that reads the state the
# generator changes (a reader's .consumed) between them sees it as in one process. Later items come in batches.
ONE_AT_A_TIME = 64


class RemoteIterator:
    """Iteration over a program's iterator, fetched in growing batches (one request per batch, not per item)."""

    def __init__(self, remote: Remote, batch: int = 1):
        self.remote = remote
        self.buffer: list = []
        self.position = 0
        self.batch = batch
        self.taken = 0
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

        (self.buffer, tail), self.position = _readable(read), 0
        self.taken += len(self.buffer)
        if self.taken >= ONE_AT_A_TIME:
            self.batch = min(wire.BATCH_LIMIT, self.batch * 2)
        if tail == "stop":
            self.end = StopIteration()
        elif wire._is_list(tail, 2) and tail[0] == "stop":
            self.end = StopIteration(tail[1])
        elif tail is not None:
            self.end = _readable(
                lambda: program_exception(str(tail[0])[:100], str(tail[1])[:MESSAGE_CHARS], str(tail[2])[:100])
            )
