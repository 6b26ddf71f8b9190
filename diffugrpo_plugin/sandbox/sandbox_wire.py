"""The wire between a program and its judge: values as tagged JSON, length-prefixed frames, calls both ways.

Both sides of a test import this file inside the sandbox (standard library only; nothing from
diffugrpo is visible there). The program's side (:mod:`sandbox_launcher`) answers the judge's
requests in the program's namespace; the judge's side (:mod:`sandbox_judge`) runs the test's own
code and turns every answer back into real Python values. What crosses is data:

* exact builtin values (a subclass travels as the builtin value it holds: an ``int`` subclass
  whose ``__eq__`` is always true arrives as the plain int; the program's own subclass travels as its
  handle and that value, ``hv``, and the judge keeps the handle only where the task names the class);
* the well-known value types of the standard library and numpy, rebuilt with the real classes
  (``Fraction``, ``Decimal``, ``deque``, ``Counter``, ``OrderedDict``, ``defaultdict``, ``range``,
  dict views, ``bytearray``, ``date``/``datetime``/``timedelta``, numpy scalars and arrays);
* instances of the task's own classes (the preamble's ``ListNode``, ``TreeNode``, ...), sent as
  their class's name and attributes in a flat table (a 10^5-node linked list is no deeper than one
  node) and rebuilt from the receiver's own copy of the class;
* shared and cyclic references inside one value (``["ref", k]``), so aliasing survives;
* anything else as a handle (``["h", id, type name, callable]``): an object that stays where it
  lives and is used through requests (``str``, ``len``, iteration, attributes, calls, ...).

Decoding is strict: a malformed or over-limit value raises :class:`BadValue` with a reason
(:data:`LIMITS`), never anything else, and never runs code of the side that wrote it.

Tags (first item of a JSON list): ``i`` int (hex), ``f`` float (hex), ``c`` complex, ``b`` bytes,
``ba`` bytearray, ``l`` list, ``t`` tuple, ``nt`` namedtuple, ``it`` an iterator of the test (its items),
``sl`` slice, ``mod``/``std`` a module or a module's object a program's name was imported as, ``s`` set, ``fs`` frozenset, ``d`` dict, ``r`` range,
``dq`` deque, ``od`` OrderedDict, ``ct`` Counter, ``dd`` defaultdict, ``dk``/``dv``/``di`` dict
views, ``fr`` Fraction, ``de`` Decimal, ``date``/``dtm``/``td`` datetime values, ``np``/``nps``/
``npo`` numpy array, scalar, object array, ``obj`` a task class instance (an index into the value's
``graph`` table), ``e`` a task enum member,
``ref`` a shared reference, ``h`` a handle, ``hv`` a handle with the builtin value its object holds, ``ci`` an
iterator of the test (its first items and a callback for the rest), ``jo`` an object of a class the test defines,
``red`` a value rebuilt from its reduced state, ``ty`` a class by name, ``fn`` a function by name, ``cb`` a
callable of the judge, ``exc`` an exception class of
the program (its name and nearest builtin base), ``bi`` a pure builtin type or function by name (``int``
given as an argument is the receiver's own ``int``).
"""

from __future__ import annotations

import binascii
import builtins
import collections
import copyreg
import operator
import os
import sys

MAX_FRAME_BYTES = 128 << 20
LIMITS = {
    "depth": 2000,  # nesting of one value (a 2000-deep list)
    "int_hex_digits": 1_000_000,  # an int of up to four million bits (1.2M decimal digits; factorial(10**5) has 456k)
    "elements": 4_000_000,  # items of all containers in one value
    "array_bytes": 64 << 20,  # the raw data of one numpy array
}
NUMPY_KINDS = "biufcSU?Mm"  # numbers, strings, booleans, datetime64 and timedelta64: raw bytes, no pointers
OVER_LIMIT = "ValueOverLimit"  # how the program's side says that its answer could not be encoded within LIMITS
BATCH_LIMIT = 1024  # items one iteration request may bring back
# A judge's verdict line, as the judge writes it and the harness checks it.
VERDICT_KEYS = ("index", "outcome", "detail", "compared", "untrusted", "sizes")
VERDICT_OUTCOMES = ("passed", "failed", "error", "memory", "ended", "judge_error")
SIZE_KEYS = ("elements", "depth", "int_hex_digits")  # the largest value of a test, against LIMITS
# Special methods a program object's type may have; its handle offers exactly those (``__hash__`` when its
# type is hashable), so hasattr(), callable() and the collections.abc checks answer as for the object.
CAPABILITIES = (
    "__iter__",
    "__next__",
    "__len__",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__contains__",
    "__call__",
    "__reversed__",
    "__enter__",
    "__exit__",
    "__hash__",
    "__await__",
    "__aiter__",
    "__anext__",
    "__aenter__",
    "__aexit__",
)


class BadValue(ValueError):
    """A value or frame that is malformed or over :data:`LIMITS`; its message says which."""


class WireClosed(EOFError):
    """The other side closed the connection (it ended, or was ended)."""


# --------------------------------------------------------------------------- JSON and frames


def _no_constant(name: str):
    raise ValueError(f"JSON constant {name} is not allowed")


class _ScannerSettings:
    """What CPython's C scanner reads from ``json.JSONDecoder``: plain JSON, nothing hooked."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_no_constant)


def _json_codec():
    """JSON text to and from values through CPython's C accelerator alone: the ``json`` package would import
    ``re`` and ``enum``, 5 ms at the start of every sandbox, for the same two C functions. Elsewhere, ``json``."""
    try:
        import _json

        scan = _json.make_scanner(_ScannerSettings())
        encode = _json.make_encoder(
            None, _unencodable, _json.encode_basestring_ascii, None, ":", ",", False, False, False
        )
    except (ImportError, AttributeError, TypeError):
        import json

        return (lambda value: json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False), json.loads)

    def dumps(value) -> str:
        return "".join(encode(value, 0))

    def loads(text: str):
        try:
            value, end = scan(text, 0)
        except (StopIteration, SystemError):  # the scanner reports a malformed document through json.decoder's
            raise ValueError("not JSON") from None  # error class; not imported, it fails with SystemError
        if end != len(text):
            raise ValueError("extra data after the JSON value")
        return value

    return dumps, loads


def _unencodable(value):
    raise TypeError(f"not JSON data: {type(value).__name__}")


json_dumps, json_loads = _json_codec()


def send_frame(fd: int, message) -> None:
    data = json_dumps(message).encode("ascii")
    if len(data) > MAX_FRAME_BYTES:
        raise BadValue(f"message of {len(data)} bytes over the {MAX_FRAME_BYTES}-byte limit")
    view = memoryview(len(data).to_bytes(8, "little") + data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        raise WireClosed("the other side is gone") from None


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireClosed("connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive_frame(fd: int):
    """The next message; :class:`WireClosed` at end of stream, :class:`BadValue` for anything malformed."""
    size = int.from_bytes(_read_exactly(fd, 8), "little")
    if size > MAX_FRAME_BYTES:
        raise BadValue(f"message of {size} bytes over the {MAX_FRAME_BYTES}-byte limit")
    data = _read_exactly(fd, size)
    try:
        return json_loads(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise BadValue(f"message is not JSON ({type(error).__name__})") from None


# --------------------------------------------------------------------------- encoding


def _hex_int(value: int) -> str:
    return int.__format__(value, "x")


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


class Encoder:
    """One value as tagged JSON. ``task_classes``: the task's own classes by name (sent as attributes);
    ``unknown(obj)``: the tag of any other object (a handle on the program's side)."""

    def __init__(
        self,
        task_classes: dict,
        unknown,
        kept=None,
        extra_classes: frozenset = frozenset(),
        originals: dict | None = None,
        decode_order: bool = False,
        original_objects: dict | None = None,
    ):
        self.classes = {cls: name for name, cls in task_classes.items()}
        self.decode_order = decode_order  # memo in the order the decoder meets the containers, even without a ref
        # id(container) -> its place among a call's arguments' containers: sent back as ``["orig", k, ...]``, so
        # the test's own container k is changed in place rather than replaced (a matrix row it holds stays its)
        self.originals = originals or {}
        self.original_objects = original_objects or {}  # id(task object) -> its place in the arguments' table
        self._unknown = unknown
        self._unknown_seen: dict[int, list] = {}  # what each object not sent as data became, once per value
        self.kept = kept  # kept(kind): whether an instance of a builtin's subclass stays a handle (``hv``)
        self.extra_classes = extra_classes  # (module, qualname) this side may send besides REBUILT_MODULES'
        self.memo: dict[int, int] = {}
        self.containers: list = []  # the memo's containers, in its order (the decoder's refs on the other side)
        self.memo_hits = 0
        self.alive: list = []  # keeps memoised objects alive, so their ids stay unique
        self.elements = 0
        self.objects: list = []  # the task objects met, in the order of their table entries
        self.object_index: dict[int, int] = {}

    def encode(self, value):
        """``value`` as tagged JSON; with task objects, ``["graph", table, root, order]``: each object once in the
        table, its attributes encoded there, and ``["obj", k]`` wherever it is met, so a linked list of any length
        is a flat table rather than a deep nesting (and shared or cyclic links come back as they were). The other
        side fills the objects' fields in ``order`` (an object after those its fields refer to: see
        :func:`_fill_order`) and decodes the root last; where a container is met twice (``["ref", k]``), the value is
        encoded again in that order, so that ``k`` counts the containers as the decoder meets them."""
        root = self._value(value, 0)
        if not self.objects:
            return root
        table = []
        while len(table) < len(self.objects):  # an entry's fields may meet objects not yet in the table
            table.append(self._entry(len(table)))
        order = _fill_order(table)
        if self.memo_hits or (self.decode_order and self.memo):
            self.memo.clear()
            self.containers.clear()
            self.memo_hits = self.elements = 0
            for index in order:
                table[index] = self._entry(index)
            root = self._value(value, 0)
        return ["graph", table, root, order]

    def _entry(self, index: int) -> list:
        obj, name = self.objects[index]
        attributes = object.__getattribute__(obj, "__dict__")
        entry = [name, [[key, self._value(item, 1)] for key, item in dict.items(attributes) if type(key) is str]]
        original = self.original_objects.get(id(obj))
        # an argument's task object goes back as itself (the test's node in the list the program returns)
        return entry if original is None else [*entry, original]

    def unknown(self, value):
        """``unknown(value)`` once per object: encoding a value twice (:meth:`encode`) must not draw an iterator twice."""
        seen = self._unknown_seen.get(id(value))
        if seen is None:
            seen = self._unknown_seen[id(value)] = self._unknown(value)
            self.alive.append(value)
        return seen

    def _sized(self, count: int) -> None:
        """Refuses a value over the element limit before spending time on it."""
        self.elements += count
        if self.elements > LIMITS["elements"]:
            raise BadValue(f"value has more than {LIMITS['elements']} elements (limit)")

    def _value(self, value, depth: int):
        if depth > LIMITS["depth"]:
            raise BadValue(f"value nested deeper than {LIMITS['depth']}")
        kind = type(value)
        if value is None or kind is bool:
            return value
        if kind is str:
            return value
        if kind is int:
            return ["i", _hex_int(value)]
        if kind is float:
            return ["f", float.hex(value)]
        special = self._special(value, kind, depth)
        if special is not None:
            return special
        named = _builtin_name(value)
        if named is not None:
            return ["bi", named]
        function = _function_ref(value)
        if function is not None:
            return ["fn", *function]
        if getattr(kind, "__module__", None) != "builtins" and self._class_ref(kind) is not None:
            reduced = self._reduced(value, kind, depth)  # a standard-library value type: rebuilt as itself
            if reduced is not None:
                return reduced
        if self.kept is not None and self.kept(kind):
            return self._kept(value, kind, depth)
        if issubclass(kind, str):
            return str.__str__(value)
        if issubclass(kind, bool):
            return bool(int.__index__(value))
        if issubclass(kind, int):
            return ["i", _hex_int(value)]
        if issubclass(kind, float):
            return ["f", float.hex(value)]
        if issubclass(kind, complex):
            return [
                "c",
                [
                    float.hex(complex.__getattribute__(value, "real")),
                    float.hex(complex.__getattribute__(value, "imag")),
                ],
            ]
        if issubclass(kind, bytes):
            return ["b", _b64(bytes(memoryview(value)))]
        if issubclass(kind, (tuple, frozenset, list, dict, set)):
            self._sized(len(value) if kind in (tuple, frozenset, list, dict, set) else 0)
        if issubclass(kind, tuple) and kind is not tuple and _is_namedtuple(kind):
            return [
                "nt",
                kind.__name__,
                list(kind._fields),
                [self._value(item, depth + 1) for item in tuple.__iter__(value)],
            ]
        if issubclass(kind, tuple):
            return ["t", [self._value(item, depth + 1) for item in tuple.__iter__(value)]]
        if issubclass(kind, frozenset):
            return ["fs", [self._value(item, depth + 1) for item in frozenset.__iter__(value)]]
        container = self._container(value, kind, depth)
        if container is not None:
            return container
        if isinstance(value, type):
            ref = self._class_ref(value)
            if ref is not None and (ref[0] == "task" or ref[1] != "builtins"):
                # a task class (the preamble's Animal in issubclass(Dog, Animal), or in Dog.__mro__) is each side's
                # own copy of it; a standard-library value class goes by name (a decimal context's trap classes);
                # never a builtin exception, which from the program stands for its own class
                return ["ty", ref]
        reduced = self._reduced(value, kind, depth)
        return self.unknown(value) if reduced is None else reduced

    def _kept(self, value, kind, depth: int) -> list:
        """``["hv", handle, value]``: an object of a builtin's subclass that the program defines (a ``Stack(list)``,
        an ``IntEnum`` member), as its handle (its methods stay its own) and the builtin value it holds (what the
        judge compares, and what it takes instead where the task never names the class)."""
        base = next(base for base in kind.__mro__ if base in KEPT_BASES)
        return ["hv", self.unknown(value), self._value(_plain_value(value, base), depth + 1)]

    def _remember(self, value) -> list | None:
        """``["ref", k]`` when this mutable object was already sent in this value, else registers it."""
        key = id(value)
        if key in self.memo:
            self.memo_hits += 1
            return ["ref", self.memo[key]]
        self.memo[key] = len(self.memo)
        self.containers.append(value)
        self.alive.append(value)
        return None

    def _container(self, value, kind, depth: int):
        """Mutable builtins (and their subclasses): registered first, so cycles and aliases come back."""
        for base, tag in ((list, "l"), (dict, "d"), (set, "s"), (bytearray, "ba")):
            if issubclass(kind, base):
                seen = self._remember(value)
                if seen is not None:
                    return seen
                original = self.originals.get(id(value)) if kind is base else None
                if original is not None:
                    return ["orig", original, self._container_items(value, tag, depth)]
                return self._container_items(value, tag, depth)
        return None

    def _container_items(self, value, tag: str, depth: int) -> list:
        if tag == "l":
            return ["l", [self._value(item, depth + 1) for item in list.__iter__(value)]]
        if tag == "s":
            return ["s", [self._value(item, depth + 1) for item in set.__iter__(value)]]
        if tag == "ba":
            return ["ba", _b64(bytes(memoryview(value)))]
        return ["d", self._pairs(dict.items(value), depth)]

    def _pairs(self, items, depth: int) -> list:
        return [[self._value(key, depth + 1), self._value(item, depth + 1)] for key, item in items]

    def _special(self, value, kind, depth: int):
        """Standard-library and numpy value types, and the task's own classes; None for anything else."""
        name = self.classes.get(kind)
        if name is not None:
            return self._task_object(value, name, depth)
        module = getattr(kind, "__module__", "")
        if module == "collections":
            return self._collections(value, kind, depth)
        if kind is slice:
            return ["sl", [self._value(part, depth + 1) for part in (value.start, value.stop, value.step)]]
        if kind is range:
            return ["r", [_hex_int(value.start), _hex_int(value.stop), _hex_int(value.step)]]
        if module == "builtins" and kind.__name__ in ("dict_keys", "dict_values", "dict_items"):
            if kind.__name__ == "dict_items":
                return ["di", self._pairs(value, depth)]
            return ["dk" if kind.__name__ == "dict_keys" else "dv", [self._value(item, depth + 1) for item in value]]
        if module == "fractions" and kind.__name__ == "Fraction":
            return ["fr", [_hex_int(value.numerator), _hex_int(value.denominator)]]
        if module in ("decimal", "_decimal", "_pydecimal") and kind.__name__ == "Decimal":
            return ["de", str(value)]
        if module == "datetime":
            return self._datetime(value, kind)
        if module == "zoneinfo" and kind.__name__ == "ZoneInfo" and type(value.key) is str:
            return ["zi", value.key]  # a datetime's timezone: by its key, read from this side's tz database
        if module == "numpy" or module.startswith("numpy."):
            return self._numpy(value, depth)
        return None

    def _task_object(self, value, name: str, depth: int):
        import enum

        if isinstance(value, enum.Flag) and type(value.value) is int:
            return ["e", name, value.value]  # a combination (READ | WRITE) or none (Perm(0)) has no member name
        if isinstance(value, enum.Enum):
            return ["e", name, value.name]
        if not self._plain(type(value)):
            reduced = self._reduced(value, type(value), depth)
            return self.unknown(value) if reduced is None else reduced
        try:
            object.__getattribute__(value, "__dict__")
        except AttributeError:
            return self.unknown(value)
        index = self.object_index.get(id(value))
        if index is None:
            index = self.object_index[id(value)] = len(self.objects)
            self.objects.append((value, name))
            self._sized(1)
        return ["obj", index]

    def _plain(self, kind) -> bool:
        """Whether a task class's instances are their attributes alone (sent in the flat table): no builtin base
        (a ``list`` subclass holds items), no slots (a namedtuple), no pickling methods of its own."""
        return all(base is object or base in self.classes for base in kind.__mro__) and not any(
            name in vars(base)
            for base in kind.__mro__[:-1]
            for name in ("__slots__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__")
        )

    def _class_ref(self, kind) -> list | None:
        """``["task", name]`` for a task class, ``["cls", module, qualname]`` for a class the receiver may rebuild
        (see :data:`REBUILT_MODULES`); None for any other."""
        name = self.classes.get(kind)
        if name is not None:
            return ["task", name]
        if not isinstance(kind, type) or issubclass(kind, type):
            return None
        module, qualname = getattr(kind, "__module__", None), getattr(kind, "__qualname__", None)
        if type(module) is not str or type(qualname) is not str:
            return None
        if not (_rebuildable(module, qualname) or (module, qualname) in self.extra_classes):
            return None
        return ["cls", module, qualname] if _resolve_class(module, qualname) is kind else None

    def _reduced(self, value, kind, depth: int):
        """``["red", constructor, args, state, items, pairs]``: a value of a standard-library or task class as its
        class's ``__reduce_ex__`` describes it (what pickle would store), rebuilt by the receiver from its own
        copy of the class; None when the class or its reduction is not one the receiver may rebuild."""
        if isinstance(value, type) or self._class_ref(kind) is None:
            return None
        try:
            reduced = kind.__reduce_ex__(value, 4)
            if type(reduced) is tuple and reduced and self._class_ref(reduced[0]) is None:
                if reduced[0] not in (copyreg.__newobj__, copyreg._reconstructor):
                    reduced = kind.__reduce_ex__(value, 2)  # array.array's private reconstructor at 4, its class at 2
        except Exception:  # noqa: BLE001 - a value its class cannot reduce stays where it is
            return None
        if type(reduced) is not tuple or not 2 <= len(reduced) <= 5:
            return None
        function, args, *rest = reduced
        state, items, pairs = (*rest, None, None, None)[:3]
        if type(args) is not tuple:
            return None
        if function is copyreg.__newobj__ and args and isinstance(args[0], type):
            constructor, args = ["new", self._class_ref(args[0])], args[1:]
        elif function is copyreg._reconstructor and len(args) == 3 and args[1] in _RECONSTRUCTED_BASES:
            constructor, args = ["recon", self._class_ref(args[0]), args[1].__name__], args[2:]
        else:
            constructor = ["call", self._class_ref(function)]
        if constructor[1] is None:
            return None
        self._sized(1)
        return [
            "red",
            constructor,
            [self._argument(item, depth + 1) for item in args],
            None if state is None else self._value(state, depth + 1),
            None if items is None else [self._value(item, depth + 1) for item in items],
            None if pairs is None else self._pairs(pairs, depth),
        ]

    def _argument(self, value, depth: int):
        """A constructor's argument: a class travels as its name (``decimal.Context``'s trap classes)."""
        ref = self._class_ref(value) if isinstance(value, type) else None
        return ["ty", ref] if ref is not None else self._value(value, depth)

    def _collections(self, value, kind, depth: int):
        seen = None
        if kind in (collections.deque, collections.OrderedDict, collections.Counter, collections.defaultdict):
            seen = self._remember(value)
        if seen is not None:
            return seen
        if kind is collections.deque:
            return ["dq", [self._value(item, depth + 1) for item in value], value.maxlen]
        if kind is collections.OrderedDict:
            return ["od", self._pairs(dict.items(value), depth)]
        if kind is collections.Counter:
            return ["ct", self._pairs(dict.items(value), depth)]
        if kind is collections.defaultdict:
            factory = value.default_factory
            return [
                "dd",
                None if factory is None else self._value(factory, depth + 1),
                self._pairs(dict.items(value), depth),
            ]
        return None

    @staticmethod
    def _datetime(value, kind):
        if kind.__name__ == "timedelta":
            return ["td", [value.days, value.seconds, value.microseconds]]
        if kind.__name__ == "datetime" and value.tzinfo is None:
            return ["dtm", value.isoformat()]
        if kind.__name__ == "date":
            return ["date", value.isoformat()]
        return None

    def _numpy(self, value, depth: int):
        import numpy

        if isinstance(value, numpy.ndarray):
            if value.dtype.kind in NUMPY_KINDS and not value.dtype.fields:
                return ["np", value.dtype.str, list(value.shape), _b64(numpy.ascontiguousarray(value).tobytes())]
            if value.dtype.kind == "O":
                return ["npo", list(value.shape), [self._value(item, depth + 1) for item in value.ravel().tolist()]]
            return None
        if isinstance(value, numpy.generic) and value.dtype.kind in NUMPY_KINDS:
            return ["nps", value.dtype.str, _b64(numpy.asarray(value).tobytes())]
        return None


# --------------------------------------------------------------------------- decoding


_HEX_INT_DIGITS = frozenset("0123456789abcdef")
_ZONE_KEY_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+-")


def _fill_order(table: list) -> list[int]:
    """The order in which the object table's entries get their fields: an object after the objects its fields
    refer to (where no cycle says otherwise), so that a hash or comparison of one while its container is rebuilt
    (a frozenset of frozen dataclasses in a field) sees its fields."""
    references = []
    for entry in table:
        found, stack = [], [entry[1]]
        while stack:
            part = stack.pop()
            if type(part) is list:
                if len(part) == 2 and part[0] == "obj" and type(part[1]) is int and 0 <= part[1] < len(table):
                    found.append(part[1])
                else:
                    stack.extend(part)
        references.append(found)
    order, state = [], [0] * len(table)  # 0 unvisited, 1 on the path, 2 placed
    for root in range(len(table)):
        if state[root]:
            continue
        state[root], path = 1, [(root, iter(references[root]))]
        while path:
            index, pending = path[-1]
            child = next(pending, None)
            if child is None:
                path.pop()
                state[index] = 2
                order.append(index)
            elif not state[child]:
                state[child] = 1
                path.append((child, iter(references[child])))
    return order


def _refuse_shared(obj) -> None:
    """BadValue unless ``obj`` was just made for the value being decoded: only the caller's name and this call
    refer to it. A constructor may return an object others hold (an enum member, a singleton, a cached instance),
    and setting the sent state on it would change it for everyone (the judge's own ``Color.RED`` for every later
    test); CPython's reference count says so whatever the class."""
    import enum

    if isinstance(obj, enum.Enum) or sys.getrefcount(obj) > 3:  # the caller's name, this argument, getrefcount's
        raise BadValue(f"a {type(obj).__name__} that already exists cannot be given a state")


def _is_list(value, length: int | None = None) -> bool:
    return type(value) is list and (length is None or len(value) == length)


_ORIGINAL_TAGS = {list: "l", dict: "d", set: "s", bytearray: "ba"}


class Decoder:
    """Tagged JSON back into values, strictly. ``task_classes``: the task's classes by name (rebuilt
    from attributes); ``handle(item)``: what a ``h`` or ``cb`` tag becomes on this side."""

    def __init__(
        self,
        task_classes: dict,
        handle,
        builtin_names: frozenset | None = None,
        kept=None,
        extra_classes: frozenset = frozenset(),
        originals: list | None = None,
        original_objects: list | None = None,
    ):
        self.classes = task_classes
        self.original_objects = original_objects or []  # the task objects of the call's arguments, by table place
        self.handle = handle
        self.originals = originals or []  # the containers of the call's arguments, in the order they were sent
        self.kept = kept  # kept(handle, value): what an ``hv`` becomes here (else its value)
        self.extra_classes = extra_classes  # (module, qualname) rebuilt here besides REBUILT_MODULES' (the program's)
        self.builtins = PURE_BUILTINS if builtin_names is None else builtin_names  # may arrive by name
        self.refs: list = []
        self.elements = 0  # what the value took, against LIMITS (the judge reports the largest it met)
        self.depth = 0
        self.int_hex_digits = 0
        self.objects: list = []

    def decode(self, encoded):
        """The value ``encoded`` stands for (see :meth:`Encoder.encode`); :class:`BadValue` when it is not one."""
        if not (_is_list(encoded, 4) and encoded[0] == "graph"):
            return self._value(encoded, 0)
        table, order = self._count(encoded[1]), encoded[3]
        if not (_is_list(order, len(table)) and all(type(index) is int for index in order)):
            raise BadValue("malformed object table order")
        if sorted(order) != list(range(len(table))):
            raise BadValue("the object table's order is not one of its entries each")
        try:
            for entry in table:
                if not (_is_list(entry, 2) or (_is_list(entry, 3) and type(entry[2]) is int)):
                    raise BadValue("malformed object table")
                cls = self._task_class(entry[0])
                if len(entry) == 3:
                    obj = self._original_object(entry[2], cls)
                else:
                    obj = cls.__new__(cls)
                    _refuse_shared(obj)  # a class whose __new__ hands out one instance: its fields are not this value's
                self.objects.append(obj)
            for index in order:
                obj, entry = self.objects[index], table[index]
                state = object.__getattribute__(obj, "__dict__")
                if len(entry) == 3:
                    state.clear()  # an argument's object, given the fields it has now
                for name, value in self._pairs(entry[1], 1):
                    if type(name) is not str or name.startswith("__") or callable(getattr(type(obj), name, None)):
                        # an instance attribute named like one of the class's methods would replace it
                        raise BadValue(f"attribute {str(name)[:40]!r} of a {type(obj).__name__} is not a field")
                    state[name] = value
        except BadValue:
            raise
        except (TypeError, AttributeError) as error:
            raise BadValue(f"malformed task object ({type(error).__name__})") from None
        return self._value(encoded[2], 0)

    def _value(self, encoded, depth: int):
        if depth > LIMITS["depth"]:
            raise BadValue(f"value nested deeper than {LIMITS['depth']} (limit)")
        self.depth = max(self.depth, depth)
        if encoded is None or type(encoded) in (bool, str):
            return encoded
        if not _is_list(encoded) or not encoded or type(encoded[0]) is not str:
            raise BadValue(f"malformed value {str(encoded)[:60]!r}")
        tag = encoded[0]
        method = _DECODERS.get(tag)
        if method is None:
            raise BadValue(f"unknown value tag {tag[:20]!r}")
        try:
            return method(self, encoded, depth + 1)
        except BadValue:
            raise
        except RecursionError:
            raise BadValue("value nested deeper than this side can rebuild") from None
        except (TypeError, ValueError, IndexError, KeyError, OverflowError, ArithmeticError) as error:
            raise BadValue(f"malformed {tag[:20]!r} value ({type(error).__name__}: {str(error)[:100]})") from None

    def _count(self, items) -> list:
        if not _is_list(items):
            raise BadValue("container items must be a list")
        self.elements += len(items)
        if self.elements > LIMITS["elements"]:
            raise BadValue(f"value has more than {LIMITS['elements']} elements (limit)")
        return items

    def _items(self, items, depth: int) -> list:
        return [self._value(item, depth) for item in self._count(items)]

    def _pairs(self, pairs, depth: int) -> list:
        out = []
        for pair in self._count(pairs):
            if not _is_list(pair, 2):
                raise BadValue("a mapping's items must be [key, value] pairs")
            out.append((self._value(pair[0], depth), self._value(pair[1], depth)))
        return out

    def _register(self, value):
        self.refs.append(value)
        return value

    def int_(self, encoded, depth):
        value = _int(encoded[1])
        self.int_hex_digits = max(self.int_hex_digits, len(encoded[1]))
        return value

    def float_(self, encoded, depth):
        return _float(encoded[1])

    def complex_(self, encoded, depth):
        parts = encoded[1]
        if not _is_list(parts, 2):
            raise BadValue("complex needs [real, imag]")
        return complex(_float(parts[0]), _float(parts[1]))

    def bytes_(self, encoded, depth):
        return _unb64(encoded[1])

    def bytearray_(self, encoded, depth):
        return self._register(bytearray(_unb64(encoded[1])))

    def list_(self, encoded, depth):
        out = self._register([])
        out.extend(self._items(encoded[1], depth))
        return out

    def _original_object(self, place: int, cls):
        if not 0 <= place < len(self.original_objects) or type(self.original_objects[place]) is not cls:
            raise BadValue("malformed reference to an argument's object")
        return self.original_objects[place]

    def original_(self, encoded, depth):
        """``["orig", k, container]``: the argument's container ``k`` as it is now, changed in place (see
        :class:`Encoder`'s ``originals``); only a list, dict, set or bytearray, given its own kind of contents."""
        if not (_is_list(encoded, 3) and type(encoded[1]) is int and 0 <= encoded[1] < len(self.originals)):
            raise BadValue("malformed reference to an argument's container")
        target, inner = self.originals[encoded[1]], encoded[2]
        tag = _ORIGINAL_TAGS.get(type(target))
        if tag is None or not (_is_list(inner, 2) and inner[0] == tag):
            raise BadValue("an argument's container came back as another kind")
        self._register(target)
        if tag == "ba":
            target[:] = _unb64(inner[1])
        elif tag == "l":
            target[:] = self._items(inner[1], depth)
        elif tag == "s":
            items = self._items(inner[1], depth)
            target.clear()
            target.update(items)
        else:
            pairs = self._pairs(inner[1], depth)
            target.clear()
            target.update(pairs)
        return target

    def tuple_(self, encoded, depth):
        return tuple(self._items(encoded[1], depth))

    def slice_(self, encoded, depth):
        return slice(*self._items(encoded[1], depth)[:3])

    def iterator_(self, encoded, depth):
        return iter(self._items(encoded[1], depth))

    def namedtuple_(self, encoded, depth):
        cls = _namedtuple_class(encoded[1], encoded[2])
        return cls(*self._items(encoded[3], depth))

    def set_(self, encoded, depth):
        out = self._register(set())
        out.update(self._items(encoded[1], depth))
        return out

    def frozenset_(self, encoded, depth):
        return frozenset(self._items(encoded[1], depth))

    def dict_(self, encoded, depth, kind=dict):
        out = self._register(kind())
        for key, value in self._pairs(encoded[1], depth):
            out[key] = value
        return out

    def ordered_(self, encoded, depth):
        return self.dict_(encoded, depth, collections.OrderedDict)

    def counter_(self, encoded, depth):
        return self.dict_(encoded, depth, collections.Counter)

    def defaultdict_(self, encoded, depth):
        out = self._register(collections.defaultdict())
        factory = None if encoded[1] is None else self._value(encoded[1], depth)
        if factory is not None and not callable(factory):
            raise BadValue("a defaultdict's factory must be callable")
        out.default_factory = factory
        out.update(self._pairs(encoded[2], depth))
        return out

    def deque_(self, encoded, depth):
        maxlen = encoded[2] if len(encoded) > 2 else None
        if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
            raise BadValue("deque maxlen must be a non-negative int")
        out = self._register(collections.deque(maxlen=maxlen))
        out.extend(self._items(encoded[1], depth))
        return out

    def range_(self, encoded, depth):
        start, stop, step = (_int(part) for part in encoded[1])
        return range(start, stop, step)

    def view_(self, encoded, depth):
        tag, items = encoded[0], encoded[1]
        if tag == "di":
            return dict(self._pairs(items, depth)).items()
        values = self._items(items, depth)
        if tag == "dk":
            return dict.fromkeys(values).keys()
        return dict(enumerate(values)).values()

    def fraction_(self, encoded, depth):
        import fractions

        numerator, denominator = (_int(part) for part in encoded[1])
        return fractions.Fraction(numerator, denominator)

    def decimal_(self, encoded, depth):
        import decimal

        text = encoded[1]
        if type(text) is not str or len(text) > LIMITS["int_hex_digits"]:
            raise BadValue("malformed Decimal")
        return decimal.Decimal(text)

    def datetime_(self, encoded, depth):
        import datetime

        tag, payload = encoded[0], encoded[1]
        if tag == "td":
            days, seconds, microseconds = payload
            return datetime.timedelta(
                days=_small_int(days), seconds=_small_int(seconds), microseconds=_small_int(microseconds)
            )
        if type(payload) is not str or len(payload) > 40:
            raise BadValue("malformed date")
        return (datetime.date if tag == "date" else datetime.datetime).fromisoformat(payload)

    def zoneinfo_(self, encoded, depth):
        import zoneinfo

        key = encoded[1]
        parts = key.split("/") if type(key) is str and len(key) <= 64 else [""]
        if not all(part and _ZONE_KEY_CHARACTERS.issuperset(part) for part in parts):
            raise BadValue("malformed time zone")
        try:
            return zoneinfo.ZoneInfo(key)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            raise BadValue(f"time zone {key!r} is not known here") from None

    def numpy_(self, encoded, depth):
        import numpy

        tag = encoded[0]
        if tag == "npo":
            shape = _shape(encoded[1])
            flat = numpy.empty(len(self._count(encoded[2])), dtype=object)
            for position, item in enumerate(encoded[2]):
                flat[position] = self._value(item, depth)
            return flat.reshape(shape)
        dtype = numpy.dtype(_dtype_text(encoded[1]))
        if dtype.kind not in NUMPY_KINDS:
            raise BadValue("numpy dtype not allowed")
        if tag == "nps":
            raw = _unb64(encoded[2])
            return numpy.frombuffer(raw, dtype=dtype)[0].copy() if len(raw) == dtype.itemsize else _bad("scalar size")
        shape = _shape(encoded[2])
        raw = _unb64(encoded[3])
        return numpy.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def task_enum_(self, encoded, depth):
        import enum

        cls = self._task_class(encoded[1])
        try:
            if isinstance(cls, enum.EnumMeta) and issubclass(cls, enum.Flag) and type(encoded[2]) is int:
                return cls(encoded[2])  # the class's own rule for which bits make a value
            return cls[encoded[2]]
        except (KeyError, ValueError, TypeError):
            raise BadValue(f"{str(encoded[2])[:40]} is no value of {encoded[1][:40]}") from None

    def task_object_(self, encoded, depth):
        index = encoded[1]
        if type(index) is not int or not 0 <= index < len(self.objects):
            raise BadValue("reference to an object not in the table")
        return self.objects[index]

    def _task_class(self, name):
        cls = self.classes.get(name) if type(name) is str else None
        if cls is None:
            raise BadValue(f"no task class named {str(name)[:40]!r} on this side")
        return cls

    def reduced_(self, encoded, depth):
        """A value rebuilt from its reduced state (see :meth:`Encoder._reduced`) with this side's own class: its
        constructor, then its state as pickle would set it."""
        if not _is_list(encoded, 6) or not _is_list(encoded[1]) or len(encoded[1]) not in (2, 3):
            raise BadValue("malformed reduced value")
        how, cls = encoded[1][0], self._class(encoded[1][1])
        arguments = self._items(encoded[2], depth)
        try:
            if how == "call":
                obj = cls(*arguments)
            elif how == "new":
                obj = cls.__new__(cls, *arguments)
            elif how == "recon" and len(arguments) == 1 and encoded[1][2] in _RECONSTRUCTED_BASES_BY_NAME:
                obj = copyreg._reconstructor(cls, _RECONSTRUCTED_BASES_BY_NAME[encoded[1][2]], arguments[0])
            else:
                raise BadValue("malformed reduced value")
            if encoded[3] is not None or encoded[4] is not None or encoded[5] is not None:
                _refuse_shared(obj)  # an enum member, a cached instance: its state is not this value's to set
            if encoded[3] is not None:
                self._set_state(obj, self._value(encoded[3], depth))
            if encoded[4] is not None:
                items = self._items(encoded[4], depth)
                obj.extend(items) if hasattr(obj, "extend") else [obj.append(item) for item in items]
            if encoded[5] is not None:
                for key, value in self._pairs(encoded[5], depth):
                    obj[key] = value
        except (BadValue, RecursionError):
            raise
        except Exception as error:  # noqa: BLE001 - the class refused the state it was sent
            raise BadValue(
                f"a {cls.__name__} could not be rebuilt ({type(error).__name__}: {str(error)[:100]})"
            ) from None
        return obj

    @staticmethod
    def _set_state(obj, state) -> None:
        """Pickle's way: the class's ``__setstate__``, else ``(attributes, slots)`` set as fields."""
        setstate = getattr(obj, "__setstate__", None)
        if setstate is not None:
            setstate(state)
            return
        slots = None
        if type(state) is tuple and len(state) == 2:
            state, slots = state
        for part in (state, slots):
            if part is None:
                continue
            if type(part) is not dict:
                raise BadValue(f"the state of a {type(obj).__name__} must be a dict of fields")
            for name, value in part.items():
                if type(name) is not str or name.startswith("__") or callable(getattr(type(obj), name, None)):
                    raise BadValue(f"attribute {str(name)[:40]!r} of a {type(obj).__name__} is not a field")
                if part is state:
                    object.__getattribute__(obj, "__dict__")[name] = value
                else:
                    object.__setattr__(obj, name, value)

    def function_(self, encoded, depth):
        if not (_is_list(encoded, 3) and type(encoded[1]) is str and type(encoded[2]) is str):
            raise BadValue("malformed function reference")
        function = _resolve_function(encoded[1], encoded[2])
        if function is None:
            raise BadValue(f"the function {encoded[1][:40]}.{encoded[2][:40]} does not travel by name")
        return function

    def type_(self, encoded, depth):
        return self._class(encoded[1])

    def _class(self, ref):
        """The class a reduced value names: a task class, or one of :data:`REBUILT_MODULES`; BadValue for any other."""
        if _is_list(ref, 2) and ref[0] == "task":
            return self._task_class(ref[1])
        if not (_is_list(ref, 3) and ref[0] == "cls" and type(ref[1]) is str and type(ref[2]) is str):
            raise BadValue("malformed class reference")
        allowed = _rebuildable(ref[1], ref[2]) or (ref[1], ref[2]) in self.extra_classes
        cls = _resolve_class(ref[1], ref[2]) if allowed else None
        if cls is None:
            raise BadValue(f"a {ref[1][:40]}.{ref[2][:40]} is not rebuilt here (only standard-library value types are)")
        return cls

    def cmp_key_(self, encoded, depth):
        """``["ck", comparison]``: ``functools.cmp_to_key`` of the comparison (the test's, called back there)."""
        if not _is_list(encoded, 2) or not (_is_list(encoded[1]) and encoded[1] and encoded[1][0] == "cb"):
            raise BadValue("malformed comparison key")
        import functools

        return functools.cmp_to_key(self._value(encoded[1], depth))

    def ref_(self, encoded, depth):
        index = encoded[1]
        if type(index) is not int or not 0 <= index < len(self.refs):
            raise BadValue("reference to a value not yet sent")
        return self.refs[index]

    def handle_(self, encoded, depth):
        return self.handle(encoded)

    def kept_(self, encoded, depth):
        if not (_is_list(encoded, 3) and _is_list(encoded[1]) and encoded[1] and encoded[1][0] == "h"):
            raise BadValue("malformed kept value")
        value = self._value(encoded[2], depth)
        if type(value) not in KEPT_BASES:
            raise BadValue("a kept value must hold a builtin value")
        return value if self.kept is None else self.kept(encoded[1], value)

    def builtin_(self, encoded, depth):
        name = encoded[1]
        if type(name) is not str or name not in self.builtins:
            raise BadValue(f"the builtin {str(name)[:40]!r} does not travel (only pure types and functions do)")
        return getattr(builtins, name)


# The builtins that may travel by name: pure types and functions. Never exec, eval, compile, open, print,
# input, getattr and the like: a program that sent one would have the judge run it on the program's values.
# Builtin exception classes travel by name only from the judge (a test's ``pytest.raises``-style argument):
# from the program they arrive as the program's own classes, so no name of the program can stand for the
# test's own AssertionError in an ``except`` clause.
PURE_BUILTINS = frozenset(
    (
        "abs",
        "all",
        "any",
        "ascii",
        "bin",
        "bool",
        "bytearray",
        "bytes",
        "callable",
        "chr",
        "complex",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "format",
        "frozenset",
        "hash",
        "hex",
        "int",
        "isinstance",
        "issubclass",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "next",
        "object",
        "oct",
        "ord",
        "pow",
        "range",
        "repr",
        "reversed",
        "round",
        "set",
        "slice",
        "sorted",
        "str",
        "sum",
        "tuple",
        "zip",
    )
)
BUILTIN_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
)
_BUILTIN_IDS = {id(getattr(builtins, name)): name for name in PURE_BUILTINS}


def _builtin_name(value) -> str | None:
    """The name of a pure builtin type or function (``int`` passed to MBPP 533's function), which travels by name."""
    name = _BUILTIN_IDS.get(id(value))
    return name if name is not None and getattr(builtins, name, None) is value else None


# Modules whose classes a value may be rebuilt as from its reduced state (``datetime.time``, ``UserList``,
# ``decimal.Context``): value types whose constructors only build the value. Never types, functools, os and
# the like, whose classes (a code object, a partial) would have the receiver run what the sender chose.
REBUILT_MODULES = frozenset(
    ("datetime", "collections", "fractions", "decimal", "enum", "array", "ipaddress", "uuid", "statistics", "string")
)
REBUILT_CLASSES = frozenset(
    (
        ("types", "SimpleNamespace"),
        ("time", "struct_time"),
        ("pathlib", "PurePath"),
        ("pathlib", "PurePosixPath"),
        ("pathlib", "PureWindowsPath"),
        ("pathlib", "PosixPath"),  # a concrete path: rebuilt from its parts, so nothing of the filesystem travels
        ("random", "Random"),  # a generator the test passes, rebuilt from its state (setstate draws nothing)
        ("_io", "StringIO"),  # an in-memory file: its text and position
        ("_io", "BytesIO"),
    )
)
# What the judge may send and the program's side rebuild, never the other way: callables the test passes
# (``itemgetter(1)``, ``partial(add, 3)``), which the program then runs on its own values. The judge's side never
# rebuilds one the program sends, so no callable of the program's choosing runs in the judge.
SENT_CLASSES = frozenset(
    (("operator", "itemgetter"), ("operator", "attrgetter"), ("operator", "methodcaller"), ("functools", "partial"))
)
# The builtin bases of the program's own classes kept as handles with their value (see ``Encoder._kept``).
KEPT_BASES = (int, float, complex, str, bytes, tuple, frozenset, list, dict, set, bytearray)


def _plain_value(value, base):
    """The builtin value an object of a subclass of ``base`` holds, read by the base's own methods."""
    if base in (list, tuple, set, frozenset):
        return base(base.__iter__(value))
    if base is dict:
        return dict(dict.items(value))
    if base is int:
        return int.__index__(value)
    if base is str:
        return str.__str__(value)
    if base is float:
        return float.__float__(value)
    if base is complex:
        return complex(complex.__getattribute__(value, "real"), complex.__getattribute__(value, "imag"))
    return base(memoryview(value))


_RECONSTRUCTED_BASES_BY_NAME = {kind.__name__: kind for kind in (object, list, dict, set, int, float, str, tuple)}
_RECONSTRUCTED_BASES = frozenset(_RECONSTRUCTED_BASES_BY_NAME.values())


def _rebuildable(module: str, qualname: str) -> bool:
    parts = qualname.split(".")
    if not all(part.isidentifier() and not part.startswith("_") for part in parts):
        return False
    if module == "builtins":
        return qualname in BUILTIN_EXCEPTIONS
    return module in REBUILT_MODULES or (module, qualname) in REBUILT_CLASSES


def _resolve_class(module: str, qualname: str):
    """This side's own class ``module.qualname`` (a class defined there, never one it re-exports); None if none."""
    try:
        value = __import__(module, fromlist=["_"])
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError, ValueError):
        return None
    if not isinstance(value, type) or issubclass(value, type) or getattr(value, "__module__", None) != module:
        return None
    return value


# Modules whose functions travel by name (``math.sqrt``, ``functools.reduce`` passed as an argument): pure
# functions of their arguments, so the receiver's own copy stands for the sender's.
FUNCTION_MODULES = frozenset(
    (
        "math",
        "cmath",
        "operator",
        "_operator",
        "functools",
        "_functools",
        "itertools",
        "heapq",
        "_heapq",
        "bisect",
        "_bisect",
        "statistics",
        "string",
        "unicodedata",
        "textwrap",
    )
)
# Builtin types whose methods travel by name (``str.upper``, ``list.sort`` given as a key or a callback).
METHOD_OWNERS = {kind.__name__: kind for kind in (str, bytes, list, dict, set, frozenset, tuple, int, float, complex)}


def _function_ref(value) -> tuple[str, str] | None:
    """``(module, qualified name)`` of a function of :data:`FUNCTION_MODULES` or a method of a builtin type, by
    which the receiver finds its own copy; None for anything else."""
    if isinstance(value, type) or not callable(value) or type(value).__module__ != "builtins":
        return None
    owner = getattr(value, "__objclass__", None)
    name = getattr(value, "__name__", None)
    if owner is not None:
        if type(name) is not str or METHOD_OWNERS.get(getattr(owner, "__name__", "")) is not owner:
            return None
        ref = ("builtins", f"{owner.__name__}.{name}")
    else:
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if type(module) is not str or type(qualname) is not str:
            return None
        ref = (module, qualname)
    return ref if _resolve_function(*ref) is value else None


def _resolve_function(module: str, qualname: str):
    """This side's own function ``module.qualname`` (see :func:`_function_ref`); None when it is not one that travels."""
    parts = qualname.split(".")
    if not all(part.isidentifier() and not part.startswith("_") for part in parts):
        return None
    if module == "builtins":
        if len(parts) != 2 or parts[0] not in METHOD_OWNERS:
            return None
        value = getattr(METHOD_OWNERS[parts[0]], parts[1], None)
        return value if getattr(value, "__objclass__", None) is METHOD_OWNERS[parts[0]] else None
    if module not in FUNCTION_MODULES or len(parts) != 1:
        return None
    try:
        value = getattr(__import__(module, fromlist=["_"]), parts[0])
    except (ImportError, AttributeError, ValueError):
        return None
    return value if callable(value) and not isinstance(value, type) and type(value).__module__ == "builtins" else None


def _is_namedtuple(kind) -> bool:
    fields = getattr(kind, "_fields", None)
    return type(fields) is tuple and all(type(field) is str for field in fields) and type(kind.__name__) is str


_NAMEDTUPLES: dict = {}


def _namedtuple_class(name, fields):
    """The receiver's own namedtuple class of that name and fields (made once): ``.x`` and ``_asdict()`` work,
    and it equals the plain tuple of its items, as the program's did."""
    if type(name) is not str or not _is_list(fields) or len(fields) > 256 or not all(type(f) is str for f in fields):
        raise BadValue("malformed namedtuple")
    key = (name, tuple(fields))
    if key not in _NAMEDTUPLES and len(_NAMEDTUPLES) >= 1024:
        raise BadValue("more than 1024 namedtuple classes")
    if key not in _NAMEDTUPLES:
        _NAMEDTUPLES[key] = collections.namedtuple(name, fields)
    return _NAMEDTUPLES[key]


def _bad(what: str):
    raise BadValue(f"malformed {what}")


def _int(text) -> int:
    if type(text) is not str:
        raise BadValue("an int travels as a hex string")
    digits = text[1:] if text.startswith("-") else text
    if not digits or len(digits) > LIMITS["int_hex_digits"]:
        raise BadValue(f"int of more than {LIMITS['int_hex_digits']} hex digits (limit)" if digits else "empty int")
    if not _HEX_INT_DIGITS.issuperset(digits):
        raise BadValue("malformed int")
    return int(text, 16)


def _small_int(value) -> int:
    if type(value) is not int or abs(value) > 10**12:
        raise BadValue("malformed small int")
    return value


def _float(text) -> float:
    if type(text) is not str or len(text) > 40:
        raise BadValue("a float travels as a short hex string")
    if text in ("inf", "-inf", "nan"):
        return float(text)
    try:
        return float.fromhex(text)
    except (ValueError, OverflowError):
        raise BadValue("malformed float") from None


def _unb64(text) -> bytes:
    if type(text) is not str or len(text) > LIMITS["array_bytes"] * 4 // 3 + 4:
        raise BadValue(f"bytes over the {LIMITS['array_bytes']}-byte limit" if type(text) is str else "malformed bytes")
    try:
        return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise BadValue("malformed bytes") from None


def _shape(shape) -> tuple:
    if not _is_list(shape) or len(shape) > 32 or any(type(n) is not int or not 0 <= n < 1 << 40 for n in shape):
        raise BadValue("malformed array shape")
    return tuple(shape)


def _dtype_text(text) -> str:
    if type(text) is not str or len(text) > 8 or not text.isascii() or text[:1] not in "<>|=":
        raise BadValue("malformed numpy dtype")
    return text


_DECODERS = {
    "i": Decoder.int_,
    "f": Decoder.float_,
    "c": Decoder.complex_,
    "b": Decoder.bytes_,
    "ba": Decoder.bytearray_,
    "l": Decoder.list_,
    "t": Decoder.tuple_,
    "nt": Decoder.namedtuple_,
    "it": Decoder.iterator_,
    "sl": Decoder.slice_,
    "mod": Decoder.handle_,
    "std": Decoder.handle_,
    "s": Decoder.set_,
    "fs": Decoder.frozenset_,
    "d": Decoder.dict_,
    "od": Decoder.ordered_,
    "ct": Decoder.counter_,
    "dd": Decoder.defaultdict_,
    "dq": Decoder.deque_,
    "r": Decoder.range_,
    "dk": Decoder.view_,
    "dv": Decoder.view_,
    "di": Decoder.view_,
    "fr": Decoder.fraction_,
    "de": Decoder.decimal_,
    "date": Decoder.datetime_,
    "dtm": Decoder.datetime_,
    "td": Decoder.datetime_,
    "zi": Decoder.zoneinfo_,
    "np": Decoder.numpy_,
    "nps": Decoder.numpy_,
    "npo": Decoder.numpy_,
    "obj": Decoder.task_object_,
    "e": Decoder.task_enum_,
    "ref": Decoder.ref_,
    "orig": Decoder.original_,
    "h": Decoder.handle_,
    "ci": Decoder.handle_,
    "jo": Decoder.handle_,
    "hv": Decoder.kept_,
    "cb": Decoder.handle_,
    "exc": Decoder.handle_,
    "bi": Decoder.builtin_,
    "red": Decoder.reduced_,
    "ty": Decoder.type_,
    "fn": Decoder.function_,
    "ck": Decoder.cmp_key_,
}


# --------------------------------------------------------------------------- calls both ways


class Peer:
    """One end of the connection (a pipe each way). :meth:`request` sends a request and waits for its
    answer, serving whatever the other side asks in the meantime (a callback of the judge while the
    program runs). ``serve(request) -> message`` answers one request from the other side."""

    def __init__(self, reading: int, writing: int, serve):
        self.reading = reading
        self.writing = writing
        self.serve = serve

    def request(self, message):
        send_frame(self.writing, ["ask", message])
        while True:
            reply = receive_frame(self.reading)
            if not _is_list(reply, 2) or type(reply[0]) is not str:
                raise BadValue("malformed message")
            kind, body = reply
            if kind == "ask":
                send_frame(self.writing, ["answer", self.serve(body)])
            elif kind == "answer":
                return body
            else:
                raise BadValue("malformed message")


# the binary operators either side applies by name to a value it holds (the judge to a builtin value a program
# object carries, the program to its own objects): one table, so both sides mean the same thing by a name
BINARY_OPERATORS = {
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
    "divmod": divmod,
}
# the in-place ones (``+=``), by the name of the operator they stand for: the judge asks for them between two of the
# program's objects, and the program applies its own (``operator.iadd`` falls back on ``+`` as ``+=`` does)
IN_PLACE_OPERATORS = {
    name: getattr(operator, f"i{name}")
    for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift", "rshift")
} | {"matmul": operator.imatmul}
