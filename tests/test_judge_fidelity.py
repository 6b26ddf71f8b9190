"""The judge by a general rule: values of the standard library and of the task's own classes are rebuilt from
their reduced state, functions travel by name, the test's process state reaches the program's process, and
the names the task's own code imports are the judge's. Each correct program scores 1.0; each forgery beside
it scores 0 (it passed before the rule).
"""

from __future__ import annotations

import pytest

from diffugrpo_plugin.rewards.code_tests import tests_from_row as spec_of  # a 'test*' name pytest would collect
from diffugrpo_plugin.rewards.test_runs import run_tests_many
from diffugrpo_plugin.sandbox import sandbox_wire as wire
from diffugrpo_plugin.sandbox.config import SandboxConfig
from diffugrpo_plugin.sandbox.host import Sandbox
from reward_support import TEST_UID_BASE, tight_sandbox

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=5.0, memory_mb=1024, max_concurrency=2, max_output_bytes=1 << 20)


def asserts(*tests: str, **row) -> dict:
    return {"test_cases": list(tests), **row}


def stdio(stdin: str, expected: str) -> dict:
    return {"inputs": [stdin], "outputs": [expected]}


def outcomes_of(box, cases: dict) -> dict:
    results = run_tests_many([(program, spec_of(row)) for program, row in cases.values()], box, cache=False)
    return dict(zip(cases, results))


def passed(outcomes) -> bool:
    return not isinstance(outcomes, Exception) and bool(outcomes) and all(outcome.passed for outcome in outcomes)


THREADED = (
    "import threading\n"
    "def f(k):\n"
    "    out = [0] * k\n"
    "    barrier = threading.Barrier(k)\n"
    "    def work(i):\n"
    "        rows = [list(range(200)) for _ in range(200)]\n"
    "        barrier.wait()\n"
    "        out[i] = sum(map(sum, rows))\n"
    "    threads = [threading.Thread(target=work, args=(i,)) for i in range(k)]\n"
    "    for thread in threads:\n"
    "        thread.start()\n"
    "    for thread in threads:\n"
    "        thread.join()\n"
    "    return out\n"
)

CORRECT = {
    # values rebuilt from their reduced state, both ways
    "a datetime.time returned": (
        "import datetime\ndef f():\n    return datetime.time(3, 4)\n",
        asserts("import datetime\nassert f() == datetime.time(3, 4)"),
    ),
    "a datetime.time passed": (
        "def f(t):\n    return t.hour\n",
        asserts("import datetime\nassert f(datetime.time(3, 4)) == 3"),
    ),
    "an aware datetime returned": (
        "import datetime\ndef f():\n    return datetime.datetime(2020, 1, 2, tzinfo=datetime.timezone.utc)\n",
        asserts("import datetime\nassert f() == datetime.datetime(2020, 1, 2, tzinfo=datetime.timezone.utc)"),
    ),
    "a UserList returned": (
        "from collections import UserList\ndef f():\n    return UserList([1, 2])\n",
        asserts("from collections import UserList\nr = f()\nassert r == UserList([1, 2]) and isinstance(r, UserList)"),
    ),
    "a preamble's namedtuple": (
        "def f():\n    return P(1, 2)\n",
        asserts(
            "r = f()\nassert r == P(1, 2) and r.x == 1 and type(r) is P",
            test_imports=["from collections import namedtuple", "P = namedtuple('P', 'x y')"],
        ),
    ),
    "a preamble's dataclass": (
        "def f():\n    return P(1, 2)\n",
        asserts(
            "assert f() == P(1, 2)",
            test_imports=["from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: int"],
        ),
    ),
    "a preamble's list subclass": (
        "def f():\n    return L([1, 2])\n",
        asserts("r = f()\nassert r == L([1, 2]) and type(r) is L", test_imports=["class L(list):\n    pass"]),
    ),
    "an exception returned": (
        "def f():\n    return ValueError('bad')\n",
        asserts("r = f()\nassert isinstance(r, ValueError) and r.args == ('bad',)"),
    ),
    # functions
    "a str method passed": (
        "def f(fn, xs):\n    return [fn(x) for x in xs]\n",
        asserts("assert f(str.upper, ['a']) == ['A']"),
    ),
    "a stdlib function passed": (
        "def f(fn, xs):\n    return [fn(x) for x in xs]\n",
        asserts("import math\nassert f(math.sqrt, [4]) == [2.0]"),
    ),
    "a stdlib function returned": (
        "import math\ndef f():\n    return math.sqrt\n",
        asserts("import math\nassert f() is math.sqrt"),
    ),
    "a test's lambda handed back from a dict": (
        "def f(table):\n    return table\n",
        asserts("g = lambda x: x + 1\nassert f({'k': g})['k'] is g"),
    ),
    "functools.reduce imported by the reference": (
        "from functools import reduce\ndef f(xs):\n    return reduce(lambda a, b: a * b, xs)\n",
        asserts(
            "assert f([1, 2, 3]) == reduce(lambda a, b: a * b, [1, 2, 3])",
            reference_solution="from functools import reduce\ndef f(xs):\n    return reduce(lambda a, b: a * b, xs)\n",
        ),
    ),
    # generators and coroutines
    "a coroutine the test runs": (
        "import asyncio\nasync def f(x):\n    await asyncio.sleep(0)\n    return x * 2\n",
        asserts("import asyncio\nassert asyncio.run(f(2)) == 4"),
    ),
    "a coroutine awaited in the test's own coroutine": (
        "async def f(x):\n    return x + 1\n",
        asserts(
            "import asyncio\nasync def main():\n    return await f(1) + await f(2)\nassert asyncio.run(main()) == 5"
        ),
    ),
    # the test's process state
    "random seeded by the test": (
        "import random\ndef f():\n    return random.randint(1, 10**9)\n",
        asserts("import random\nrandom.seed(7)\nr = f()\nrandom.seed(7)\nassert r == random.randint(1, 10**9)"),
    ),
    "random continues after the program's draw": (
        "import random\ndef f():\n    return random.random()\n",
        asserts(
            "import random\nrandom.seed(3)\na = f()\nb = random.random()\nrandom.seed(3)\nassert [a, b] == [random.random(), random.random()]"
        ),
    ),
    "prints under redirect_stdout": (
        "def f():\n    print('hi')\n",
        asserts(
            "import io, contextlib\nbuffer = io.StringIO()\nwith contextlib.redirect_stdout(buffer):\n    f()\nassert buffer.getvalue() == 'hi\\n'"
        ),
    ),
    "a recursion limit the test raised": (
        "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n",
        asserts("import sys\nsys.setrecursionlimit(100000)\nassert f(30000) == 30000"),
    ),
    # MBPP setup code, now run in the judge, building objects of the program's classes
    "setup code building the program's objects": (
        "class Node:\n    def __init__(self, v):\n        self.v = v\n        self.left = None\n"
        "def depth(n):\n    return 0 if n is None else 1 + depth(n.left)\n",
        asserts(
            "assert depth(root) == 2",
            test_setup_code="root = Node(1)\r\nroot.left = Node(2)\r\n",
            reference_solution="class Node:\n    def __init__(self, v):\n        self.v = v\n        self.left = None\n"
            "def depth(n):\n    return 0 if n is None else 1 + depth(n.left)\n",
        ),
    ),
    # two of the program's objects its own __eq__ calls equal, holding equal fields
    "the program's objects equal field by field": (
        "class N:\n    def __init__(self, v, nxt=None):\n        self.v, self.nxt = v, nxt\n"
        "    def __eq__(self, other):\n        return isinstance(other, N) and (self.v, self.nxt) == (other.v, other.nxt)\n"
        "def f():\n    return N(1, N(2))\n",
        asserts("assert f() == N(1, N(2))"),
    ),
    # methods of the task's own classes, named like a builtin's, stay the program's
    "a class the test names, its pop and count": (
        "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        self.items.append(x)\n"
        "    def pop(self):\n        return self.items.pop()\n    def count(self):\n        return len(self.items)\n",
        asserts("s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2 and s.count() == 1"),
    ),
    # stdin/stdout programs
    "os._exit after flushing": (
        "import os, sys\nprint(int(input()) * 2)\nsys.stdout.flush()\nos._exit(0)\n",
        stdio("3\n", "6\n"),
    ),
    "2 MB of debug output on stderr": (
        "import sys\nfor i in range(40000):\n    print('debug', i, 'x' * 40, file=sys.stderr)\nprint(int(input()) * 2)\n",
        stdio("3\n", "6\n"),
    ),
}

POINT = "from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: int\n"
POINT_CHECK = {
    "test": "def check(candidate):\n    assert candidate() == Point(1, 2)\n",
    "entry_point": "f",
    "reference_solution": POINT + "def f():\n    return Point(1, 2)\n",
}
CORRECT["the program's own dataclass named like the reference's"] = (
    POINT + "def f():\n    return Point(1, 2)\n",
    POINT_CHECK,
)

LEVEL = "from enum import IntEnum\nclass Level(IntEnum):\n    LOW = 1\n    HIGH = 2\n"
CORRECT["the program's IntEnum, named by the task, as an int"] = (
    LEVEL,
    asserts(
        "assert isinstance(Level.HIGH, int) and Level.HIGH + 1 == 3 and 2 == Level.HIGH\n"
        "assert Level(2).name == 'HIGH' and type(Level.LOW).__name__ == 'Level'\n"
        "assert sorted([Level.HIGH, Level.LOW]) == [1, 2] and {1: 'x'}[Level.LOW] == 'x'",
        reference_solution=LEVEL,
    ),
)
CORRECT["a test object's attribute the program changes"] = (
    "def grow(box):\n    box.volume *= 2\n    return box\n",
    {
        "test": "def check(candidate):\n    class Box:\n        def __init__(self, v):\n            self.volume = v\n"
        "    box = Box(3)\n    assert candidate(box) is box\n    assert box.volume == 6\n",
        "entry_point": "grow",
    },
)

WORD = "class Word(str):\n    def shout(self):\n        return self.upper() + '!'\n"
CORRECT["the program's str subclass, named by the task"] = (
    WORD,
    asserts(
        "w = Word('ab')\nassert w.shout() == 'AB!' and w.startswith('a') and w.upper() == 'AB' and w == 'ab'",
        reference_solution=WORD,
    ),
)
SOLUTION_CHECK = {
    "test": "def check(candidate):\n    assert candidate('x').startswith('ab')\n",
    "entry_point": "Solution().f",
    "reference_solution": "class Solution:\n    def f(self, x):\n        return 'ab' + x\n",
}

REFERENCE_SORTS = "def f(xs):\n    return sorted(xs)\n"
BOX_CHECK = (
    "expected = 21\ndef check(candidate):\n    class Box:\n        def __init__(self, v):\n            self.volume = v\n"
    "        def size(self):\n            return self.volume\n    assert candidate(Box(3)) == expected\n"
)
FORGED = {
    # names the reference imports are the judge's own, whatever the program rebinds
    "math rebound": (
        "import math\ndef f(x):\n    return 1.0\nclass _M:\n    def isclose(self, *a, **k):\n        return True\nmath = _M()\n",
        asserts(
            "assert math.isclose(f(2), 2 ** 0.5)",
            reference_solution="import math\ndef f(x):\n    return math.sqrt(x)\n",
        ),
    ),
    "Counter rebound": (
        "def f(s):\n    return 1\nclass Counter:\n    def __init__(self, *a):\n        pass\n    def __eq__(self, other):\n        return True\n",
        asserts(
            "assert Counter(f('aab')) == Counter({'a': 2, 'b': 1})",
            reference_solution="from collections import Counter\ndef f(s):\n    return list(s)\n",
        ),
    ),
    "numpy rebound": (
        "def f(x):\n    return 0\nclass _N:\n    def allclose(self, *a):\n        return True\nnp = _N()\n",
        asserts(
            "assert np.allclose(f(2), 4)", reference_solution="import numpy as np\ndef f(x):\n    return np.square(x)\n"
        ),
    ),
    # a reference helper stays the reference's: the program's class of its name is rebuilt as it
    "a same-named class equal to anything": (
        "class Point:\n    def __init__(self, *a):\n        pass\n    def __eq__(self, other):\n        return True\n"
        "def f():\n    return Point(0, 0)\n",
        POINT_CHECK,
    ),
    # setup code computes with the judge's builtins
    "a patched builtin under the setup code": (
        "import builtins\ndef f(xs):\n    return xs\nbuiltins.sorted = lambda xs, **k: list(xs)\n",
        asserts(
            "assert f([3, 1, 2]) == expected",
            test_setup_code="expected = sorted([3, 1, 2])",
            reference_solution=REFERENCE_SORTS,
        ),
    ),
    # == between two program objects: the program's __eq__ alone does not make different fields equal
    "a program class equal to anything": (
        "class P:\n    def __init__(self, x):\n        self.x = x\n    def __eq__(self, other):\n        return True\n"
        "def f():\n    return P(0)\n",
        asserts("assert f() == P(5)"),
    ),
    "a program class unequal to nothing": (
        "class P:\n    def __init__(self, x):\n        self.x = x\n    def __ne__(self, other):\n        return False\n"
        "def f():\n    return P(0)\n",
        asserts("assert not (f() != P(5))"),
    ),
    # a str method asked of a program object whose class the task never names: the test expected a string
    "an object answering startswith": (
        "class S:\n    def startswith(self, prefix):\n        return True\ndef f(x):\n    return S()\n",
        asserts("assert f(1).startswith('ab')"),
    ),
    # a program's own subclass of a rebuilt type stays the program's object
    "a program's time subclass equal to anything": (
        "import datetime\nclass T(datetime.time):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = datetime.time.__hash__\ndef f():\n    return T(0, 0)\n",
        asserts("import datetime\nassert f() == datetime.time(3, 4)"),
    ),
    "a UserList holding an object equal to anything": (
        "from collections import UserList\nclass Any:\n    def __eq__(self, other):\n        return True\n"
        "def f():\n    u = UserList()\n    u.data = Any()\n    return u\n",
        asserts("from collections import UserList\nassert f() == UserList([1, 2])"),
    ),
    # the program's own builtin subclass the task names is its object, compared by the builtin value it holds
    "a named int subclass equal to anything": (
        "class Score(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def best(xs):\n    return Score(0)\n",
        asserts(
            "assert best([3, 9, 4]) == 9",
            reference_solution="class Score(int):\n    pass\ndef best(xs):\n    return Score(max(xs))\n",
        ),
    ),
    "a named list subclass equal to anything": (
        "class Stack(list):\n    def push(self, x):\n        pass\n    def __eq__(self, other):\n        return True\n",
        asserts(
            "s = Stack()\ns.push(1)\nassert s == [1]",
            reference_solution="class Stack(list):\n    def push(self, x):\n        self.append(x)\n",
        ),
    ),
    # a str method the test calls on a program object: the builtin's own on the value a str subclass holds, and
    # refused where the task's class of that name has no such method
    "a named str subclass answering startswith": (
        "class Solution(str):\n    def startswith(self, prefix):\n        return True\n"
        "    def f(self, x):\n        return Solution('zz')\n",
        SOLUTION_CHECK,
    ),
    "a named class answering startswith": (
        "class Solution:\n    def startswith(self, prefix):\n        return True\n"
        "    def f(self, x):\n        return Solution()\n",
        SOLUTION_CHECK,
    ),
    "an unnamed int subclass equal to anything": (
        "class Any(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def f():\n    return Any(0)\n",
        asserts("assert f() == 9"),
    ),
    # a callable of the test is called back in the judge: the program never holds the object it is bound to
    "reaching a callback's owner": (
        "def f(getter):\n    return sorted(getter.__self__.items())\n",
        {
            "test": "def check(candidate):\n    hidden = {'a': 1}\n    assert candidate(hidden.get) == [('a', 1)]\n",
            "entry_point": "f",
        },
    ),
    "reaching a callback's globals": (
        "def f(key):\n    return key.__globals__['expected']\n",
        {
            "test": "expected = [1, 2, 3]\ndef check(candidate):\n    assert candidate(lambda x: -x) == expected\n",
            "entry_point": "f",
        },
    ),
    # an object of a class the test defines stays in the judge: its public attributes and methods, nothing behind them
    "reaching a test object's method globals": (
        "def f(box):\n    return box.size.__globals__['expected']\n",
        {"test": BOX_CHECK, "entry_point": "f"},
    ),
    "reaching a test object's class": (
        "def f(box):\n    return box.__class__.size.__globals__['expected']\n",
        {"test": BOX_CHECK, "entry_point": "f"},
    ),
    # a test's subclass of a program class: the program calls the test's methods, never reads them
    "reaching a test subclass's method globals": (
        "class Greeter:\n    def greet(self, name):\n        method = type(self).greeting\n"
        "        return method.__closure__[0].cell_contents.__globals__['expected']\n",
        asserts(
            "expected = 'HEY, bo!'\nclass Loud(Greeter):\n    def greeting(self):\n        return 'HEY'\n"
            "assert Loud().greet('bo') == expected",
            reference_solution="class Greeter:\n    def greeting(self):\n        return 'Hello'\n"
            "    def greet(self, name):\n        return f'{self.greeting()}, {name}!'\n",
        ),
    ),
    "a namedtuple of the preamble holding an object equal to anything": (
        "class Any:\n    def __eq__(self, other):\n        return True\ndef f():\n    return P(Any(), Any())\n",
        asserts(
            "assert f() == P(1, 2)", test_imports=["from collections import namedtuple", "P = namedtuple('P', 'x y')"]
        ),
    ),
}


def test_correct_programs_in_every_form_score_one(box):
    results = outcomes_of(box, CORRECT)
    failing = {name: outcomes for name, outcomes in results.items() if not passed(outcomes)}
    assert failing == {}


def test_forgeries_score_zero(box):
    results = outcomes_of(box, FORGED)
    passing = [
        name for name, outcomes in results.items() if isinstance(outcomes, Exception) or any(o.passed for o in outcomes)
    ]
    assert passing == []


def test_a_checks_helper_without_a_definition_is_no_ground_truth(box):
    """The program is never asked for a check's helpers: the row gets no verdict, with the reason."""
    row = {"test": "def check(candidate):\n    assert candidate('abc') == decode(encode('abc'))\n", "entry_point": "f"}
    forged = "def f(s):\n    return s\ndef encode(s):\n    return s\ndef decode(s):\n    return s\n"
    honest_row = {
        **row,
        "reference_solution": "def encode(s):\n    return s[::-1]\ndef decode(s):\n    return s[::-1]\ndef f(s):\n    return s\n",
    }
    (refused, judged) = run_tests_many([(forged, spec_of(row)), (forged, spec_of(honest_row))], box, cache=False)
    assert isinstance(refused, Exception) and "no ground truth" in str(refused) and "encode" in str(refused)
    assert passed(judged)  # with a reference the helpers are the task's: the same program passes on its merit


def test_threads_fit_the_default_process_limit():
    """The default limits (not the tests' tight ones) start the 24 threads a correct program used."""
    box = Sandbox(SandboxConfig(max_concurrency=1, uid_base=TEST_UID_BASE))
    (outcomes,) = run_tests_many(
        [(THREADED, spec_of(asserts("assert f(48) == [200 * sum(range(200))] * 48")))], box, cache=False
    )
    assert passed(outcomes), outcomes


def _decoded(encoded):
    return wire.Decoder({}, lambda item: pytest.fail(f"no handle expected: {item}")).decode(encoded)


@pytest.mark.parametrize(
    "encoded, named",
    [
        (["red", ["call", ["cls", "types", "FunctionType"]], [], None, None, None], "types.FunctionType"),
        (["red", ["call", ["cls", "os", "PathLike"]], [], None, None, None], "os.PathLike"),
        (
            ["red", ["call", ["cls", "functools", "partial"]], [["fn", "math", "sqrt"]], None, None, None],
            "functools.partial",
        ),
        (
            ["red", ["call", ["cls", "collections", "_OrderedDictKeysView"]], [], None, None, None],
            "collections._OrderedDictKeysView",
        ),
        (["red", ["new", ["task", "Node"]], [], None, None, None], "Node"),
        # callables the judge may send to the program are never rebuilt from the program's answer
        (["red", ["call", ["cls", "operator", "methodcaller"]], ["write"], None, None, None], "operator.methodcaller"),
        (["red", ["call", ["cls", "operator", "attrgetter"]], ["__class__"], None, None, None], "operator.attrgetter"),
        (["hv", "not a handle", ["i", "1"]], "kept value"),
        (["fn", "os", "system"], "os.system"),
        (["fn", "builtins", "eval"], "builtins.eval"),
        (["fn", "builtins", "object.__subclasses__"], "builtins.object.__subclasses__"),
    ],
)
def test_only_allowed_classes_and_functions_are_rebuilt(encoded, named):
    with pytest.raises(wire.BadValue, match=named.split(".")[-1]):
        _decoded(encoded)


def test_a_rebuilt_value_sets_fields_never_methods():
    with pytest.raises(wire.BadValue, match="not a field"):
        _decoded(["red", ["new", ["cls", "collections", "UserList"]], [], ["d", [["__class__", None]]], None, None])
    with pytest.raises(wire.BadValue, match="not a field"):
        _decoded(["red", ["new", ["cls", "collections", "UserList"]], [], ["d", [["append", None]]], None, None])
