"""The program's side of a judged test: answers the judge's requests in the program's namespace.

Runs in the job's own process inside the sandbox, after the program itself (standard library
only). Nothing here is trusted: the program can replace any of it, so the judge treats every
answer as data (:mod:`sandbox_wire`). What it offers is fidelity: each answer is the program's
real value, its objects stay here as handles, and an argument the program changed in place is
sent back so the judge's copy changes too.
"""

from __future__ import annotations

import builtins
import collections
import io
import operator
import sys
import warnings

import sandbox_wire as wire

MESSAGE_CHARS = 500
MUTABLE_TYPES = (list, dict, set, bytearray, collections.deque)
KEPT_LIMIT = 64  # the test's values a program may keep and have mirrored back (as the judge's limit)
PLAIN_ITEMS = 256  # the parts of an iterator's item looked at to tell whether it is plain data

UNARY = {
    "type": type,  # the object's own type, whatever its __class__ says (the test's type(obj))
    "repr": repr,
    "str": str,
    "len": len,
    "bool": bool,
    "iter": iter,
    "int": int,
    "float": float,
    "index": operator.index,
    "neg": operator.neg,
    "pos": operator.pos,
    "abs": abs,
    "invert": operator.invert,
    "floor": lambda target: _math().floor(target),
    "ceil": lambda target: _math().ceil(target),
    "trunc": lambda target: _math().trunc(target),
    "complex": complex,
    "bytes": bytes,
    "hash": hash,
    "reversed": reversed,
    "enter": lambda target: type(target).__enter__(target),
    "await": lambda target: _run_awaitable(target),
    "aiter": lambda target: type(target).__aiter__(target),
    "anext": lambda target: _next_async(target),
    "aenter": lambda target: _in_async_loop(type(target).__aenter__(target)),
    "state": lambda target: _state(target),
    "copy": lambda target: _copy().copy(target),
    "deepcopy": lambda target: _copy().deepcopy(target),
    "value": lambda target: _builtin_value(target),
}


WARNINGS_SENT = 64  # a call's warnings the judge re-issues, at most


def _warning(item) -> list:
    """``[nearest builtin Warning class's name, message, line]`` of a warning the program issued."""
    base = next(kind.__name__ for kind in item.category.__mro__ if getattr(builtins, kind.__name__, None) is kind)
    return [base, str(item.message)[:MESSAGE_CHARS], item.lineno if type(item.lineno) is int else 0]


def _math():
    import math

    return math


def _copy():
    import copy  # on first use: its imports (weakref, types) would slow every sandbox's start

    return copy


def _builtin_value(target):
    """The builtin value an object of a builtin's subclass holds (see ``sandbox_wire.Encoder._kept``)."""
    base = next((base for base in type(target).__mro__ if base in wire.KEPT_BASES), None)
    if base is None:
        raise TypeError(f"a {type(target).__name__} holds no builtin value")
    return wire._plain_value(target, base)


def _state(target) -> list:
    """An object's class name and fields as they are stored (its ``__dict__`` and slots, never what its own methods
    say): what the judge holds two objects the program calls equal to."""
    if isinstance(target, type):
        return ["class", str(getattr(target, "__qualname__", ""))]
    try:
        fields = dict(object.__getattribute__(target, "__dict__"))
    except AttributeError:
        fields = {}
    for cls in type(target).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            try:
                fields[slot] = object.__getattribute__(target, slot)
            except (AttributeError, TypeError):
                continue
    state = [type(target).__qualname__, {str(name): value for name, value in fields.items()}]
    if isinstance(target, wire.KEPT_BASES):
        state.append(_builtin_value(target))  # a Stack's items are part of what makes two Stacks equal
    return state


def _run_awaitable(awaitable):
    """An awaitable of the program run to its end in an event loop of this process (the judge's test awaits it)."""
    import asyncio

    async def awaited():
        return await awaitable

    return asyncio.run(awaited())


_ASYNC_ITERATION: list = []  # the event loop the program's async iterators run in, one for the whole test


def _next_async(iterator) -> list:
    """``[True, item]`` from the program's async iterator, ``[False, None]`` at its end, run in one event loop of
    this process for all its steps (an async generator belongs to the loop it started in)."""

    async def step():
        try:
            return [True, await type(iterator).__anext__(iterator)]
        except StopAsyncIteration:
            return [False, None]

    return _in_async_loop(step())


def _in_async_loop(awaitable):
    """``awaitable`` run to its end in the event loop of :data:`_ASYNC_ITERATION`."""
    import asyncio

    if not _ASYNC_ITERATION:
        _ASYNC_ITERATION.append(asyncio.new_event_loop())

    async def awaited():
        return await awaitable

    return _ASYNC_ITERATION[0].run_until_complete(awaited())


BINARY = {
    "getattr": getattr,
    "delattr": delattr,
    "getitem": operator.getitem,
    "delitem": operator.delitem,
    "contains": operator.contains,
    "format": format,
    "round": round,
    "isinstance": isinstance,
    "issubclass": issubclass,
    **wire.BINARY_OPERATORS,
    **{f"i{name}": function for name, function in wire.IN_PLACE_OPERATORS.items()},
}
BINARY.update(
    {
        f"r{name}": (lambda function: lambda a, b: function(b, a))(BINARY[name])
        for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "divmod")
    }
)


def _subclass(target, name, body: dict):
    """A test's subclass of the program's class ``target`` (see ``sandbox_judge.TestSubclass``): the test's functions
    as its methods, each called back in the judge with this process's object as ``self``."""
    if not isinstance(target, type) or type(name) is not str or type(body) is not dict:
        raise TypeError("a subclass needs a program class, a name and a body")

    def method(callback):
        def call(self, *args, **kwargs):
            return callback(self, *args, **kwargs)

        return call

    namespace = {key: method(value) if type(value) is JudgeCallable else value for key, value in body.items()}
    return type(name, (target,), namespace)


TERNARY = {"setattr": setattr, "setitem": operator.setitem, "subclass": _subclass}
DATACLASS = "dataclass"  # dataclasses.asdict(obj) and the others of DATACLASS_FUNCTIONS, of a program object
DATACLASS_FUNCTIONS = ("asdict", "astuple", "replace", "fields", "is_dataclass")
ASYNC_EXIT = "aexit"  # __aexit__, told as __exit__ is
EXIT = "exit"  # __exit__(type, value, traceback): the judge sends the exception's class name and message, or nothing


def _exit_info(operands: list) -> tuple:
    """``(type, value, None)`` for ``__exit__``: the builtin exception of that name (else ``Exception``), or Nones."""
    if len(operands) != 2 or type(operands[0]) is not str or type(operands[1]) is not str:
        return None, None, None
    kind = getattr(builtins, operands[0], None)
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = Exception
    try:
        error = kind(operands[1])
    except Exception:  # noqa: BLE001 - a builtin that takes other arguments (UnicodeDecodeError)
        kind, error = Exception, Exception(operands[1])
    return kind, error, None


def imported_as(value) -> list | None:
    """``["mod", name]`` for a module, ``["std", module, qualified name]`` for an object a module defines: where
    the program's name came from by an import, so the judge uses its own copy (not the program's, which the
    program may have patched)."""
    if isinstance(value, type(sys)):
        name = getattr(value, "__name__", None)
        return ["mod", name] if type(name) is str and sys.modules.get(name) is value else None
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if (
        type(module) is not str
        or type(qualname) is not str
        or module in ("__main__", "solution", "builtins")
        or module.split(".")[0] not in (*sys.stdlib_module_names, "numpy")
    ):
        return None
    if "." in qualname or not qualname.isidentifier():
        return None
    return ["std", module, qualname] if getattr(sys.modules.get(module), qualname, None) is value else None


_NAMEDTUPLE_MADE = frozenset(vars(collections.namedtuple("Made", "x", defaults=[0]))) | {
    "__annotations__",
    "__orig_bases__",
    "__qualname__",
}


def _own_methods(kind: type) -> bool:
    """Whether a namedtuple class defines methods of its own (``typing.NamedTuple`` with a ``distance``): then it
    travels as the program's object holding its tuple, not as a plain namedtuple that would lose them."""
    return any(
        name not in _NAMEDTUPLE_MADE and (callable(value) or isinstance(value, (property, classmethod, staticmethod)))
        for name, value in vars(kind).items()
    )


def builtin_base(cls: type) -> str:
    """The nearest builtin exception class ``cls`` derives from (``ValueError`` for ``class BadInput(ValueError)``)."""
    for base in cls.__mro__:
        if getattr(builtins, base.__name__, None) is base:
            return base.__name__
    return "Exception"


class JudgeCallable:
    """A callable the test handed to the program (``key=lambda ...``): calling it asks the judge."""

    def __init__(self, side: "ProgramSide", index: int):
        self.side = side
        self.index = index

    def __call__(self, *args, **kwargs):
        side = self.side
        answer = side.peer.request(
            [
                "callback",
                self.index,
                [side.encode(arg) for arg in args],
                [[name, side.encode(value)] for name, value in kwargs.items()],
            ]
        )
        if type(answer) is list and len(answer) == 3 and answer[0] == "raise":
            error = getattr(builtins, str(answer[1]), None)
            if not (isinstance(error, type) and issubclass(error, Exception)):
                error = RuntimeError
            raise error(str(answer[2]))
        return side.decode(answer[1])


class JudgeObject:
    """An object of a class the test defines (see ``Judging._test_object``): its public attributes are read and set,
    and its methods called, in the judge."""

    __slots__ = ("_side", "_index", "_access", "_order")

    def __init__(self, side: "ProgramSide", index: int, access: int, order: int):
        object.__setattr__(self, "_side", side)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_access", JudgeCallable(side, access))
        object.__setattr__(self, "_order", JudgeCallable(side, order))

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return object.__getattribute__(self, "_access")(name)

    def __setattr__(self, name: str, value) -> None:
        object.__getattribute__(self, "_access")(name, value)


def _ordering(name: str):
    """``<`` (``<=``, ``>``, ``>=``) of the test's object: the test's own, called back (heapq of its Tasks)."""

    def ordered(self, other):
        return object.__getattribute__(self, "_order")(name, self, other)

    ordered.__name__ = f"__{name}__"
    return ordered


for _name in ("lt", "le", "gt", "ge"):
    setattr(JudgeObject, f"__{_name}__", _ordering(_name))


_JUDGE_OBJECT_CLASSES: dict[str, type] = {}


def judge_object_class(name: str) -> type:
    """A class named like the test's (``type(box).__name__ == 'Box'``), made once per name."""
    if name not in _JUDGE_OBJECT_CLASSES and len(_JUDGE_OBJECT_CLASSES) < 1024:
        _JUDGE_OBJECT_CLASSES[name] = type(
            name if name.isidentifier() else "JudgeObject", (JudgeObject,), {"__slots__": ()}
        )
    return _JUDGE_OBJECT_CLASSES.get(name, JudgeObject)


class JudgeIterator:
    """An iterator the test handed to the program: its first items, then the rest as the program asks for them."""

    def __init__(self, side: "ProgramSide", items: list, index: int):
        self.items = collections.deque(items)
        self.more = JudgeCallable(side, index)
        self.batch = wire.BATCH_LIMIT
        self.ended = False

    def __iter__(self):
        return self

    def __next__(self):
        if not self.items and not self.ended:
            items = self.more(self.batch)
            self.items.extend(items)
            self.ended = not items
            self.batch = min(self.batch * 2, 1 << 16)
        if not self.items:
            raise StopIteration
        return self.items.popleft()


def _plain(item, budget: list) -> bool:
    """Whether an iterator's item is plain data (builtin scalars, strings and tuples of them, looked at up to
    :data:`PLAIN_ITEMS` parts): such items may be fetched ahead; an object (a ``groupby`` group) may not be."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    kind = type(item)
    if item is None or kind in (bool, int, float, complex, str, bytes):
        return True
    if kind in (tuple, frozenset):
        return all(_plain(part, budget) for part in item)
    return False


class ProgramSide:
    def __init__(self, reading: int, writing: int, namespace: dict, task_classes: dict):
        self.namespace = namespace
        self.task_classes = task_classes
        self.objects: list = []
        self.handles: dict[int, int] = {}  # id(object) -> its handle: one object, one handle
        self.globals_sent: dict[str, object] = {}  # the program's globals the judge holds as values, as sent
        self.kept: dict[int, list] = {}  # the test's values the program holds on to: key -> [value, as last sent]
        self.judge_objects: dict[int, JudgeObject] = {}  # one per object of the test's classes
        self.callables: dict[int, JudgeCallable] = {}  # one per callback of the test's
        self.handles_made = 0
        self.peer = wire.Peer(reading, writing, self.answer)

    def encode(self, value, originals: tuple[dict, dict] | None = None):
        """``value`` as the judge reads it; ``originals``: the call's arguments' containers and task objects, which
        go back as themselves (``wire.Encoder``)."""
        containers, objects = originals or (None, None)
        return wire.Encoder(
            self.task_classes, self._handle, kept=self._kept_kind, originals=containers, original_objects=objects
        ).encode(value)

    def _kept_kind(self, kind) -> bool:
        """The program's own subclasses of a builtin travel as handles with their value (``Encoder._kept``)."""
        return (
            kind.__module__ == "solution"
            and kind not in self.task_classes.values()
            and issubclass(kind, wire.KEPT_BASES)
            and not (wire._is_namedtuple(kind) and not _own_methods(kind))
        )

    def _handle(self, value):
        if type(value) is JudgeCallable:
            return ["cb", value.index]
        if isinstance(value, JudgeObject):
            return ["jo", object.__getattribute__(value, "_index")]
        if isinstance(value, type) and issubclass(value, BaseException):
            return ["exc", value.__name__, builtin_base(value)]  # so a test's `except ItsError:` can name it
        handle = self.handles.get(id(value))
        if handle is None:
            handle = self.handles[id(value)] = len(self.objects)
            self.objects.append(value)
        self.handles_made += 1
        kind = type(value)
        capabilities = [name for name in wire.CAPABILITIES if getattr(kind, name, None) is not None]
        if isinstance(value, type) and hasattr(value, "__class_getitem__") and "__getitem__" not in capabilities:
            capabilities.append("__getitem__")  # a Generic class: Box[int] (then called, as the class itself)
        classes = self.task_classes
        bases = [base.__name__ for base in getattr(kind, "__mro__", ()) if classes.get(base.__name__) is base]
        return ["h", handle, kind.__name__, capabilities, bases]

    def decode(self, encoded):
        return self._decoder().decode(encoded)

    def _decoder(self) -> wire.Decoder:
        return wire.Decoder(
            self.task_classes,
            self._resolve,
            wire.PURE_BUILTINS | wire.BUILTIN_EXCEPTIONS,
            extra_classes=wire.SENT_CLASSES,
        )

    def _resolve(self, encoded):
        index = encoded[1] if len(encoded) >= 2 else None
        if encoded[0] == "ci" and len(encoded) == 3 and type(encoded[2]) is int:
            return JudgeIterator(self, [self.decode(item) for item in encoded[1]], encoded[2])
        if encoded[0] == "jo" and len(encoded) == 5 and type(index) is int and type(encoded[2]) is int:
            if index not in self.judge_objects and type(encoded[4]) is int:
                self.judge_objects[index] = judge_object_class(str(encoded[3]))(self, index, encoded[2], encoded[4])
            return self.judge_objects[index]
        if encoded[0] == "exc":
            raise wire.BadValue("an exception class of the test does not travel")
        if encoded[0] == "cb" and type(index) is int:
            callable_ = self.callables.get(index)
            if callable_ is None:  # one per callback of the test's, as its function is one object there
                callable_ = self.callables[index] = JudgeCallable(self, index)
                for name, text in zip(("__name__", "__qualname__", "__doc__"), encoded[2:5]):
                    if type(text) is str:
                        setattr(callable_, name, text)
            return callable_
        if type(index) is int and 0 <= index < len(self.objects):
            return self.objects[index]
        raise wire.BadValue("unknown handle")

    def serve(self) -> None:
        """Says the program is loaded, then answers requests until the judge says goodbye or goes away."""
        peer = self.peer
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * wire.LIMITS["depth"] + 1000))
        try:
            wire.send_frame(peer.writing, ["ready"])
            while True:
                message = wire.receive_frame(peer.reading)
                if type(message) is not list or len(message) != 2 or message[0] != "ask":
                    return
                wire.send_frame(peer.writing, ["answer", self.answer(message[1])])
        except (wire.WireClosed, wire.BadValue):
            return

    def answer(self, request) -> list:
        try:
            return self._answer(request)
        except wire.BadValue as error:
            return ["raise", wire.OVER_LIMIT, str(error)[:MESSAGE_CHARS]]
        except BaseException as error:  # noqa: BLE001 - the program's failure is the judge's to weigh
            return self._raised(error)

    def _raised(self, error: BaseException) -> list:
        """An exception as the judge re-raises it: its name, message, nearest builtin base, arguments, class
        (module and qualified name) and fields."""
        try:
            message = str(error)[:MESSAGE_CHARS]
        except BaseException:  # noqa: BLE001 - a hostile __str__
            message = "<unprintable>"
        try:
            args = self.encode(list(error.args))
        except BaseException:  # noqa: BLE001 - arguments that do not travel: the message stands for them
            args = None
        kind = type(error)
        try:  # its fields (a ParseError's .line), so the judge's copy of its class reads them as the test does
            fields = vars(error)
            state = self.encode(dict(fields)) if type(fields) is dict and fields else None
        except BaseException:  # noqa: BLE001 - fields that do not travel: the exception arrives without them
            state = None
        origin = [str(kind.__module__)[:100], str(kind.__qualname__)[:200]]
        return ["raise", kind.__name__, message, builtin_base(kind), args, origin, state]

    def _answer(self, request) -> list:
        kind = request[0]
        if kind == "names":
            found = []
            for name in request[1]:
                if type(name) is str and name in self.namespace:
                    encoded = imported_as(self.namespace[name]) or self.encode(self.namespace[name])
                    if not (type(encoded) is list and encoded[0] in ("h", "cb", "exc", "mod", "std")):
                        self.globals_sent[name] = encoded
                    found.append([name, encoded])
            return ["names", found]
        if kind == "entry":
            return ["ok", self.encode(eval(request[1], self.namespace))]  # noqa: S307 - the task's entry point
        if kind == "call":
            return self._call(self.objects[request[1]], request[2], request[3])
        if kind == "kept":
            self._take_kept(request[1])
            return ["ok", None]
        if kind == "op":
            result = self._op(request[1], self.objects[request[2]], request[3])
            answer = ["ok", self.encode(result)]
            if request[1] == "getattr":  # an attribute's list, dict or set: the test's changes to it reach it here
                key = self._keep_one(result)
                if key is not None:
                    return [*answer, self._kept_changed(), key]
            return [*answer, self._kept_changed()] if self.kept else answer
        raise ValueError(f"unknown request {str(kind)[:40]}")

    def _call(self, function, encoded_arguments, state: dict) -> list:
        # the arguments arrive as one value, so a node two of them share (LeetCode's lowestCommonAncestor(root, p,
        # q), two lists meeting in one tail) is one object here as in the test
        decoder = self._decoder()
        arguments = decoder.decode(encoded_arguments)
        if not (type(arguments) is list and len(arguments) == 2 and type(arguments[0]) is list):
            raise wire.BadValue("malformed call arguments")
        args, kwargs = arguments
        if type(kwargs) is not dict or not all(type(name) is str for name in kwargs):
            raise wire.BadValue("malformed call keywords")
        # the containers the arguments brought, by the order they came in: each goes back as itself (Encoder)
        originals = (
            {id(container): index for index, container in enumerate(decoder.refs)},
            {id(obj): index for index, obj in enumerate(decoder.objects)},
        )
        encoded_args = [self._changeable(value, originals) for value in args]  # what each was, to tell what changed
        encoded_kwargs = [[name, self._changeable(value, originals)] for name, value in kwargs.items()]
        random_state = self._take_state(state)
        printed, stdout = (io.StringIO(), sys.stdout) if state.get("stdout") else (None, None)
        if printed is not None:
            sys.stdout = printed
        own_input = builtins.input
        if "input" in state:  # the test's mock.patch('builtins.input', ...): its input, called back
            builtins.input = self.decode(state["input"])
        warned: list = []
        try:
            if state.get("warnings"):  # a test that reads warnings: the program's go to the judge, whose filters decide
                with warnings.catch_warnings(record=True) as warned:
                    warnings.simplefilter("always")
                    result = function(*args, **kwargs)
            else:  # no stdlib code around the call, which the line count would take for the program's work
                result = function(*args, **kwargs)
        finally:
            builtins.input = own_input
            after = {}
            if warned:
                after["warnings"] = [_warning(item) for item in warned[:WARNINGS_SENT]]
            if printed is not None:
                sys.stdout = stdout
                after["stdout"] = printed.getvalue()
            if random_state is not None and sys.modules["random"].getstate() != random_state:
                after["random"] = self.encode(sys.modules["random"].getstate())
        same = next((position for position, value in enumerate(args) if value is result), None)
        if same is None:
            same = next((name for name, value in kwargs.items() if value is result), None)
        changed = []
        for position, value, sent in [
            *zip(range(len(args)), args, encoded_args),
            *((name, kwargs[name], item) for name, item in encoded_kwargs),
        ]:
            if sent is not None:
                now = self.encode(value, originals)
                if now != sent:
                    changed.append([position, now])
        if same is None and not changed:  # a node of unchanged arguments (searchBST's subtree): the test's own one
            same = next((["obj", index] for index, value in enumerate(decoder.objects) if value is result), None)
        self.handles_made = 0
        encoded_result = self.encode(result, originals) if same is None else None
        if self.kept:
            after["kept"] = self._kept_changed()
        if self.handles_made:  # the result is (or holds) an object of the program's, which may keep the arguments
            after["keeps"] = self._keep(args)
        return ["ok", encoded_result, changed, self._globals_changed(), same, after]

    def _changeable(self, value, originals: tuple[dict, dict]):
        """The encoding of an argument a call may change in place (a list, a task object), None for any other."""
        return (
            self.encode(value, originals)
            if isinstance(value, MUTABLE_TYPES)
            or type(value) in self.task_classes.values()
            or (type(value).__module__ == "numpy" and type(value).__name__ == "ndarray")
            or isinstance(value, (io.StringIO, io.BytesIO))
            else None
        )

    def _take_state(self, state: dict):
        """The test's process state, made this process's for the call (see ``Judging._process_state``); the
        ``random`` state it set, if any."""
        if state.get("recursion_limit", 0) > sys.getrecursionlimit():
            sys.setrecursionlimit(state["recursion_limit"])
        for made_there in state.get("test_classes", ()):
            if not (type(made_there) is list and len(made_there) == 2 and type(made_there[0]) is str):
                raise wire.BadValue("malformed test class")
            if made_there[0] not in self.namespace:  # the program's own class of that name stays its own
                self.namespace[made_there[0]] = self.decode(made_there[1])
        if "numpy_random" in state:
            import numpy

            numpy.random.set_state(self.decode(state["numpy_random"]))
        if "decimal" in state:
            import decimal

            decimal.setcontext(self.decode(state["decimal"]))
        if "random" not in state:
            return None
        import random

        random_state = self.decode(state["random"])
        random.setstate(random_state)
        return random_state

    def _keep(self, args: list) -> list:
        """Registers the call's mutable arguments that an object it returned may hold on to (a ``Logger(sink)``, a
        generator given the test's list): ``[position, key]`` each, so later answers can say how they changed."""
        keeps = []
        for position, value in enumerate(args):
            if not any(entry[0] is value for entry in self.kept.values()):
                key = self._keep_one(value)
                if key is not None:
                    keeps.append([position, key])
        return keeps

    def _keep_one(self, value) -> int | None:
        """``value``'s key among the kept values, registered now where it is a list, dict, set or bytearray not kept
        yet (within :data:`KEPT_LIMIT`); None for any other value."""
        if type(value) not in (list, dict, set, bytearray):
            return None
        key = next((key for key, entry in self.kept.items() if entry[0] is value), None)
        if key is None and len(self.kept) < KEPT_LIMIT:
            key = len(self.kept)
            self.kept[key] = [value, self.encode(value)]
        return key

    def _take_kept(self, changes) -> None:
        """The test's own changes to values this process keeps (see ``Judging._send_kept``), made here in place."""
        if type(changes) is not list:
            raise wire.BadValue("malformed kept values")
        for change in changes:
            if not (type(change) is list and len(change) == 2 and type(change[0]) is int and change[0] in self.kept):
                raise wire.BadValue("malformed kept value")
            entry = self.kept[change[0]]
            state = self.decode(change[1])
            if type(state) is not type(entry[0]):
                raise wire.BadValue("a kept value changed type")
            if isinstance(state, (dict, set)):
                entry[0].clear()
                entry[0].update(state)
            else:
                entry[0][:] = state
            entry[1] = self.encode(entry[0])

    def _kept_changed(self) -> list:
        """The kept values (see :meth:`_keep`) whose state changed since they were last sent."""
        changed = []
        for key, entry in self.kept.items():
            now = self.encode(entry[0])
            if now != entry[1]:
                entry[1] = now
                changed.append([key, now])
        return changed

    def _globals_changed(self) -> list:
        """The program's globals the test holds as values whose value a call changed (``inventory`` after
        ``add_item('apple')``), so the test reads them as Python would."""
        changed = []
        for name, sent in self.globals_sent.items():
            now = self.encode(self.namespace.get(name))
            if now != sent:
                self.globals_sent[name] = now
                changed.append([name, now])
        return changed

    def _op(self, name: str, target, encoded_operands: list):
        operands = [self.decode(item) for item in encoded_operands]
        if name == "next":
            return self._next_batch(target, operands[0])
        if name in UNARY:
            return UNARY[name](target)
        if name in BINARY:
            return BINARY[name](target, *operands)
        if name == EXIT:
            return bool(type(target).__exit__(target, *_exit_info(operands)))
        if name == ASYNC_EXIT:
            return bool(_in_async_loop(type(target).__aexit__(target, *_exit_info(operands))))
        if name == DATACLASS:
            function, keywords = operands
            if function not in DATACLASS_FUNCTIONS or type(keywords) is not dict:
                raise TypeError(f"{str(function)[:40]!r} is not one of dataclasses' functions asked here")
            import dataclasses

            return getattr(dataclasses, function)(target, **keywords)
        return TERNARY[name](target, *operands)

    def _next_batch(self, iterator, count: int) -> list:
        """Up to ``count`` items, fetched ahead only while they are plain data and the program keeps none of the
        test's values: an item that is an object (a ``groupby`` group, a list the generator goes on changing) or a
        step with side effects on the test's values is the last of its batch, as one ``next`` in one process."""
        items = []
        for _ in range(max(1, min(int(count), wire.BATCH_LIMIT))):
            try:
                item = next(iterator)
            except StopIteration as stop:  # a generator's return value is the test's StopIteration.value too
                return [items, "stop" if stop.value is None else ["stop", stop.value]]
            except Exception as error:  # noqa: BLE001 - raised after the items before it
                return [items, [type(error).__name__, str(error)[:MESSAGE_CHARS], builtin_base(type(error))]]
            items.append(item)
            if self.kept or not _plain(item, [PLAIN_ITEMS]):
                break
        return [items, None]
