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

import sandbox_wire as wire

MESSAGE_CHARS = 500
MUTABLE_TYPES = (list, dict, set, bytearray, collections.deque)

UNARY = {
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
    "hash": hash,
    "reversed": reversed,
    "enter": lambda target: type(target).__enter__(target),
    "await": lambda target: _run_awaitable(target),
    "state": lambda target: _state(target),
}


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
    return [type(target).__qualname__, {str(name): value for name, value in fields.items()}]


def _run_awaitable(awaitable):
    """An awaitable of the program run to its end in an event loop of this process (the judge's test awaits it)."""
    import asyncio

    async def awaited():
        return await awaitable

    return asyncio.run(awaited())


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
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
    "matmul": operator.matmul,
}
BINARY.update(
    {
        f"r{name}": (lambda function: lambda a, b: function(b, a))(BINARY[name])
        for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")
    }
)
TERNARY = {"setattr": setattr, "setitem": operator.setitem}
EXIT = "exit"  # __exit__(type, value, traceback): the judge sends None for each


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


class ProgramSide:
    def __init__(self, reading: int, writing: int, namespace: dict, task_classes: dict):
        self.namespace = namespace
        self.task_classes = task_classes
        self.objects: list = []
        self.handles: dict[int, int] = {}  # id(object) -> its handle: one object, one handle
        self.globals_sent: dict[str, object] = {}  # the program's globals the judge holds as values, as sent
        self.peer = wire.Peer(reading, writing, self.answer)

    def encode(self, value):
        return wire.Encoder(self.task_classes, self._handle).encode(value)

    def _handle(self, value):
        if type(value) is JudgeCallable:
            return ["cb", value.index]
        if isinstance(value, type) and issubclass(value, BaseException):
            return ["exc", value.__name__, builtin_base(value)]  # so a test's `except ItsError:` can name it
        handle = self.handles.get(id(value))
        if handle is None:
            handle = self.handles[id(value)] = len(self.objects)
            self.objects.append(value)
        kind = type(value)
        capabilities = [name for name in wire.CAPABILITIES if getattr(kind, name, None) is not None]
        return ["h", handle, kind.__name__, capabilities]

    def decode(self, encoded):
        return wire.Decoder(self.task_classes, self._resolve, wire.PURE_BUILTINS | wire.BUILTIN_EXCEPTIONS).decode(
            encoded
        )

    def _resolve(self, encoded):
        index = encoded[1] if len(encoded) >= 2 else None
        if encoded[0] == "exc":
            raise wire.BadValue("an exception class of the test does not travel")
        if encoded[0] == "cb" and type(index) is int:
            return JudgeCallable(self, index)
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
        """An exception as the judge re-raises it: its name, message, nearest builtin base and arguments."""
        try:
            message = str(error)[:MESSAGE_CHARS]
        except BaseException:  # noqa: BLE001 - a hostile __str__
            message = "<unprintable>"
        try:
            args = self.encode(list(error.args))
        except BaseException:  # noqa: BLE001 - arguments that do not travel: the message stands for them
            args = None
        return ["raise", type(error).__name__, message, builtin_base(type(error)), args]

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
            return self._call(self.objects[request[1]], request[2], request[3], request[4])
        if kind == "op":
            return ["ok", self.encode(self._op(request[1], self.objects[request[2]], request[3]))]
        raise ValueError(f"unknown request {str(kind)[:40]}")

    def _call(self, function, encoded_args: list, encoded_kwargs: list, state: dict) -> list:
        args = [self.decode(item) for item in encoded_args]
        kwargs = {name: self.decode(item) for name, item in encoded_kwargs}
        random_state = self._take_state(state)
        printed, stdout = (io.StringIO(), sys.stdout) if state.get("stdout") else (None, None)
        if printed is not None:
            sys.stdout = printed
        try:
            result = function(*args, **kwargs)
        finally:
            after = {}
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
            if isinstance(value, MUTABLE_TYPES) or type(value) in self.task_classes.values():
                now = self.encode(value)
                if now != sent:
                    changed.append([position, now])
        return ["ok", self.encode(result) if same is None else None, changed, self._globals_changed(), same, after]

    def _take_state(self, state: dict):
        """The test's process state, made this process's for the call (see ``Judging._process_state``); the
        ``random`` state it set, if any."""
        if state.get("recursion_limit", 0) > sys.getrecursionlimit():
            sys.setrecursionlimit(state["recursion_limit"])
        if "random" not in state:
            return None
        import random

        random_state = self.decode(state["random"])
        random.setstate(random_state)
        return random_state

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
            return bool(type(target).__exit__(target, None, None, None))
        return TERNARY[name](target, *operands)

    @staticmethod
    def _next_batch(iterator, count: int) -> list:
        items = []
        for _ in range(max(1, min(int(count), wire.BATCH_LIMIT))):
            try:
                items.append(next(iterator))
            except StopIteration:
                return [items, "stop"]
            except Exception as error:  # noqa: BLE001 - raised after the items before it
                return [items, [type(error).__name__, str(error)[:MESSAGE_CHARS], builtin_base(type(error))]]
        return [items, None]
