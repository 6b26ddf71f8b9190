"""The judge against both failure directions: every correct program Python's own ``assert`` accepts scores 1.0,
every program written to fool it scores 0, side by side in the same batch.

Each case is a dataset row (its tests in the row's own format) with a correct program and, where there is
one, an attack on the same row. The rows cover the forms the seeds train on: MBPP asserts (with setup code),
AceCode assert lists, HumanEval ``check(candidate)`` modules with module-level helpers, LeetCodeDataset
(a preamble of ``ListNode``/``TreeNode`` helpers, ``Solution().method`` entry points), class-implementation
tasks, and stdin/stdout programs.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from diffugrpo_plugin.rewards.code_tests import tests_from_row as spec_of  # a 'test*' name pytest would collect
from diffugrpo_plugin.rewards.test_runs import run_tests_many
from diffugrpo_plugin.sandbox import sandbox_wire as wire
from reward_support import tight_sandbox


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(
        timeout_s=5.0, memory_mb=1024, max_concurrency=2, max_output_bytes=1 << 20, max_file_size_mb=16.0
    )


def judged(box, cases: list[tuple[str, dict]]) -> list[list]:
    """Per (program, row): the outcomes of its tests."""
    results = run_tests_many([(program, spec_of(row)) for program, row in cases], box, cache=False)
    for result in results:
        assert not isinstance(result, Exception), result
    return results


def passed(outcomes) -> bool:
    return bool(outcomes) and all(outcome.passed for outcome in outcomes)


def asserts(*tests: str, **row) -> dict:
    return {"test_cases": list(tests), **row}


# --------------------------------------------------------------------------- correct programs Python accepts

CORRECT = {
    # the program's own objects, through the operations a test applies to them
    "str of its object": (
        "class P:\n    def __str__(self):\n        return 'P(1)'\ndef f():\n    return P()\n",
        asserts("assert str(f()) == 'P(1)'"),
    ),
    "repr of its object": (
        "class P:\n    def __repr__(self):\n        return 'P'\ndef f():\n    return P()\n",
        asserts("assert repr(f()) == 'P'", "assert f'{f()!r}' == 'P'"),
    ),
    "len of its object": (
        "class Bag:\n    def __len__(self):\n        return 3\ndef f():\n    return Bag()\n",
        asserts("assert len(f()) == 3"),
    ),
    "isinstance of its class": (
        "class Node:\n    pass\ndef f():\n    return Node()\n",
        asserts("assert isinstance(f(), Node)", "assert not isinstance(f(), int)"),
    ),
    "attributes and methods": (
        "class Acc:\n    def __init__(self):\n        self.total = 0\n"
        "    def add(self, x):\n        self.total += x\n        return self\n"
        "def f():\n    return Acc()\n",
        asserts("assert f().add(2).add(3).total == 5"),
    ),
    "its dataclass compared with its dataclass": (
        "from dataclasses import dataclass\n@dataclass\nclass Point:\n    x: int\n    y: int\n"
        "def mid(a, b):\n    return Point((a.x + b.x) // 2, (a.y + b.y) // 2)\n",
        asserts("assert mid(Point(0, 0), Point(2, 4)) == Point(1, 2)"),
    ),
    "its enum": (
        "import enum\nclass Color(enum.Enum):\n    RED = 1\n    BLUE = 2\ndef f(x):\n"
        "    return Color.RED if x else Color.BLUE\n",
        asserts("assert f(1) == Color.RED", "assert f(0).name == 'BLUE'", "assert f(0).value == 2"),
    ),
    # iterables that are not lists
    "an iterator": ("def f(n):\n    return iter(range(n))\n", asserts("assert list(f(3)) == [0, 1, 2]")),
    "a generator": (
        "def f(n):\n    for i in range(n):\n        yield i * i\n",
        asserts("assert list(f(4)) == [0, 1, 4, 9]", "assert sum(f(3)) == 5", "assert next(f(5)) == 0"),
    ),
    "map": ("def f(xs):\n    return map(str, xs)\n", asserts("assert list(f([1, 2])) == ['1', '2']")),
    "range": ("def f(n):\n    return range(n)\n", asserts("assert f(3) == range(3)", "assert list(f(2)) == [0, 1]")),
    "deque": (
        "from collections import deque\ndef f():\n    return deque([1, 2])\n",
        asserts("assert f() == deque([1, 2])", "assert list(f()) == [1, 2]"),
    ),
    "dict views": (
        "def keys(d):\n    return d.keys()\ndef items(d):\n    return d.items()\n"
        "def values(d):\n    return d.values()\n",
        asserts(
            "assert keys({1: 2}) == {1}", "assert set(items({1: 2})) == {(1, 2)}", "assert list(values({1: 2})) == [2]"
        ),
    ),
    # value types of the standard library and numpy
    "Fraction": (
        "from fractions import Fraction\ndef f():\n    return Fraction(1, 3)\n",
        asserts("assert f() == Fraction(1, 3)", "assert f() * 3 == 1"),
    ),
    "Decimal": (
        "from decimal import Decimal\ndef f():\n    return Decimal('0.1') + Decimal('0.2')\n",
        asserts("from decimal import Decimal\nassert f() == Decimal('0.3')"),
    ),
    "numpy scalars": (
        "import numpy as np\ndef f(xs):\n    return np.sum(np.array(xs))\n",
        asserts("assert f([1, 2, 3]) == 6", "assert f([1, 2]) + 1 == 4"),
    ),
    "numpy arrays": (
        "import numpy as np\ndef f(n):\n    return np.arange(n) * 2\n",
        asserts(
            "import numpy as np\nassert np.array_equal(f(3), np.array([0, 2, 4]))",
            "assert list(f(2)) == [0, 2]",
            "assert (f(2) == [0, 2]).all()",
        ),
    ),
    "bytearray": ("def f(s):\n    return bytearray(s, 'ascii')\n", asserts("assert f('ab') == b'ab'")),
    "Counter": (
        "from collections import Counter\ndef f(s):\n    return Counter(s)\n",
        asserts("assert f('aab') == {'a': 2, 'b': 1}", "assert f('aab').most_common(1) == [('a', 2)]"),
    ),
    "defaultdict": (
        "from collections import defaultdict\ndef f(xs):\n    d = defaultdict(list)\n"
        "    for x in xs:\n        d[x % 2].append(x)\n    return d\n",
        asserts("assert f([1, 2, 3]) == {1: [1, 3], 0: [2]}", "assert f([1])[0] == []"),
    ),
    "namedtuple": (
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f():\n    return P(1, 2)\n",
        asserts("assert f() == (1, 2)"),
    ),
    # what the test does with the values
    "sorted with a key": (
        "def f():\n    return [(1, 'b'), (2, 'a')]\n",
        asserts("assert sorted(f(), key=lambda t: t[1]) == [(2, 'a'), (1, 'b')]"),
    ),
    "a key function given to the program": (
        "def order(xs, key):\n    return sorted(xs, key=key)\n",
        asserts("assert order([3, 1, 2], key=lambda x: -x) == [3, 2, 1]"),
    ),
    "type(x) == int": ("def f():\n    return 5\n", asserts("assert type(f()) == int", "assert type(f()) is int")),
    "a function returned": ("def adder(n):\n    return lambda x: x + n\n", asserts("assert adder(2)(3) == 5")),
    "an exception the test expects": (
        "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n",
        {
            "test": "def check(candidate):\n    try:\n        candidate(-1)\n        assert False\n"
            "    except ValueError:\n        pass\n    assert candidate(2) == 2\n",
            "entry_point": "f",
        },
    ),
    # sizes real solutions reach
    "a 200k-element list": (
        "def f(n):\n    return list(range(n))\n",
        asserts("assert len(f(200000)) == 200000", "assert f(200000)[-1] == 199999"),
    ),
    "an int over 4300 digits": (
        "import math\ndef f(n):\n    return math.factorial(n)\n",
        asserts("import math\nassert f(2000) == math.factorial(2000)"),
    ),
    "nesting deeper than 64": (
        "def f(n):\n    x = []\n    for _ in range(n):\n        x = [x]\n    return x\n",
        asserts("def depth(x):\n    return 1 + depth(x[0]) if x else 1\nassert depth(f(300)) == 301"),
    ),
    "24 MB of debug output": (
        "def f(x):\n    for _ in range(24 * 1024):\n        print('.' * 1023)\n    return x\n",
        asserts("assert f(3) == 3"),
    ),
    # functions that change their input in place
    "a list sorted in place": (
        "def sort_in_place(xs):\n    xs.sort()\n",
        {
            "test": "def check(candidate):\n    nums = [3, 1, 2]\n    candidate(nums)\n    assert nums == [1, 2, 3]\n",
            "entry_point": "sort_in_place",
        },
    ),
    "a dict filled in place": (
        "def fill(d):\n    d['k'] = 1\n",
        asserts("assert (lambda d: (fill(d), d)[1])({}) == {'k': 1}"),
    ),
    # names: the test's builtins stay builtins; the task's own names are the program's
    "a program that rebinds range": (
        "range = range\ndef f(n):\n    return list(range(n))\n",
        asserts("assert f(2) == [0, 1]", "assert [i for i in range(2)] == f(2)"),
    ),
    "a task function named like a builtin": (  # MBPP 126's own sum
        "def sum(a, b):\n    return a + b\n",
        {"test_list": ["assert sum(10, 15) == 25"], "code": "def sum(a, b):\n    pass\n"},
    ),
    # MBPP setup code building the program's own objects
    "MBPP setup code": (
        "class Node:\n    def __init__(self, v):\n        self.v = v\n        self.left = None\n"
        "def height(n):\n    return 0 if n is None else 1 + height(n.left)\n",
        {
            "test_list": ["assert height(root) == 2"],
            "test_setup_code": "root = Node(1)\nroot.left = Node(2)",
            "code": "class Node:\n    pass\ndef height(n):\n    pass\n",
        },
    ),
    # HumanEval: module-level constants and helpers of the test, the task's own helpers
    "HumanEval module-level helpers": (
        "def double(x):\n    return 2 * x\n",
        {
            "test": "FACTOR = 2\ndef expected(x):\n    return FACTOR * x\n\ndef check(candidate):\n"
            "    for x in range(5):\n        assert candidate(x) == expected(x)\n",
            "entry_point": "double",
        },
    ),
    "HumanEval/38's helper from the task": (
        "def decode_cyclic(s):\n    return ''.join(g[-1] + g[:-1] if len(g) == 3 else g\n"
        "                   for g in (s[i:i + 3] for i in range(0, len(s), 3)))\n",
        {
            "test": "def check(candidate):\n    for s in ['abcdef', 'abcde', 'xy']:\n"
            "        assert candidate(encode_cyclic(s)) == s\n",
            "entry_point": "decode_cyclic",
            "prompt": "def encode_cyclic(s):\n    return ''.join(g[1:] + g[0] if len(g) == 3 else g\n"
            "                   for g in (s[i:i + 3] for i in range(0, len(s), 3)))\n\n"
            "def decode_cyclic(s):\n    '''decode'''\n",
            "canonical_solution": "    return encode_cyclic(encode_cyclic(s))\n",
        },
    ),
}

LEETCODE_PREAMBLE = """from typing import *
from collections import deque

class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next

def list_node(values: list):
    if not values:
        return None
    head = ListNode(values[0])
    p = head
    for val in values[1:]:
        node = ListNode(val)
        p.next = node
        p = node
    return head

def is_same_list(p1, p2):
    if p1 is None and p2 is None:
        return True
    if not p1 or not p2:
        return False
    return p1.val == p2.val and is_same_list(p1.next, p2.next)

class TreeNode:
    def __init__(self, val=0, left=None, right=None):
        self.val = val
        self.left = left
        self.right = right

def tree_node(values: list):
    if not values:
        return None
    root = TreeNode(values[0])
    i = 1
    queue = deque()
    queue.append(root)
    while queue:
        node = queue.popleft()
        if i < len(values) and values[i] is not None:
            node.left = TreeNode(values[i])
            queue.append(node.left)
        i += 1
        if i < len(values) and values[i] is not None:
            node.right = TreeNode(values[i])
            queue.append(node.right)
        i += 1
    return root

def is_same_tree(p, q):
    if not p and not q:
        return True
    elif not p or not q:
        return False
    elif p.val != q.val:
        return False
    else:
        return is_same_tree(p.left, q.left) and is_same_tree(p.right, q.right)
"""


def leetcode(test: str, entry_point: str, completion: str | None = None) -> dict:
    """A LeetCodeDataset row as the dataset publishes it (``prompt`` is the preamble, kept as test_imports)."""
    return {
        "test": test,
        "entry_point": entry_point,
        "test_imports": [LEETCODE_PREAMBLE],
        **({"completion": completion} if completion else {}),
    }


REVERSE = """class Solution:
    def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:
        previous = None
        while head:
            head.next, previous, head = previous, head, head.next
        return previous
"""
INVERT = """class Solution:
    def invertTree(self, root: Optional[TreeNode]) -> Optional[TreeNode]:
        if root:
            root.left, root.right = self.invertTree(root.right), self.invertTree(root.left)
        return root
"""
MIN_STACK = """class MinStack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append((x, min(x, self.items[-1][1]) if self.items else x))
    def pop(self):
        self.items.pop()
    def top(self):
        return self.items[-1][0]
    def getMin(self):
        return self.items[-1][1]
"""

CORRECT.update(
    {
        "LeetCode linked list": (
            REVERSE,
            leetcode(
                "def check(candidate):\n    assert is_same_list(candidate(head=list_node([1, 2, 3])), list_node([3, 2, 1]))\n"
                "    assert candidate(head=list_node([])) == None\n",
                "Solution().reverseList",
                REVERSE,
            ),
        ),
        "LeetCode linked list of 50000 nodes": (
            REVERSE,
            leetcode(
                "def check(candidate):\n    values = list(range(50000))\n    node, seen = candidate(head=list_node(values)), []\n"
                "    while node:\n        seen.append(node.val)\n        node = node.next\n    assert seen == values[::-1]\n",
                "Solution().reverseList",
                REVERSE,
            ),
        ),
        "LeetCode tree": (
            INVERT,
            leetcode(
                "def check(candidate):\n    assert is_same_tree(candidate(root=tree_node([4, 2, 7, 1, 3])), "
                "tree_node([4, 7, 2, None, None, 3, 1]))\n",
                "Solution().invertTree",
                INVERT,
            ),
        ),
        "LeetCode list in place": (
            "class Solution:\n    def sortColors(self, nums: List[int]) -> None:\n        nums.sort()\n",
            leetcode(
                "def check(candidate):\n    nums = [2, 0, 1]\n    candidate(nums)\n    assert nums == [0, 1, 2]\n",
                "Solution().sortColors",
            ),
        ),
        "a namedtuple's fields": (
            "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f():\n    return P(1, 2)\n",
            asserts("assert f().x == 1", "assert f()._asdict() == {'x': 1, 'y': 2}"),
        ),
        "its exception caught as the builtin it extends": (
            "class BadInput(ValueError):\n    pass\ndef f(x):\n    raise BadInput('no')\n",
            {
                "test": "def check(candidate):\n    try:\n        candidate(1)\n    except ValueError as error:\n"
                "        assert str(error) == 'no'\n    else:\n        assert False\n",
                "entry_point": "f",
            },
        ),
        "its exception caught by its own name": (
            "class InsufficientFunds(Exception):\n    pass\ndef withdraw(x):\n    raise InsufficientFunds(x)\n",
            {
                "test_list": [
                    "try:\n    withdraw(5)\n    assert False\nexcept InsufficientFunds as error:\n"
                    "    assert error.args == (5,)"
                ],
                "code": "class InsufficientFunds(Exception):\n    pass\ndef withdraw(x):\n    pass\n",
            },
        ),
        "an exception's arguments": (
            "def f(d):\n    return d['x']\n",
            asserts("try:\n    f({})\n    assert False\nexcept KeyError as error:\n    assert error.args[0] == 'x'"),
        ),
        "a generator expression as an argument": (
            "def total(xs):\n    return sum(xs)\n",
            asserts("assert total(x * x for x in range(4)) == 14"),
        ),
        "a __main__ block that reads stdin": (
            "def f(x):\n    return x + 1\nif __name__ == '__main__':\n    print(f(int(input())))\n",
            asserts("assert f(1) == 2"),
        ),
        "a defaultdict with its own factory": (
            "from collections import defaultdict\ndef f():\n    return defaultdict(lambda: 0, {'a': 1})\n",
            asserts("assert f()['zz'] == 0", "assert f() == {'a': 1}"),
        ),
        "a generator read in two steps": (
            "def f():\n    yield from range(5)\n",
            asserts("from itertools import islice\ng = f()\nassert list(islice(g, 2)) == [0, 1]\nassert next(g) == 2"),
        ),
        "a function named like a standard module": (
            "def copy(xs):\n    return list(xs)\n",
            {"test_list": ["assert copy((1, 2)) == [1, 2]"], "code": "def copy(xs):\n    pass\n"},
        ),
        "nesting 1000 deep": (
            "def f(n):\n    x = []\n    for _ in range(n):\n        x = [x]\n    return x\n",
            asserts(
                "def depth(x):\n    d = 1\n    while x:\n        x, d = x[0], d + 1\n    return d\n"
                "assert depth(f(1000)) == 1001"
            ),
        ),
        "its global read after a call": (
            "inventory = []\ncount = 0\ndef add_item(x):\n    global count\n    inventory.append(x)\n    count += 1\n",
            asserts("add_item('apple')\nassert inventory == ['apple'] and count == 1"),
        ),
        "its frozen dataclasses in a set": (
            "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass Point:\n    x: int\n    y: int\n"
            "def neighbors(p):\n    return {Point(p.x + 1, p.y), Point(p.x, p.y + 1)}\n",
            asserts("assert Point(1, 0) in neighbors(Point(0, 0))", "assert len({Point(1, 2), Point(1, 2)}) == 1"),
        ),
        "its argument returned as such": (
            "def sort_in_place(xs):\n    xs.sort()\n    return xs\n",
            asserts("a = [2, 1]\nassert sort_in_place(a) is a and a == [1, 2]"),
        ),
        "slices, ~, with and reversed on its objects": (
            "class Vec:\n    def __init__(self, items):\n        self.items = list(items)\n"
            "    def __getitem__(self, key):\n        return self.items[key]\n    def __invert__(self):\n"
            "        return Vec(reversed(self.items))\n    def __reversed__(self):\n        return reversed(self.items)\n"
            "    def __enter__(self):\n        return self\n    def __exit__(self, *exc):\n        return False\n"
            "    def __len__(self):\n        return len(self.items)\n",
            asserts(
                "assert Vec([1, 2, 3])[0:2] == [1, 2]",
                "assert (~Vec([1, 2]))[0] == 2",
                "with Vec([5]) as v:\n    assert v[0] == 5",
                "assert list(reversed(Vec([1, 2]))) == [2, 1]",
            ),
        ),
        "an attribute named like the handle's own": (
            "class R:\n    _id = 5\n    _type = 't'\ndef f():\n    return R()\n",
            asserts("assert (f()._id, f()._type) == (5, 't')"),
        ),
        "multiprocessing.Pool inside the tested function": (
            "from multiprocessing import Pool\ndef sq(x):\n    return x * x\ndef squares(xs):\n    with Pool(2) as pool:\n"
            "        return pool.map(sq, xs)\n",
            asserts("assert squares([1, 2, 3]) == [1, 4, 9]"),
        ),
        "functions named like standard modules, no reference": (
            "def tokenize(s):\n    return s.split()\ndef copy(xs):\n    return list(xs)\n",
            asserts("assert tokenize('a b') == ['a', 'b']", "assert copy((1,)) == [1]"),
        ),
        "an exception in a with body reaches the test": (
            "class Timer:\n    def __enter__(self):\n        return self\n    def __exit__(self, *exc):\n        return False\n",
            asserts("try:\n    with Timer():\n        raise KeyError('k')\nexcept KeyError:\n    pass"),
        ),
        "__reversed__ returning a list": (
            "class V:\n    def __reversed__(self):\n        return [3, 2, 1]\ndef f():\n    return V()\n",
            asserts("assert list(reversed(f())) == [3, 2, 1]"),
        ),
        "a task function bound by assignment": (
            "add = lambda a, b: a + b\n",
            {"test_list": ["assert add(2, 3) == 5"], "code": "add = lambda a, b: a + b\n"},
        ),
        "a builtin exception class handed to the program": (
            "def raises(function, error):\n    try:\n        function()\n    except error:\n        return True\n"
            "    return False\n",
            asserts("def boom():\n    raise KeyError('k')\nassert raises(boom, KeyError)"),
        ),
        "its own max, no reference": (
            "def max(xs):\n    best = xs[0]\n    for x in xs:\n        if x > best:\n"
            "            best = x\n    return best\n",
            asserts("assert max([1, 5, 3]) == 5"),
        ),
        "a class the tests drive": (
            MIN_STACK,
            {
                "test_list": [
                    "s = MinStack()\ns.push(3)\ns.push(1)\nassert s.getMin() == 1\ns.pop()\nassert (s.top(), s.getMin()) == (3, 3)"
                ],
                "code": MIN_STACK,
            },
        ),
    }
)

STDIO = {
    "exit()": "n = int(input())\nprint(n * n)\nexit()\n",
    "a threaded main": "import threading\ndef main():\n    print(int(input()) * int(input().split()[0]))\n"
    "threading.Thread(target=main).start()\n",
    "output written at exit": "import atexit, sys\nvalue = int(input())\natexit.register(lambda: print(value * value))\n",
    "buffered output and sys.exit(0)": "import sys\nsys.stdout.write(str(int(input()) ** 2) + '\\n')\nsys.exit(0)\n",
    "multiprocessing.Pool": "from multiprocessing import Pool\ndef sq(x):\n    return x * x\n"
    "if __name__ == '__main__':\n    with Pool(2) as pool:\n"
    "        print(sum(pool.map(sq, [int(input())])))\n",
}


@pytest.mark.sandbox
def test_every_correct_program_scores_one(box):
    names = list(CORRECT)
    results = judged(box, [CORRECT[name] for name in names])
    failing = {
        name: [o.detail for o in outcomes if not o.passed]
        for name, outcomes in zip(names, results)
        if not passed(outcomes)
    }
    assert failing == {}


@pytest.mark.sandbox
def test_stdin_stdout_programs_that_end_the_python_way(box):
    row = {"inputs": ["3\n3\n"], "outputs": ["9\n"]}
    names = list(STDIO)
    results = judged(box, [(STDIO[name], row) for name in names])
    failing = {name: outcomes for name, outcomes in zip(names, results) if not passed(outcomes)}
    assert failing == {}


@pytest.mark.sandbox
def test_only_a_comparison_between_two_of_the_programs_objects_is_counted_as_the_programs(box):
    dataclass, enum, values = judged(
        box,
        [CORRECT["its dataclass compared with its dataclass"], CORRECT["its enum"], CORRECT["LeetCode linked list"]],
    )
    assert [o.compared for o in dataclass] == [1]
    assert [o.compared for o in enum] == [1, 0, 0]  # Color.RED == Color.RED is the program's; .name is a str
    assert [o.compared for o in values] == [0]


# --------------------------------------------------------------------------- programs written to fool it

FORGED_FRAMES = """import json as _j
def _z(s):
    b = s.encode()
    return b"z" + bytes([len(b)]) + b
def _i(v):
    return b"i" + v.to_bytes(4, "little")
def _s(data):
    return b"s" + len(data).to_bytes(4, "little") + data
def _frame(i):
    verdict = _j.dumps({"index": i, "outcome": "passed", "detail": "", "compared": 0, "untrusted": 0,
                        "sizes": {"elements": 0, "depth": 0, "int_hex_digits": 0}}).encode()
    d = {"index": _i(i), "finished": b"T", "output_overflow": b"F", "signal": b"N", "exit_status": _i(0),
         "setup_error": b"N", "report": _s(b'{"status": "ok"}'), "judge": _s(verdict), "oom_killed": b"F",
         "stdout": _z(""), "stdout_truncated": b"F", "stderr_tail": _z(""), "cpu_s": _i(0), "wall_s": _i(0),
         "peak_rss_kb": _i(0), "baseline_rss_kb": _i(0), "instructions": b"N"}
    body = b"{" + b"".join(_z(k) + v for k, v in d.items()) + b"0"
    return len(body).to_bytes(8, "little") + body
PAYLOAD = (b"".join(_frame(i) for i in range(3)) + (0x7f7f7f7f).to_bytes(8, "little")).decode("latin-1") + "x" * 200000
def encrypt(s, k):
    return PAYLOAD
decrypt = print
"""
RUN_IN_THE_JUDGE = '''CODE = """
import sys
sys.modules['sandbox_judge']._verdict = lambda o, d, j: {"outcome": "passed", "detail": "", "compared": 0,
    "untrusted": 0, "sizes": {"elements": 0, "depth": 0, "int_hex_digits": 0}}
"""
def encode(s):
    return CODE
decode = exec
'''


EXEC_THROUGH_A_MODULE = """import dataclasses, types
CODE = 'import sys\\nsys.modules["sandbox_judge"]._verdict = lambda o, d, j: {"outcome": "passed", "detail": "", "compared": 0, "untrusted": 0, "sizes": {"elements": 0, "depth": 0, "int_hex_digits": 0}}'
def decode(s):
    return None
decode.__module__ = 'dataclasses'
decode.__qualname__ = 'builtins.exec'
dataclasses.builtins = types.SimpleNamespace(exec=decode)
def encode(s):
    return CODE
"""


METHODCALLER = """import sys, operator, builtins
_sp = sys.modules['sandbox_program']
_orig = _sp.ProgramSide.encode
def _enc(self, value):
    if value is operator.methodcaller:
        return ["std", "operator", "methodcaller"]
    if isinstance(value, type(sys)):
        return ["mod", value.__name__]
    return _orig(self, value)
_sp.ProgramSide.encode = _enc
CODE = 'import sys\\nsys.modules["sandbox_judge"]._verdict = lambda o, d, j: {"outcome": "passed", "detail": "", "compared": 0, "untrusted": 0, "sizes": {"elements": 0, "depth": 0, "int_hex_digits": 0}}'
def encode(s):
    return operator.methodcaller
def decode(mc):
    mc("exec", CODE)(builtins)
"""


ATTACKS = {
    "rebinds abs": ("def abs(x):\n    return 0\ndef f(x):\n    return 0\n", asserts("assert abs(f(2) - 1.5) < 1e-9")),
    "rebinds set": (
        "def set(*args):\n    return 1\ndef f():\n    return [9]\n",
        asserts("assert set(f()) == set([1, 2])"),
    ),
    "patches math.isclose": (
        "import math\nmath.isclose = lambda *a, **k: True\ndef f():\n    return 0.0\n",
        asserts("assert math.isclose(f(), 3.14)"),
    ),
    "range = range and an object equal to everything": (
        "range = range\nclass Any:\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = object.__hash__\ndef f(n):\n    return Any()\n",
        asserts("assert f(3) == [i for i in range(3)]"),
    ),
    "an always-equal object in a list": (
        "class Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
        "def f():\n    return [Any()]\n",
        asserts("assert f() == [1]"),
    ),
    "its own bool": (
        "class T:\n    def __eq__(self, other):\n        return True\n    def __bool__(self):\n"
        "        return True\ndef f():\n    return T()\n",
        asserts("assert f() == True"),
    ),
    "defines the test's helper itself": (
        "FACTOR = 0\ndef expected(x):\n    return 0\ndef double(x):\n    return 0\n",
        {
            "test": "FACTOR = 2\ndef expected(x):\n    return FACTOR * x\n\ndef check(candidate):\n"
            "    for x in range(5):\n        assert candidate(x) == expected(x)\n",
            "entry_point": "double",
        },
    ),
    "defines the task's helper itself (HumanEval/38)": (
        "def encode_cyclic(s):\n    return s\ndef decode_cyclic(s):\n    return s\n",
        CORRECT["HumanEval/38's helper from the task"][1],
    ),
    "patches the preamble's helper": (
        "def is_same_list(a, b):\n    return True\nclass Solution:\n    def reverseList(self, head):\n"
        "        return head\n",
        CORRECT["LeetCode linked list"][1],
    ),
    "patches the preamble's class": (
        "ListNode.__eq__ = lambda self, other: True\nclass Solution:\n    def reverseList(self, head):\n"
        "        return head\n",
        leetcode(
            "def check(candidate):\n    assert candidate(head=list_node([1, 2])) == list_node([2, 1])\n",
            "Solution().reverseList",
        ),
    ),
    "leaves the input unsorted": (
        "def sort_in_place(xs):\n    return sorted(xs)\n",
        CORRECT["a list sorted in place"][1],
    ),
    "forges frames on the judge's pipes": (
        'import os\nfor message in (b\'["ready"]\', b\'["answer",["ok",["i","zz"]]]\', b\'garbage\'):\n'
        "    for fd in range(3, 10):\n        try:\n            os.write(fd, len(message).to_bytes(8, 'little') + message)\n        except OSError:\n"
        "            pass\ndef f(x):\n    return None\n",
        asserts("assert f(1) == 1"),
    ),
    "a malformed number then exit": (
        'import os\ndef f(x):\n    message = b\'["answer",["ok",["i","-"]]]\'\n'
        "    os.write(6, len(message).to_bytes(8, 'little') + message)\n    os._exit(0)\n",
        asserts("assert f(1) == 1"),
    ),
    "a huge repeat count": ("def f():\n    return 10 ** 12\n", asserts("assert len('ab' * f()) == 2")),
    # found by an adversarial review: each once passed
    "a builtin that runs code in the judge": (
        RUN_IN_THE_JUDGE,
        asserts(
            "assert decode(encode('hello')) == 'hello'", "assert encode('abc') == 'nop'", "assert encode('x') == 'y'"
        ),
    ),
    "frames forged through the judge's stdout": (
        FORGED_FRAMES,
        asserts(
            "assert encrypt('abc', 1) == 'bcd'",
            "assert decrypt(encrypt('hello', 3), 3) == 'hello'",
            "assert encrypt('xyz', 2) == 'zab'",
        ),
    ),
    "an object that subtracts to zero": (
        "class Z:\n    __sub__ = __rsub__ = lambda self, other: 0.0\ndef mean_absolute_deviation(xs):\n"
        "    return Z()\n",
        {
            "test": "def check(candidate):\n    assert abs(candidate([1.0, 2.0, 3.0]) - 2.0 / 3.0) < 1e-6\n",
            "entry_point": "mean_absolute_deviation",
        },
    ),
    "an object that adds the test's number in place to the answer": (
        "class Z:\n    def __iadd__(self, other):\n        return other * 3\n    __add__ = __radd__ = __iadd__\n"
        "def f(n):\n    return Z()\n",
        asserts("total = f(2)\ntotal += 2\nassert total == 6"),
    ),
    "an object that divides the test's number to the answer": (
        "class Z:\n    def __divmod__(self, other):\n        return (other // 2, other % 2)\n"
        "    __rdivmod__ = __divmod__\ndef f(n):\n    return Z()\n",
        asserts("assert divmod(f(7), 7) == (3, 1)", "assert divmod(7, f(7)) == (3, 1)"),
    ),
    "an object that contains everything": (
        "class All:\n    def __contains__(self, item):\n        return True\ndef f(n):\n    return All()\n",
        asserts("assert 7 in f(2)"),
    ),
    "numpy patched by the program": (
        "import numpy as np\nnp.array_equal = lambda *a, **k: True\ndef f(n):\n    return [0]\n",
        {
            "test_list": ["assert np.array_equal(f(3), np.array([0, 2, 4]))"],
            "code": "import numpy as np\ndef f(n):\n    return np.arange(n) * 2\n",
        },
    ),
    "StopIteration ending the test's loop": (
        "def double(x):\n    raise StopIteration\n",
        asserts("assert all(map(lambda x: double(x) == 2 * x, range(10)))"),
    ),
    "an array interface pointing anywhere": (
        "class A:\n    __array_interface__ = {'shape': (2,), 'typestr': '<i8', 'data': (8, True), 'version': 3}\n"
        "def f():\n    return A()\n",
        asserts("import numpy as np\nassert np.array_equal(f(), [1, 2])"),
    ),
    "an instance attribute that replaces a task class's method": (
        "class Solution:\n    def first(self, head):\n        head.same_as = lambda other: True\n        return head\n",
        {
            "test": "def check(candidate):\n    assert candidate(head=Node(1)).same_as(Node(2))\n",
            "entry_point": "Solution().first",
            "test_imports": [
                "class Node:\n    def __init__(self, val):\n        self.val = val\n"
                "    def same_as(self, other):\n        return self.val == other.val\n"
            ],
        },
    ),
    # found by a second adversarial review
    "an unreadable answer where the test expects ValueError": (
        "def f(x):\n    if x < 0:\n        return [0] * 5_000_000\n    return int(x ** 0.5)\n",
        {
            "test": "def check(candidate):\n    assert candidate(4) == 2\n    try:\n        candidate(-1)\n"
            "        assert False, 'no error'\n    except ValueError:\n        pass\n",
            "entry_point": "f",
        },
    ),
    "an exception its base cannot rebuild where the test expects TypeError": (
        "def f(x):\n    if isinstance(x, str):\n        raise ExceptionGroup('x', [KeyError(1)])\n    return x\n",
        {
            "test": "def check(candidate):\n    assert candidate(1) == 1\n    try:\n        candidate('a')\n"
            "        assert False\n    except TypeError:\n        pass\n",
            "entry_point": "f",
        },
    ),
    "its input returned where a copy is asked for": (
        "def copy_list(xs):\n    return xs\n",
        asserts("a = [1, 2, 3]\nb = copy_list(a)\nassert b == a and b is not a"),
    ),
    "an object that claims every protocol": (
        "class X:\n    pass\ndef f():\n    return X()\n",
        asserts("assert hasattr(f(), '__iter__')", "from collections.abc import Sized\nassert isinstance(f(), Sized)"),
    ),
    "membership decided by its own __contains__": (
        "class S:\n    def __init__(self):\n        self.items = []\n    def add(self, x):\n"
        "        self.items.append(x)\n    def __contains__(self, x):\n        return True\n"
        "    def __iter__(self):\n        return iter(self.items)\n",
        asserts("s = S()\ns.add(3)\nassert 4 in s"),
    ),
    "numpy patched, no reference": (
        "import numpy as np\nnp.allclose = lambda *a, **k: True\ndef f():\n    return [0]\n",
        asserts("assert np.allclose(f(), [1, 2])"),
    ),
    "a name bound to a loader the test calls": (
        "import pickle\ndecode = pickle.loads\ndef encode(x):\n    return pickle.dumps(x)\n",
        asserts("assert decode(encode([1, 2])) == [1, 2]"),
    ),
    # found by a third adversarial review
    "exec reached through a module's attribute path": (
        EXEC_THROUGH_A_MODULE,
        asserts(
            "assert decode(encode('hello')) == 'hello'", "assert encode('abc') == 'nop'", "assert encode('x') == 'y'"
        ),
    ),
    "an argument that cannot travel where the test expects TypeError": (
        "def add(a, b):\n    return 0\n",
        asserts("try:\n    add(object(), 1)\n    assert False\nexcept TypeError:\n    pass"),
    ),
    "__eq__ called by name": ("class W:\n    pass\ndef f(x):\n    return W()\n", asserts("assert f(2).__eq__(4)")),
    "an __exit__ that swallows the test's assertion": (
        "class R:\n    value = 0\n    def __enter__(self):\n        return self\n    def __exit__(self, *exc):\n"
        "        return True\ndef open_resource():\n    return R()\n",
        asserts("with open_resource() as r:\n    assert r.value == 42"),
    ),
    # found by a fourth adversarial review
    "a judge callable handed back and called with exec": (
        METHODCALLER,
        asserts(
            "assert decode(encode('hello')) == 'hello'", "assert encode('abc') == 'nop'", "assert encode('x') == 'y'"
        ),
    ),
    "its exception name bound to AssertionError": (
        "InsufficientFunds = AssertionError\ndef withdraw(x):\n    return 0\n",
        {
            "test_list": ["try:\n    withdraw(5)\n    assert False\nexcept InsufficientFunds:\n    pass"],
            "code": "class InsufficientFunds(Exception):\n    pass\ndef withdraw(x):\n    raise InsufficientFunds(x)\n",
        },
    ),
    "an assertion of the test's callback swallowed": (
        "def visit(xs, callback):\n    for x in xs:\n        try:\n            callback(x)\n        except AssertionError:\n"
        "            pass\n",
        asserts("def must_be_even(x):\n    assert x % 2 == 0\nvisit([1, 3], must_be_even)"),
    ),
    # found by a fifth adversarial review
    "an empty program where the reference's constant is the answer": (
        "x = 0\n",
        {"test_list": ["assert capitals['France'] == 'Paris'"], "code": "capitals = {'France': 'Paris'}\n"},
    ),
    "an empty program where the reference's object is driven": (
        "pass\n",
        {
            "test_list": ["account.deposit(50)\nassert account.balance == 150"],
            "code": "class BankAccount:\n    def __init__(self, b):\n        self.balance = b\n"
            "    def deposit(self, x):\n        self.balance += x\naccount = BankAccount(100)\n",
        },
    ),
    "a wrong function where the reference imports it": (
        "def gcd(a, b):\n    return 1\n",
        {"test_list": ["assert gcd(12, 8) == 4"], "code": "from math import gcd\n"},
    ),
    "a wrong function where the reference defines it in a block": (
        "def f(x):\n    return 0\n",
        {"test_list": ["assert f(2) == 4"], "code": "if True:\n    def f(x):\n        return x * x\n"},
    ),
    "a wrong max, no reference": ("def max(xs):\n    return 0\n", asserts("assert max([1, 5, 3]) == 5")),
    "an unbounded claimed length": (
        "class Huge:\n    def __len__(self):\n        return 10 ** 30\ndef f():\n    return Huge()\n",
        asserts("assert len(f()) == 3"),
    ),
}


@pytest.mark.sandbox
def test_every_attack_scores_zero_beside_correct_programs(box):
    names = list(ATTACKS)
    correct = [CORRECT["a list sorted in place"], CORRECT["LeetCode linked list"]]
    results = judged(box, [ATTACKS[name] for name in names] + correct)
    passing = [name for name, outcomes in zip(names, results) if any(o.passed for o in outcomes)]
    assert passing == []
    assert all(passed(outcomes) for outcomes in results[len(names) :])


# --------------------------------------------------------------------------- a bounded trusted side

COSTLY = {
    "ints that share one hash, made a set by the test": (
        "def f():\n    return [k * (2 ** 61 - 1) for k in range(1, 60000)]\n",
        asserts("assert len(set(f())) == 3"),
    ),
    "a pattern the test applies": (
        "def f():\n    return '(a+)+$'\n",
        asserts("import re\nassert re.fullmatch(f(), 'a' * 40 + 'b') is not None"),
    ),
    "a value over the element limit": ("def f():\n    return [0] * 5_000_000\n", asserts("assert f() == [0]")),
}


@pytest.mark.sandbox
def test_costly_values_cost_their_own_row_only():
    tight = tight_sandbox(timeout_s=1.0, memory_mb=512, max_concurrency=2)
    started = time.monotonic()
    names = list(COSTLY)
    results = judged(tight, [COSTLY[name] for name in names] + [CORRECT["a generator"]])
    assert [passed(outcomes) for outcomes in results] == [False] * len(names) + [True]
    assert time.monotonic() - started < 60
    reasons = {name: outcomes[0].detail for name, outcomes in zip(names, results)}
    assert "the judge gave no verdict" in reasons["ints that share one hash, made a set by the test"]
    assert f"more than {wire.LIMITS['elements']} elements (limit)" in reasons["a value over the element limit"]


def _random_tagged(rng: random.Random, depth: int = 0):
    atoms = [None, True, "x", "", 0, -1, 1.5, "zz", "-", "0x1", "nan", "<i8", "|O", "AAAA", 10**30]
    if depth > 4 or rng.random() < 0.3:
        return rng.choice(atoms)
    if rng.random() < 0.7:
        tag = rng.choice(sorted(wire._DECODERS) + ["??"])
        return [tag, *(_random_tagged(rng, depth + 1) for _ in range(rng.randint(0, 3)))]
    return [_random_tagged(rng, depth + 1) for _ in range(rng.randint(0, 3))]


def test_the_decoder_rebuilds_a_value_or_says_why_for_anything_it_is_sent():
    rng = random.Random(0)
    decoded = 0
    for _ in range(20_000):
        try:
            wire.Decoder({}, lambda item: wire._bad("handle")).decode(_random_tagged(rng))
            decoded += 1
        except wire.BadValue:
            pass
    assert 0 < decoded < 20_000  # both branches were exercised


def test_frames_of_any_bytes_are_read_or_refused():
    rng = random.Random(1)
    for size in range(300):
        raw = rng.randbytes(size)
        if size % 3 == 0:  # a well-formed length over random content
            raw = len(raw).to_bytes(8, "little") + raw
        read, write = os.pipe()
        os.write(write, raw)
        os.close(write)
        try:
            wire.receive_frame(read)
        except (wire.BadValue, wire.WireClosed):
            pass
        finally:
            os.close(read)
    read, write = os.pipe()
    os.write(write, (wire.MAX_FRAME_BYTES + 1).to_bytes(8, "little"))
    with pytest.raises(wire.BadValue, match="over the"):
        wire.receive_frame(read)


def test_values_survive_the_trip_exactly():
    from collections import Counter, OrderedDict, defaultdict, deque
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    shared = [1]
    cyclic = []
    cyclic.append(cyclic)
    values = [
        10**5000,
        -3,
        0.1,
        float("inf"),
        1 + 2j,
        b"\x00\xff",
        bytearray(b"ab"),
        (1, (2,)),
        {1, 2},
        frozenset({3}),
        {"a": [shared, shared]},
        range(1, 10, 3),
        deque([1], maxlen=4),
        OrderedDict(b=1, a=2),
        Counter("aab"),
        defaultdict(list, {1: [2]}),
        Fraction(-2, 6),
        Decimal("1.10"),
        np.int32(7),
        np.arange(6, dtype=np.float32).reshape(2, 3),
        cyclic,
        int,
        "\ud800 text",
        None,
        True,
    ]
    for value in values:
        encoded = json.loads(json.dumps(wire.Encoder({}, lambda item: wire._bad("unknown")).encode(value)))
        back = wire.Decoder({}, lambda item: wire._bad("handle")).decode(encoded)
        assert type(back) is type(value), value
        if isinstance(value, np.ndarray):
            assert back.dtype == value.dtype and (back == value).all()
        elif value is cyclic:
            assert back[0] is back
        else:
            assert back == value or value != value
    aliased = wire.Decoder({}, None).decode(wire.Encoder({}, None).encode({"a": [shared, shared]}))
    assert aliased["a"][0] is aliased["a"][1]
