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
point); only then is the program asked, and, in an assert row without a reference, for names nobody else
defines.

**The trust rule.** Values are compared here, by Python's own operators on real values. The only
place the program's code decides anything is a handle's own behaviour: ``==`` between two of the
program's objects asks the program (counted as ``compared``: the verdict depends on the program's
own comparison), and a program object compared with a builtin value is never equal to it
(counted as ``untrusted``), whatever its ``__eq__`` says.

Standard library only (numpy imported only when a numpy value arrives).
"""

from __future__ import annotations

import builtins
import functools
import io
import itertools
import os
import sys

import sandbox_wire as wire
from sandbox_refusals import (
    _NOT_PASSED_THROUGH,
    _TASK_EXCEPTIONS,
    BUILTIN_NAMES,
    MESSAGE_CHARS,
    FromProgram,
    NoGroundTruth,
    ProgramEnded,
    Unreadable,
    Unsendable,
    Untrusted,
    _readable,
    _set_fields,
    _test_function,
    _test_method,
    _text,
    program_exception,
    program_exception_class,
)
from sandbox_remote import (
    Remote,
    RemoteIterator,
    _coroutine,
    _equal_visible_states,
    _handle,
    remote_class,
)

STATE_DEPTH = 200  # nested program objects compared field by field, at most


_STDOUT = [sys.stdout]  # the judge's own stdout: another one in its place is a test's redirect_stdout
_INPUT = [builtins.input]  # Python's input: another one in its place is the test's


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
        self.callback_index: dict = {}  # a callable's key (see _unknown) -> its index in callbacks
        self.remotes: dict[int, Remote] = {}  # one per program object, so `is` and hashing hold
        self.iterators: dict[int, RemoteIterator] = {}  # one per program iterator: its prefetched items stay
        self.namespace: dict = {}  # the test's globals, once made
        self.program_globals: set[str] = set()  # the names in it that are the program's
        self.program_names: frozenset[str] = frozenset()  # the names the task's code defines
        self.has_reference = True  # whether the row has a reference solution (see Row.namespace)
        self.task_methods: dict[str, frozenset] = {}  # the public attributes of the reference's classes, by class
        self.class_names: dict[int, str] = {}  # a program class's handle -> the task's name the test found it under
        self.made_by_test: set[int] = set()  # handles of objects the test made by calling one of those classes
        self.failed_callbacks: list[AssertionError] = []
        self.ambiguous: set[str] = set()  # builtin names the program redefines, in a row without a reference
        self.random_state = None  # random's state as the program's process last had it from this side
        self.numpy_random_key = None  # numpy's global state as last sent (see _process_state)
        self.input_callback: int | None = None  # the test's own input, where it replaced builtins.input
        self.test_classes_sent: set[str] = set()  # see _test_classes
        self.record_classes: frozenset[str] = frozenset()  # the test code's own (see record_classes)
        self.records_warnings = False  # the test's code names warnings: the program's are sent back
        self.decimal_context = _decimal_key()  # decimal's context as the program's process has it from this side
        self.kept: dict[int, object] = {}  # the test's mutable values the program keeps (a Logger's sink), by key
        self.kept_sent: dict[int, object] = {}  # each as the program's process last had it (see _send_kept)
        self.test_objects: list = []  # objects of the test's own classes the program was handed (see _test_object)
        self.test_object_index: dict[int, int] = {}
        self.test_object_access: dict[int, int] = {}  # their attribute callbacks
        self.test_object_order: int | None = None  # the callback ordering them (see _order_of_test_objects)
        self.state_depth = 0  # nested field comparisons of program objects in progress (see same_state)
        self.compared = 0
        self.untrusted = 0
        self.sizes = dict.fromkeys(wire.SIZE_KEYS, 0)

    # values both ways
    def encode(self, value):
        return wire.Encoder(self.task_classes, self._unknown, extra_classes=wire.SENT_CLASSES).encode(value)

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
        comparison = _cmp_key_comparison(value)
        if comparison is not None:
            return ["ck", self._unknown(comparison)]  # sorted(items, key=cmp_to_key(the test's cmp))
        if _test_function(value) or _test_method(value):
            # one callable, one callback: the program's on(handler) then off(handler) finds the same object (a bound
            # method is made anew at each access, so it is known by its object and function)
            owner = getattr(value, "__self__", None)
            key = id(value) if owner is None else (id(owner), id(getattr(value, "__func__", None)), value.__name__)
            index = self.callback_index.get(key)
            if index is not None:
                return ["cb", index]
            self.callback_index[key] = len(self.callbacks)
            self.callbacks.append(value)
            # its names and docstring are read there as here (functools.wraps copies them onto a decorator's wrapper)
            names = [getattr(value, name, None) for name in ("__name__", "__qualname__", "__doc__")]
            return [
                "cb",
                len(self.callbacks) - 1,
                *(text[:MESSAGE_CHARS] if type(text) is str else None for text in names),
            ]
        if _test_instance(value):
            return self._test_object(value)
        raise wire.BadValue(
            f"a {type(value).__name__} of the test cannot be sent to the program (only its own "
            f"functions and values travel)"
        )

    def _test_object(self, obj) -> list:
        """``["jo", index, class name]``: an object of a class the test defines (a check's ``Box``), which stays here;
        the program reads and sets its public attributes, and calls its methods, through a callback (as in one
        process, it reaches what the object holds, nothing else of the judge's)."""
        index = self.test_object_index.get(id(obj))
        if index is None:
            self.test_objects.append(obj)
            index = self.test_object_index[id(obj)] = len(self.test_objects) - 1

            def access(name, *value):
                if type(name) is not str or not name.isidentifier() or name.startswith("_") or len(value) > 1:
                    raise AttributeError(f"{str(name)[:40]!r}: only the public attributes of a test's object are read")
                if value:
                    setattr(obj, name, value[0])
                    return None
                return getattr(obj, name)

            self.callbacks.append(access)
            self.test_object_access[index] = len(self.callbacks) - 1
        if self.test_object_order is None:
            self.callbacks.append(_order_of_test_objects)
            self.test_object_order = len(self.callbacks) - 1
        return ["jo", index, self.test_object_access[index], type(obj).__name__[:100], self.test_object_order]

    def _value_of_iterator(self, iterator):
        """An iterator of the test (a generator expression as an argument) travels as the items it yields: all of
        them when they are few, else the first ones and a callback for the rest, taken as the program asks for
        them (``itertools.count()`` has no end)."""
        items = list(itertools.islice(iterator, wire.BATCH_LIMIT + 1))
        encoder = wire.Encoder(self.task_classes, self._unknown, extra_classes=wire.SENT_CLASSES)
        encoded = [encoder._value(item, 1) for item in items]
        if len(items) <= wire.BATCH_LIMIT:
            return ["it", encoded]

        def more(count):
            if type(count) is not int or not 0 < count <= wire.LIMITS["elements"]:
                raise ValueError("an iterator's items are asked for in batches of at least one")
            return list(itertools.islice(iterator, count))

        self.callbacks.append(more)
        return ["ci", encoded, len(self.callbacks) - 1]

    def iterator(self, remote: "Remote") -> "RemoteIterator":
        handle = _handle(remote)
        if handle not in self.iterators:
            self.iterators[handle] = RemoteIterator(remote)
        return self.iterators[handle]

    def decode(self, encoded, names: bool = False, originals: list | None = None, original_objects: list | None = None):
        """A value the program sent. ``names``: an answer to the names request, the only one where a module
        or a module's object (``["mod", ...]``, ``["std", ...]``) may stand for what the program imported.
        ``originals``: the containers of the call's arguments, which the value may name (``wire.Decoder``)."""
        decoder = wire.Decoder(
            self.task_classes,
            self._remote if names else self._remote_value,
            kept=self._kept_value,
            originals=originals,
            original_objects=original_objects,
        )
        value = decoder.decode(encoded)
        for key in wire.SIZE_KEYS:
            self.sizes[key] = max(self.sizes[key], getattr(decoder, key))
        return value

    def _kept_value(self, handle: list, value):
        """An object of the program's own subclass of a builtin: its handle where the task's code names its class
        (``Stack(list)``'s ``push``, an ``IntEnum``'s ``.name``), else the builtin value it holds, as before (a
        class the task never names cannot stand for a builtin with its own ``__eq__`` or ``startswith``)."""
        if not (len(handle) >= 3 and type(handle[2]) is str):
            raise wire.BadValue("malformed handle")
        if handle[2] not in self.program_names and handle[2] not in self.program_globals:
            return value
        remote = self._remote(handle, type(value))
        if object.__getattribute__(remote, "_diffugrpo_value_type") is not type(value):
            raise wire.BadValue("a program object's builtin value changed its type")
        return remote

    def _remote_value(self, encoded):
        if encoded[0] in ("mod", "std"):
            raise wire.BadValue("a module travels only as what a program's name was imported as")
        return self._remote(encoded)

    def _remote(self, encoded, value_type: type | None = None):
        tag = encoded[0]
        if tag == "jo" and len(encoded) == 2 and type(encoded[1]) is int and 0 <= encoded[1] < len(self.test_objects):
            return self.test_objects[encoded[1]]  # the test's own object, handed back
        if tag == "cb" and len(encoded) == 2 and type(encoded[1]) is int and 0 <= encoded[1] < len(self.callbacks):
            return self.callbacks[encoded[1]]  # the test's own callable, handed back (a lambda kept in a dict)
        if tag == "exc" and len(encoded) == 3 and type(encoded[1]) is str and type(encoded[2]) is str:
            return program_exception_class(encoded[1], encoded[2])
        if tag in ("mod", "std"):
            return _module_object(encoded)
        if (
            tag != "h"
            or len(encoded) not in (4, 5)
            or type(encoded[1]) is not int
            or type(encoded[2]) is not str
            or not wire._is_list(encoded[3])
            or not set(map(str, encoded[3])) <= set(wire.CAPABILITIES)
            or (len(encoded) == 5 and not (wire._is_list(encoded[4]) and all(type(n) is str for n in encoded[4])))
        ):
            raise wire.BadValue("malformed handle")
        handle = encoded[1]
        if handle not in self.remotes:
            # The task's classes its object's class derives from (the preamble's Shape of a program's Circle)
            task_bases = tuple(self.task_classes[n] for n in dict.fromkeys(encoded[4]) if n in self.task_classes)
            cls = remote_class(frozenset(encoded[3]), encoded[2][:100], task_bases, value_type)
            self.remotes[handle] = cls(self, handle, encoded[2][:100])
        if encoded[2] == "coroutine" and "__await__" in encoded[3]:
            return _coroutine(self.remotes[handle])  # a real coroutine, for asyncio.run and create_task
        return self.remotes[handle]

    def ask(self, request):
        """The program's answer to ``request``, decoded; its exception re-raised here."""
        return self.answer(self._request(request))

    def _request(self, request):
        try:
            if self.kept:
                self._send_kept()
            return self.peer.request(request)
        except wire.WireClosed:
            raise ProgramEnded() from None
        except wire.BadValue as error:
            raise Unreadable(str(error)) from None

    def answer(self, answer):
        def read():
            if not wire._is_list(answer) or not answer or type(answer[0]) is not str:
                raise wire.BadValue("malformed answer")
            if answer[0] == "ok" and len(answer) in (2, 3, 4):
                if len(answer) >= 3:
                    self._kept_changed(answer[2])
                value = self.decode(answer[1])
                if len(answer) == 4:
                    return False, self._kept_attribute(answer[3], value)
                return False, value
            if answer[0] == "raise" and len(answer) in (3, 7) and type(answer[1]) is str and type(answer[2]) is str:
                if answer[1] == wire.OVER_LIMIT:
                    raise wire.BadValue(answer[2][:MESSAGE_CHARS])
                base, args, origin, state = answer[3:] if len(answer) == 7 else ("", None, None, None)
                arguments = self.decode(args) if args is not None else None
                arguments = tuple(arguments) if type(arguments) is list else None
                fields = self.decode(state) if state is not None else None
                own = self._task_exception(answer[1], origin, arguments, fields)
                if own is not None:
                    return True, own
                return True, program_exception(
                    answer[1][:100], answer[2][:MESSAGE_CHARS], base if type(base) is str else "", arguments, fields
                )
            raise wire.BadValue("malformed answer")

        raised, value = _readable(read)
        if raised:
            raise value
        return value

    def _task_exception(self, name: str, origin, arguments: tuple | None, fields) -> BaseException | None:
        """The program's exception as an instance of this side's own class of it: the task's class of that name
        (``except ValidationError`` with the preamble's class), else the standard-library class it names in a
        module the judge has loaded (``json.JSONDecodeError``), with its arguments and fields; None for any other
        (it arrives as a class of its name, :func:`program_exception`)."""
        cls = self.task_classes.get(name)
        if cls is None and wire._is_list(origin, 2) and all(type(part) is str for part in origin):
            module = sys.modules.get(origin[0])
            standard = origin[0] != "builtins" and origin[0].partition(".")[0] in sys.stdlib_module_names
            if module is not None and standard:  # a builtin one arrives by its name (program_exception_class)
                cls = wire._resolve_class(*origin) if hasattr(module, origin[1].partition(".")[0]) else None
        if not (isinstance(cls, type) and issubclass(cls, Exception)) or cls.__name__ in _NOT_PASSED_THROUGH:
            return None
        marked = _TASK_EXCEPTIONS.get(cls)
        if marked is None:
            try:  # marked as the program's, for the verdict, and still caught by `except` of the class
                marked = type(cls.__name__, (cls, FromProgram), {"__module__": cls.__module__})
                marked.__qualname__ = cls.__qualname__
            except Exception:  # noqa: BLE001 - a class that refuses subclasses
                return None
            _TASK_EXCEPTIONS[cls] = marked
        error = BaseException.__new__(marked)
        error.args = arguments if arguments is not None else ()
        _set_fields(error, fields)
        return error

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
        # decode_order: the memo numbers the arguments' containers as the program's decoder does (originals below)
        encoder = wire.Encoder(self.task_classes, self._unknown, extra_classes=wire.SENT_CLASSES, decode_order=True)
        try:  # one value, so what the arguments share they share in the program too
            arguments = encoder.encode([list(args), dict(kwargs)])
        except wire.BadValue as error:
            raise Unsendable(str(error)) from None
        answer = self._request(["call", handle, arguments, self._process_state()])
        if not (wire._is_list(answer, 6) and answer[0] == "ok"):
            return self.answer(answer)

        given = {"originals": encoder.containers, "original_objects": [obj for obj, _ in encoder.objects]}

        def read():
            self._mirror_back(answer[5])
            for position, state in answer[2]:
                target = (
                    args[position]
                    if type(position) is int and 0 <= position < len(args)
                    else (kwargs.get(position) if type(position) is str else None)
                )
                if target is not None:
                    _update_in_place(target, self.decode(state, **given))
            for name, state in answer[3]:
                if type(name) is str and name in self.program_globals:
                    self._update_global(name, self.decode(state))
            for position, key in answer[5].get("keeps", ()):  # arguments the program now holds on to
                target = args[position] if type(position) is int and 0 <= position < len(args) else None
                if type(key) is int and isinstance(target, _KEPT_TYPES) and len(self.kept) < KEPT_LIMIT:
                    self.kept[key] = target
                    self._synced(key)
            self._kept_changed(answer[5].get("kept", []))
            same = answer[4]
            if type(same) is int and 0 <= same < len(args):
                return args[same]
            if type(same) is str and same in kwargs:
                return kwargs[same]
            if (
                wire._is_list(same, 2)
                and same[0] == "obj"
                and type(same[1]) is int
                and 0 <= same[1] < len(encoder.objects)
            ):
                return encoder.objects[same[1]][0]
            return self.decode(answer[1], **given)

        result = _readable(read)
        if handle in self.class_names and isinstance(result, Remote):
            self.made_by_test.add(_handle(result))  # an object the test built from a class it names (see Remote)
        return result

    def same_state(self, one: "Remote", other: "Remote") -> bool:
        """Whether two program objects the program calls equal hold equal fields (compared here, field by field;
        a field that is itself a program object by the same rule): an ``__eq__`` that says True to anything
        does not make two different objects equal. Past :data:`STATE_DEPTH` nested comparisons, not equal. Two
        objects with no field this process can see are not equal either: fields kept where the judge cannot read
        them (a module dict keyed by ``id``, a class-level ``__dict__`` property) would make any two "equal"."""
        if _handle(one) == _handle(other):
            return True
        if self.state_depth >= STATE_DEPTH:
            return False
        self.state_depth += 1
        try:
            return _readable(lambda: _equal_visible_states(one._op("state"), other._op("state")))
        finally:
            self.state_depth -= 1

    def _kept_attribute(self, key, value):
        """A program object's list, dict or set attribute, which the program's process now keeps under ``key``: the
        same object here each time it is read (``e.tags is e.tags``), and what the test does to it (``e.tags.append``,
        ``inv.items["apple"] = 3``) reaches the program's object before its next request, as in one process."""
        if type(key) is not int:
            raise wire.BadValue("malformed kept key")
        if key in self.kept:
            return self.kept[key]
        if isinstance(value, _KEPT_TYPES) and len(self.kept) < KEPT_LIMIT:
            self.kept[key] = value
            self._synced(key)
        return value

    def _send_kept(self) -> None:
        """What the test changed in the values the program keeps since the program's process last had them (the
        test appends to a ``Logger``'s sink between calls), sent before the next request, so both processes hold
        the same list as one process would. A value holding something only callbacks can send is left as it is."""
        changes = []
        for key, target in self.kept.items():
            try:
                now = self._plain_encoding(target)
            except wire.BadValue:
                continue
            if now != self.kept_sent.get(key):
                self.kept_sent[key] = now
                changes.append([key, now])
        if changes:
            self.answer(self.peer.request(["kept", changes]))

    def _plain_encoding(self, value):
        """``value`` encoded with the program's handles as handles and nothing else made here (no callback, no
        drawn iterator): encoding it again has no side effects."""

        def handle_only(item):
            if isinstance(item, Remote):
                return ["h", _handle(item)]
            raise wire.BadValue("not plain")

        return wire.Encoder(self.task_classes, handle_only, extra_classes=wire.SENT_CLASSES).encode(value)

    def _kept_changed(self, changes) -> None:
        """The test's values the program keeps (see ``ProgramSide._keep``) as a later request left them: a generator
        that appended to the test's list, a ``Logger`` whose sink is the test's."""
        if not wire._is_list(changes):
            raise wire.BadValue("malformed kept values")
        for change in changes:
            if not (wire._is_list(change, 2) and type(change[0]) is int and change[0] in self.kept):
                raise wire.BadValue("malformed kept value")
            _update_in_place(self.kept[change[0]], self.decode(change[1]))
            self._synced(change[0])

    def _synced(self, key: int) -> None:
        """A kept value as this side holds it is what the program's process holds."""
        try:
            self.kept_sent[key] = self._plain_encoding(self.kept[key])
        except wire.BadValue:
            self.kept_sent.pop(key, None)

    def _process_state(self) -> dict:
        """What the test set in this process that a call must see in the program's (as one process would):
        the recursion limit, ``random``'s state once the test has seeded it (see :func:`_watch_random`), whether
        stdout is redirected, the test's own ``input`` where it replaced Python's (called back), numpy's global
        generator once the test has seeded it, ``decimal``'s context once the test has changed it."""
        state = {"recursion_limit": sys.getrecursionlimit(), "stdout": sys.stdout is not _STDOUT[0]}
        if self.records_warnings:
            state["warnings"] = True  # a test that reads warnings gets the program's (see _reissue)
        random = sys.modules.get("random")
        if random is not None and _RANDOM_SEEDED:
            now = random.getstate()
            if now != self.random_state:
                state["random"] = self.encode(now)
                self.random_state = now
        made_here = self._test_classes()
        if made_here:
            state["test_classes"] = made_here
        if builtins.input is not _INPUT[0]:
            # the test replaced input (mock.patch('builtins.input', side_effect=[...])): the program's input() is it
            if self.input_callback is None or self.callbacks[self.input_callback] is not builtins.input:
                self.callbacks.append(builtins.input)
                self.input_callback = len(self.callbacks) - 1
            state["input"] = ["cb", self.input_callback]
        numpy_random = sys.modules.get("numpy.random") if _NUMPY_SEEDED else None
        if numpy_random is not None:
            # the legacy global generator the test seeded (np.random.seed): sent once it changed, so the program's
            # draws go on from there between the test's own seeds; they are not taken back (the test's next draws
            # start where its own state was)
            now = numpy_random.get_state()
            key = (now[1].tobytes(), *now[2:])
            if key != self.numpy_random_key:
                state["numpy_random"] = self.encode(now)
                self.numpy_random_key = key
        context = _decimal_key()
        if context != self.decimal_context:
            state["decimal"] = self.encode(sys.modules["decimal"].getcontext())
            self.decimal_context = context
        return state

    def _test_classes(self) -> list:
        """``[name, callback]`` for each record class the test's own code defines at its top level
        (:func:`record_classes`: not the task's, which the program's process has too, nor setup code's) not yet sent:
        the program builds its objects by calling it back (LeetCode's ``Node`` the test defines), as it would in one
        process, unless it defines that name itself. A class with any behaviour of its own (an ``Oracle.solve``, a
        table of cases) could answer for the program, so it is never sent."""
        made = []
        if not self.record_classes:
            return made
        for name, value in list(self.namespace.items()):
            if (
                isinstance(value, type)
                and value.__module__ == "__test__"
                and name in self.record_classes
                and name not in self.task_classes
                and name not in self.test_classes_sent
                and len(self.test_classes_sent) < KEPT_LIMIT
            ):
                self.callbacks.append(value)
                self.test_classes_sent.add(name)
                made.append([name, ["cb", len(self.callbacks) - 1, name, name, None]])
        return made

    def _mirror_back(self, after) -> None:
        """The call's effect on that state: what the program printed goes to the test's stdout (a
        ``redirect_stdout`` target), and ``random`` continues from where the program left it, if only by
        drawing from the state it was sent (:func:`_drawn_from`): a state it chose would choose the test's inputs."""
        if type(after) is not dict:
            raise wire.BadValue("malformed call state")
        printed = after.get("stdout")
        if type(printed) is str:
            sys.stdout.write(printed)
        for warned in after.get("warnings", ())[:64] if type(after.get("warnings")) is list else ():
            _reissue(warned)
        if "random" in after and "random" in sys.modules and self.random_state is not None:
            state = _drawn_from(self.random_state, self.decode(after["random"]))
            if state is None:
                raise Untrusted("the program left random's state where no draw from the state it was sent leads")
            _RANDOM_SETTERS["setstate"](state)
            self.random_state = state

    def _update_global(self, name: str, value) -> None:
        current = self.namespace.get(name)
        if type(current) is type(value) and isinstance(value, (list, dict, set, bytearray)):
            _update_in_place(current, value)  # the test may hold it under another name too
        else:
            self.namespace[name] = value


KEPT_LIMIT = 64  # the test's values one test's program may keep and have mirrored back


_KEPT_TYPES = (list, dict, set, bytearray)


_RANDOM_SEEDED: list = []  # not empty once the test (or its preamble) has seeded random or set its state


_RANDOM_SETTERS: dict = {}  # random's own seed and setstate, for the judge's own use


RANDOM_TWISTS = 100_000  # how many Mersenne Twister twists (624 words each) a call's draws are replayed over


_NUMPY_SEEDED: list = []  # not empty once the test has seeded numpy's global generator or set its state


def _watch_numpy_random() -> None:
    """Notes in :data:`_NUMPY_SEEDED` when the test calls ``np.random.seed`` or ``np.random.set_state`` (the rule
    :func:`_watch_random` follows for ``random``)."""
    try:
        import numpy.random as numpy_random
    except ImportError:
        return

    def noting(original, _name):
        def set_by_test(*args, **kwargs):
            _NUMPY_SEEDED.append(True)
            return original(*args, **kwargs)

        return set_by_test

    _wrap_once(numpy_random, ("seed", "set_state"), noting)


def _wrap_once(module, names: tuple, make) -> None:
    """Each of ``module``'s functions ``names`` replaced by ``make(original, name)``, once per process."""
    for name in names:
        original = getattr(module, name)
        if getattr(original, "_diffugrpo_watched", False):
            continue
        wrapper = make(original, name)
        wrapper._diffugrpo_watched = True
        setattr(module, name, wrapper)


def _watch_random() -> None:
    """Notes in :data:`_RANDOM_SEEDED` when the test seeds ``random`` or sets its state. Until then the program's
    process draws from its own state and keeps it: the test's unseeded state would tell the program the words the
    test drew (its inputs), and the program's state taken back would choose them."""
    import random

    if _RANDOM_SETTERS:
        return
    for name in ("seed", "setstate"):
        _RANDOM_SETTERS[name] = original = getattr(random, name)

        def set_by_test(*args, _original=original, **kwargs):
            _RANDOM_SEEDED.append(True)
            return _original(*args, **kwargs)

        setattr(random, name, set_by_test)


def _drawn_from(sent: tuple, back) -> tuple | None:
    """``back`` if drawing words from ``sent`` reaches it (replayed here, twist by twist), else None; a ``gauss``
    value it holds that was not sent is dropped (its draws cannot be told apart)."""
    import random

    try:
        version, words, gauss = back
        if version != sent[0] or type(words) is not tuple or len(words) != len(sent[1]):
            return None
        replay = random.Random()
        replay.setstate(sent)
        for _ in range(RANDOM_TWISTS):
            now = replay.getstate()[1]
            if now[:-1] == words[:-1]:
                if words[-1] < now[-1]:
                    return None
                if words[-1] > now[-1]:
                    replay.getrandbits(32 * (words[-1] - now[-1]))
                return (version, words, gauss if gauss == sent[2] else None) if replay.getstate()[1] == words else None
            replay.getrandbits(32 * (len(now) - now[-1]))  # the rest of this table's words and one more: a twist
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def _decimal_key():
    """``decimal``'s context as the test set it (its flags aside, which every operation sets); None while the test
    has not imported decimal."""
    decimal = sys.modules.get("decimal")
    if decimal is None:
        return None
    context = decimal.getcontext()
    key = (context.prec, context.rounding, context.Emin, context.Emax, context.capitals, context.clamp)
    default = decimal.DefaultContext
    same = key == (default.prec, default.rounding, default.Emin, default.Emax, default.capitals, default.clamp)
    return None if same and context.traps == default.traps else (*key, tuple(sorted(map(str, context.traps.items()))))


def _test_instance(value) -> bool:
    """An object of a class the test (or the task's code) defines, which has no reduced form that travels."""
    kind = type(value)
    return type(kind) is type and kind.__module__ == "__test__" and not isinstance(value, (Remote, BaseException))


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
    """Gives a mutable argument the state the program left it in (the judge holds its own copy). Only what the
    program's side reports as changeable (``ProgramSide._changeable``) is changed: a forged report naming an enum
    member, or a state that is the target itself, changes nothing."""
    import enum

    kind = type(target)
    if type(state) is not kind or state is target or isinstance(target, enum.Enum):
        return
    if kind in (list, bytearray):
        target[:] = state
    elif kind.__module__ == "numpy" and kind.__name__ == "ndarray":
        if state.shape == target.shape and state.dtype == target.dtype and target.flags.writeable:
            target[...] = state
    elif kind in (io.StringIO, io.BytesIO):
        # what the program wrote and where it left the position; the attributes stay the test's own (a program's
        # ``getvalue`` set on the buffer would answer for it)
        target.__setstate__((*state.__getstate__()[:-1], target.__getstate__()[-1]))
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


# Standard-library value classes a test may use with its import lost from the row (``Counter``, ``deque``): in a row
# without a reference, the judge's own, and ambiguous where the program defines the name (see Row.namespace).
STDLIB_VALUE_CLASSES = {
    **dict.fromkeys(("Counter", "OrderedDict", "defaultdict", "deque", "ChainMap"), "collections"),
    "Fraction": "fractions",
    "Decimal": "decimal",
    **dict.fromkeys(("date", "timedelta", "timezone"), "datetime"),
}


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
        self.task_methods = {
            entry[0]: frozenset(entry[1])
            for entry in spec.get("task_methods") or ()
            if len(entry) == 2 and type(entry[0]) is str
        }
        if "random" in (spec.get("preamble") or "") + (spec.get("helpers") or ""):
            _watch_random()
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
        forged ``abs``), and so is a standard-library value class the program defines (:data:`STDLIB_VALUE_CLASSES`,
        a ``Counter`` that builds the program's own expected value): it is noted in ``judging.ambiguous``, and bound
        to the program's object only with
        ``programs_builtins`` (the test must pass both ways). A ``check`` module's helpers are the task's, and so are an
        assert's beside a reference: one that neither the test, the preamble, the reference nor Python defines is
        :class:`NoGroundTruth`."""
        namespace = dict(self.base)
        judging.program_names = self.program_names
        judging.has_reference = self.has_reference
        judging.task_methods = self.task_methods
        wanted, builtin_named = [], []
        for name in free_names:
            if name in self.imports and name not in namespace:
                imported = _imported(*self.imports[name])
                if imported is not None:
                    namespace[name] = imported
                    continue
            if (
                name in STDLIB_VALUE_CLASSES
                and not self.has_reference
                and name not in namespace
                and name not in self.program_names
            ):
                builtin_named.append(name)  # Counter with its import lost from the row: Python's, or ambiguous
                namespace[name] = _imported(STDLIB_VALUE_CLASSES[name], name)
            elif name in self.program_names or (
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
        # with a reference the task's names are known: any other is a helper only the program would define (its
        # own is_sorted returning True), so the row has no ground truth for it
        if unfounded and (check or (self.has_reference and self.program_names)):
            raise NoGroundTruth(
                f"the {'check' if check else 'test'} uses {', '.join(unfounded)}, which the task's own code does "
                f"not define: no ground truth (the program is asked only for the names its reference defines)"
            )
        if wanted or builtin_named:
            found = judging.names(wanted + builtin_named)
            for name in wanted:
                if name not in found and name in BUILTIN_NAMES and name in self.program_names:
                    # the task's own max that the program does not define: not Python's max in its place
                    namespace[name] = _not_defined(name)
                if name in found:
                    namespace[name] = found[name]
                    judging.program_globals.add(name)
                    if (
                        isinstance(found[name], Remote)
                        and object.__getattribute__(found[name], "_diffugrpo_type") == "type"
                    ):
                        judging.class_names[_handle(found[name])] = name
            for name in builtin_named:
                python = namespace[name] if name in STDLIB_VALUE_CLASSES else getattr(builtins, name)
                if name in found and found[name] is not python:
                    judging.ambiguous.add(name)
                    if programs_builtins:
                        namespace[name] = found[name]
        if "type" in called_only and "type" not in namespace:
            namespace["type"] = _type_of  # a test that only calls type(x): type(obj) is Cls holds for the program's
        if "issubclass" in called_only and "issubclass" not in namespace:
            namespace["issubclass"] = _issubclass_of
        judging.namespace = namespace
        return namespace


def _watch_dataclasses() -> None:
    """``dataclasses.asdict`` and the others of ``sandbox_program.DATACLASS_FUNCTIONS``, given a program object, ask
    the program's process (where its dataclass is), as ``asdict(e) == {...}`` needs; any other call is Python's."""
    import dataclasses

    def asking(original, name):
        def asked(value, *args, **kwargs):
            if isinstance(value, Remote) and not args:
                return value._op("dataclass", name, kwargs)
            return original(value, *args, **kwargs)

        return asked

    _wrap_once(dataclasses, ("asdict", "astuple", "replace", "fields", "is_dataclass"), asking)


def _reissue(warned) -> None:
    """A warning the program issued during a call, issued here as from the program's file: the test's
    ``catch_warnings`` and filters see it (only a builtin warning class, by name)."""
    import warnings

    if not (wire._is_list(warned, 3) and type(warned[0]) is str and type(warned[1]) is str and type(warned[2]) is int):
        raise wire.BadValue("malformed warning")
    category = getattr(builtins, warned[0], None)
    if not (isinstance(category, type) and issubclass(category, Warning)):
        category = UserWarning
    warnings.warn_explicit(warned[1][:MESSAGE_CHARS], category, "solution.py", warned[2], module="solution")


def _order_of_test_objects(name, one, other):
    """``one < other`` (``<=``, ``>``, ``>=``) for an object of the test's own class that the program orders (heapq,
    sorted, min): the test's own operator, run here."""
    if name not in ("lt", "le", "gt", "ge"):
        raise TypeError(f"{str(name)[:20]!r} is not an ordering")
    return wire.BINARY_OPERATORS[name](one, other)


_KEY_WRAPPER = type(functools.cmp_to_key(len))


def _cmp_key_comparison(value):
    """The comparison a ``functools.cmp_to_key`` wrapper of the test's calls (the wrapper keeps it where only the
    garbage collector's view of its references shows it), if it is the test's own function; else None."""
    if type(value) is not _KEY_WRAPPER:
        return None
    import gc

    held = [item for item in gc.get_referents(value) if callable(item) and not isinstance(item, type)]
    return held[0] if len(held) == 1 and _test_function(held[0]) else None


_RECORD_CONVERSIONS = frozenset(("int", "float", "str", "bool", "list", "tuple", "dict", "set"))


def record_classes(code: str) -> frozenset[str]:
    """The classes ``code`` defines at its top level that only hold what they are given: a body of an ``__init__``
    (and a docstring) whose statements set fields of ``self`` from its parameters, constants, builtin conversions of
    them, literals and ``x if x is not None else []`` (LeetCode's ``Node``)."""
    if "class" not in code:
        return frozenset()  # most tests define none: no parse
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return frozenset()

    def plain(node, parameters) -> bool:
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            return node.id in parameters
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return all(plain(item, parameters) for item in node.elts)
        if isinstance(node, ast.Dict):
            return all(item is not None and plain(item, parameters) for item in (*node.keys, *node.values))
        if isinstance(node, ast.Call):
            return (
                isinstance(node.func, ast.Name)
                and node.func.id in _RECORD_CONVERSIONS
                and not node.keywords
                and all(plain(item, parameters) for item in node.args)
            )
        if isinstance(node, ast.IfExp):
            return all(plain(part, parameters) for part in (node.test, node.body, node.orelse))
        if isinstance(node, ast.BoolOp):
            return all(plain(item, parameters) for item in node.values)
        if isinstance(node, ast.Compare):
            return isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) and all(
                plain(item, parameters) for item in (node.left, *node.comparators)
            )
        return False

    def record(node: ast.ClassDef) -> bool:
        if node.bases or node.keywords or node.decorator_list:
            return False
        body = [item for item in node.body if not (isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.FunctionDef) or body[0].name != "__init__":
            return False
        init = body[0]
        arguments = init.args
        if init.decorator_list or arguments.vararg or arguments.kwarg or not arguments.args:
            return False
        own = arguments.args[0].arg
        parameters = {item.arg for item in (*arguments.args[1:], *arguments.kwonlyargs)}
        if not all(plain(default, set()) for default in (*arguments.defaults, *arguments.kw_defaults) if default):
            return False
        for statement in init.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else [getattr(statement, "target", None)]
            if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
                return False
            for target in targets:
                fields = target.elts if isinstance(target, ast.Tuple) else [target]
                if not all(
                    isinstance(field, ast.Attribute) and isinstance(field.value, ast.Name) and field.value.id == own
                    for field in fields
                ):
                    return False
            if not plain(statement.value, parameters):
                return False
        return True

    return frozenset(node.name for node in tree.body if isinstance(node, ast.ClassDef) and record(node))


def _not_defined(name: str):
    """What a test gets for a name of the task's that the program does not define, where Python has a builtin of that
    name: calling it raises the ``NameError`` a program without it would have met."""

    def missing(*_args, **_kwargs):
        raise NameError(f"name {name!r} is not defined (the task's own {name}, which the program does not define)")

    return missing


def _type_of(value, *rest):
    """``type`` for a test that only ever calls it: a program object's type is the program's class, as the handle the
    test holds for it (``type(obj) is Cls``, ``type(obj) == Cls``); any other call is Python's own ``type``."""
    if not rest and isinstance(value, Remote):
        kind = value._op("type")  # type(), which a __class__ property does not change
        # only a class of the program's own: an object of a builtin's subclass is still not of the builtin
        return kind if isinstance(kind, Remote) else builtins.type(value)
    return builtins.type(value, *rest)


def _issubclass_of(cls, classinfo) -> bool:
    """``issubclass`` for a test that only ever calls it: a program class is asked of the program's process, where the
    task's classes and Python's are the same ones it derives from (``issubclass(Dog, Animal)``); any other call is
    Python's own. A class relation costs an honest program nothing to make true, so the program's answer is taken."""
    if not isinstance(cls, Remote):
        return builtins.issubclass(cls, classinfo)
    if object.__getattribute__(cls, "_diffugrpo_type") != "type":
        raise TypeError("issubclass() arg 1 must be a class")
    for info in classinfo if type(classinfo) is tuple else (classinfo,):
        answer = cls._op("issubclass", info)
        if type(answer) is not bool:
            raise TypeError(f"issubclass of a program class returned {type(answer).__name__}")
        if answer:
            return True
    return False


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
        judging.records_warnings = "warnings" in code
        judging.record_classes = record_classes(code)
        if "dataclasses" in code:
            _watch_dataclasses()
        if "random" in code:
            _watch_random()
            if "numpy" in code or "numpy" in sys.modules:
                _watch_numpy_random()
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
