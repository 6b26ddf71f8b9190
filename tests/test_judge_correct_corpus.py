"""Correct programs in the forms datasets use, each scored through ``diffugrpo rewards score``: every one must
get ``code`` 1.0 (issue 58's fidelity adversary).

Written as a dataset author and a policy would write them, from the user docs alone: LeetCodeDataset rows
(``class Solution``, the dataset's preamble of ``ListNode``/``TreeNode`` helpers and star imports), APPS /
CodeContests stdin/stdout programs, HumanEval ``check(candidate)`` modules, MBPP asserts with setup code and
imports, class-implementation tasks, and C++/Java/JavaScript stdin and MultiPL-E function tasks. Each program
was run against its tests with plain Python (or the language's compiler) first, so a case below that fails is
the judge rejecting what the language accepts. The cases the judge rejects today are listed in
``REJECTED_TODAY`` with the cause and asserted rejected, so a fix fails the test until its id is taken out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.sandbox  # every case runs its program in the sandbox


LEETCODE_PREAMBLE = textwrap.dedent(
    """\
    import random
    import functools
    import collections
    import string
    import math
    import datetime

    from typing import *
    from functools import *
    from collections import *
    from itertools import *
    from heapq import *
    from bisect import *
    from string import *
    from operator import *
    from math import *

    inf = float('inf')

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
)

CASES: list[tuple[str, str, dict]] = []  # (id, form, row)


def _fence(code: str, language: str = "python") -> str:
    return f"```{language}\n{textwrap.dedent(code).strip()}\n```\n"


def _add(case_id: str, form: str, code: str, columns: dict, language: str = "python"):
    row = {"id": case_id, "completion": _fence(code, language), **columns}
    if language != "python":
        row["language"] = language
    CASES.append((case_id, form, row))


def leetcode(case_id: str, entry: str, code: str, check: str):
    """A LeetCodeDataset row as ``diffugrpo data prepare --source leetcode`` writes it."""
    test = textwrap.dedent(check).strip() + "\n"
    columns = {
        "test_cases": [f"{test}\ncheck(Solution().{entry})"],
        "test": test,
        "entry_point": f"Solution().{entry}",
        "test_imports": [LEETCODE_PREAMBLE],
        "reference_solution": textwrap.dedent(code).strip() + "\n",
    }
    _add(case_id, "leetcode", code, columns)


def stdio(case_id: str, code: str, inputs: list[str], outputs: list[str], language: str = "python"):
    _add(case_id, "stdio", code, {"inputs": inputs, "outputs": outputs}, language)


def humaneval(case_id: str, entry: str, code: str, check: str, preamble: str = ""):
    columns = {"test": textwrap.dedent(check).strip() + "\n", "entry_point": entry}
    if preamble:
        columns["test_imports"] = [textwrap.dedent(preamble).strip() + "\n"]
    _add(case_id, "humaneval", code, columns)


def mbpp(case_id: str, code: str, tests: list[str], setup: str = "", imports=(), reference: str | None = None):
    columns = {"test_list": tests, "test_setup_code": setup, "test_imports": list(imports)}
    columns["reference_solution"] = textwrap.dedent(reference or code).strip() + "\n"
    _add(case_id, "mbpp", code, columns)


def class_task(case_id: str, code: str, tests: list[str], preamble: str = ""):
    columns = {"test_cases": [textwrap.dedent(t).strip() for t in tests]}
    columns["reference_solution"] = textwrap.dedent(code).strip() + "\n"
    if preamble:
        columns["test_imports"] = [textwrap.dedent(preamble).strip() + "\n"]
    _add(case_id, "class", code, columns)


# ---------------------------------------------------------------- LeetCode
leetcode(
    "lc_two_sum",
    "twoSum",
    """
    class Solution:
        def twoSum(self, nums: List[int], target: int) -> List[int]:
            seen = {}
            for i, x in enumerate(nums):
                if target - x in seen:
                    return [seen[target - x], i]
                seen[x] = i
    """,
    """
    def check(candidate):
        assert candidate(nums = [2,7,11,15], target = 9) == [0, 1]
        assert candidate(nums = [3,3], target = 6) == [0, 1]
    """,
)
leetcode(
    "lc_reverse_list",
    "reverseList",
    """
    class Solution:
        def reverseList(self, head: Optional[ListNode]) -> Optional[ListNode]:
            prev = None
            while head:
                head.next, prev, head = prev, head, head.next
            return prev
    """,
    """
    def check(candidate):
        assert is_same_list(candidate(head = list_node([1, 2, 3, 4, 5])), list_node([5, 4, 3, 2, 1]))
        assert is_same_list(candidate(head = list_node([])), list_node([]))
    """,
)
leetcode(
    "lc_merge_lists_new_nodes",
    "mergeTwoLists",
    """
    class Solution:
        def mergeTwoLists(self, list1: Optional[ListNode], list2: Optional[ListNode]) -> Optional[ListNode]:
            dummy = tail = ListNode()
            while list1 and list2:
                if list1.val <= list2.val:
                    tail.next, list1 = ListNode(list1.val), list1.next
                else:
                    tail.next, list2 = ListNode(list2.val), list2.next
                tail = tail.next
            tail.next = list1 or list2
            return dummy.next
    """,
    """
    def check(candidate):
        assert is_same_list(candidate(list1 = list_node([1,2,4]), list2 = list_node([1,3,4])), list_node([1,1,2,3,4,4]))
        assert is_same_list(candidate(list1 = list_node([]), list2 = list_node([0])), list_node([0]))
    """,
)
leetcode(
    "lc_invert_tree",
    "invertTree",
    """
    class Solution:
        def invertTree(self, root: Optional[TreeNode]) -> Optional[TreeNode]:
            if root:
                root.left, root.right = self.invertTree(root.right), self.invertTree(root.left)
            return root
    """,
    """
    def check(candidate):
        assert is_same_tree(candidate(root = tree_node([4,2,7,1,3,6,9])), tree_node([4,7,2,9,6,3,1]))
        assert is_same_tree(candidate(root = tree_node([])), tree_node([]))
    """,
)
leetcode(
    "lc_level_order",
    "levelOrder",
    """
    class Solution:
        def levelOrder(self, root: Optional[TreeNode]) -> List[List[int]]:
            levels, queue = [], deque([root] if root else [])
            while queue:
                levels.append([node.val for node in queue])
                queue = deque(child for node in queue for child in (node.left, node.right) if child)
            return levels
    """,
    """
    def check(candidate):
        assert candidate(root = tree_node([3,9,20,None,None,15,7])) == [[3],[9,20],[15,7]]
        assert candidate(root = tree_node([])) == []
    """,
)
leetcode(
    "lc_sort_colors_in_place",
    "sortColors",
    """
    class Solution:
        def sortColors(self, nums: List[int]) -> None:
            counts = Counter(nums)
            nums[:] = [c for c in (0, 1, 2) for _ in range(counts[c])]
    """,
    """
    def check(candidate):
        nums = [2,0,2,1,1,0]
        assert candidate(nums) is None
        assert nums == [0,0,1,1,2,2]
    """,
)
leetcode(
    "lc_preamble_star_imports",
    "kthLargest",
    """
    class Solution:
        def kthLargest(self, nums: List[int], k: int) -> int:
            heap = []
            for x in nums:
                heappush(heap, x)
                if len(heap) > k:
                    heappop(heap)
            best = -inf
            return max(best, heap[0]) if heap else bisect_left([], 0)
    """,
    """
    def check(candidate):
        assert candidate(nums = [3,2,1,5,6,4], k = 2) == 5
        assert candidate(nums = [3,2,3,1,2,4,5,5,6], k = 4) == 4
    """,
)
leetcode(
    "lc_cache_deep_recursion",
    "climbStairs",
    """
    import sys
    sys.setrecursionlimit(10000)
    class Solution:
        def climbStairs(self, n: int) -> int:
            @cache
            def ways(i):
                return 1 if i <= 1 else ways(i - 1) + ways(i - 2)
            return ways(n)
    """,
    """
    def check(candidate):
        assert candidate(n = 2) == 2
        assert candidate(n = 45) == 1836311903
        assert candidate(n = 3000) % 1000 == 0 or candidate(n = 3000) > 0
    """,
)
leetcode(
    "lc_median_float",
    "findMedianSortedArrays",
    """
    class Solution:
        def findMedianSortedArrays(self, nums1: List[int], nums2: List[int]) -> float:
            merged = sorted(nums1 + nums2)
            n = len(merged)
            return merged[n // 2] if n % 2 else (merged[n // 2 - 1] + merged[n // 2]) / 2
    """,
    """
    def check(candidate):
        assert candidate(nums1 = [1,3], nums2 = [2]) == 2
        assert candidate(nums1 = [1,2], nums2 = [3,4]) == 2.5
    """,
)
leetcode(
    "lc_group_anagrams",
    "groupAnagrams",
    """
    class Solution:
        def groupAnagrams(self, strs: List[str]) -> List[List[str]]:
            groups = defaultdict(list)
            for s in strs:
                groups[''.join(sorted(s))].append(s)
            return list(groups.values())
    """,
    """
    def check(candidate):
        assert sorted(map(sorted, candidate(strs = ["eat","tea","tan","ate","nat","bat"]))) == [['ate', 'eat', 'tea'], ['bat'], ['nat', 'tan']]
        assert candidate(strs = [""]) == [[""]]
    """,
)
leetcode(
    "lc_helper_class_trie",
    "longestCommonPrefix",
    """
    class TrieNode:
        def __init__(self):
            self.children = {}
            self.count = 0

    class Solution:
        def longestCommonPrefix(self, strs: List[str]) -> str:
            root = TrieNode()
            for s in strs:
                node = root
                for ch in s:
                    node = node.children.setdefault(ch, TrieNode())
                    node.count += 1
            prefix, node = [], root
            while len(node.children) == 1:
                (ch, child), = node.children.items()
                if child.count != len(strs):
                    break
                prefix.append(ch)
                node = child
            return ''.join(prefix)
    """,
    """
    def check(candidate):
        assert candidate(strs = ["flower","flow","flight"]) == "fl"
        assert candidate(strs = ["dog","racecar","car"]) == ""
    """,
)
leetcode(
    "lc_generate_trees_list_of_nodes",
    "generateTrees",
    """
    class Solution:
        def generateTrees(self, n: int) -> List[Optional[TreeNode]]:
            def build(lo, hi):
                if lo > hi:
                    return [None]
                return [TreeNode(v, l, r) for v in range(lo, hi + 1) for l in build(lo, v - 1) for r in build(v + 1, hi)]
            return build(1, n)
    """,
    """
    def check(candidate):
        trees = candidate(n = 3)
        assert len(trees) == 5
        assert sorted(t.val for t in trees) == [1, 1, 2, 3, 3]
        assert is_same_tree(trees[0], tree_node([1, None, 2, None, 3]))
    """,
)
leetcode(
    "lc_bool_and_string",
    "isPalindrome",
    """
    class Solution:
        def isPalindrome(self, s: str) -> bool:
            kept = [c.lower() for c in s if c.isalnum()]
            return kept == kept[::-1]
    """,
    """
    def check(candidate):
        assert candidate(s = "A man, a plan, a canal: Panama") == True
        assert candidate(s = "race a car") == False
    """,
)

# ---------------------------------------------------------------- stdin/stdout (APPS, CodeContests)
stdio(
    "io_read_all",
    """
    import sys
    data = sys.stdin.read().split()
    n = int(data[0])
    print(sum(map(int, data[1:1 + n])))
    """,
    ["3\n1 2 3\n", "1\n-7\n"],
    ["6\n", "-7\n"],
)
stdio(
    "io_readline_multitest",
    """
    import sys
    input = sys.stdin.readline
    t = int(input())
    for _ in range(t):
        a, b = map(int, input().split())
        print(a * b)
    """,
    ["3\n1 2\n3 4\n5 6\n"],
    ["2\n12\n30\n"],
)
stdio(
    "io_print_sep_end",
    """
    n = int(input())
    xs = list(map(int, input().split()))
    print(*sorted(xs), sep=' ', end='\\n')
    print('min', min(xs), sep=': ')
    """,
    ["4\n3 1 4 1\n"],
    ["1 1 3 4\nmin: 1\n"],
)
stdio(
    "io_trailing_space_no_newline",
    """
    n = int(input())
    for i in range(1, n + 1):
        print(i * i, end=' ')
    """,
    ["4\n"],
    ["1 4 9 16\n"],
)
stdio(
    "io_expected_without_newline",
    """
    print(int(input()) * 2)
    """,
    ["21\n"],
    ["42"],
)
stdio(
    "io_large_output",
    """
    import sys
    n = int(sys.stdin.readline())
    sys.stdout.write('\\n'.join(str(i) for i in range(n)) + '\\n')
    """,
    ["200000\n"],
    ["\n".join(str(i) for i in range(200000)) + "\n"],
)
stdio(
    "io_debug_to_stderr_2mb",
    """
    import sys
    n = int(input())
    for i in range(n):
        print('debug: state', i, 'x' * 40, file=sys.stderr)
    print(n * (n - 1) // 2)
    """,
    ["40000\n"],
    [f"{40000 * 39999 // 2}\n"],
)
stdio(
    "io_flush_at_exit_atexit",
    """
    import atexit
    import io
    import sys
    _buffer = io.StringIO()
    atexit.register(lambda: sys.__stdout__.write(_buffer.getvalue()))
    sys.stdout = _buffer
    for line in sys.stdin:
        print(line.strip()[::-1])
    """,
    ["abc\nxyz\n"],
    ["cba\nzyx\n"],
)
stdio(
    "io_os_exit_after_flush",
    """
    import os
    import sys
    n = int(sys.stdin.readline())
    sys.stdout.write(str(n + 1) + '\\n')
    sys.stdout.flush()
    os._exit(0)
    """,
    ["41\n"],
    ["42\n"],
)
stdio(
    "io_recursion_thread_stack",
    """
    import sys
    import threading

    def main():
        n = int(sys.stdin.readline())
        def depth(i):
            return 0 if i == 0 else 1 + depth(i - 1)
        print(depth(n))

    sys.setrecursionlimit(1 << 20)
    threading.stack_size(1 << 27)
    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    """,
    ["100000\n"],
    ["100000\n"],
)
stdio(
    "io_16_threads_pool",
    """
    import sys
    from concurrent.futures import ThreadPoolExecutor
    nums = list(map(int, sys.stdin.read().split()))
    with ThreadPoolExecutor(max_workers=16) as pool:
        squares = list(pool.map(lambda x: x * x, nums))
    print(sum(squares))
    """,
    ["1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n"],
    ["2870\n"],
)
stdio(
    "io_24_threads",
    """
    import sys
    import threading
    nums = list(map(int, sys.stdin.read().split()))
    results = [0] * 24
    def work(k):
        results[k] = sum(x for i, x in enumerate(nums) if i % 24 == k)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sum(results))
    """,
    [" ".join(map(str, range(1000))) + "\n"],
    [f"{sum(range(1000))}\n"],
)
stdio(
    "io_pyrival_fastio",
    """
    import os
    import sys
    from io import BytesIO, IOBase

    BUFSIZE = 8192

    class FastIO(IOBase):
        newlines = 0
        def __init__(self, file):
            self._fd = file.fileno()
            self.buffer = BytesIO()
            self.writable = "x" in file.mode or "r" not in file.mode
            self.write = self.buffer.write if self.writable else None
        def read(self):
            while True:
                b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
                if not b:
                    break
                ptr = self.buffer.tell()
                self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
            self.newlines = 0
            return self.buffer.read()
        def readline(self):
            while self.newlines == 0:
                b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
                self.newlines = b.count(b"\\n") + (not b)
                ptr = self.buffer.tell()
                self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
            self.newlines -= 1
            return self.buffer.readline()
        def flush(self):
            if self.writable:
                os.write(self._fd, self.buffer.getvalue())
                self.buffer.truncate(0), self.buffer.seek(0)

    class IOWrapper(IOBase):
        def __init__(self, file):
            self.buffer = FastIO(file)
            self.flush = self.buffer.flush
            self.writable = self.buffer.writable
            self.write = lambda s: self.buffer.write(s.encode("ascii"))
            self.read = lambda: self.buffer.read().decode("ascii")
            self.readline = lambda: self.buffer.readline().decode("ascii")

    sys.stdin, sys.stdout = IOWrapper(sys.stdin), IOWrapper(sys.stdout)
    input = lambda: sys.stdin.readline().rstrip("\\r\\n")

    def main():
        t = int(input())
        for _ in range(t):
            n = int(input())
            a = list(map(int, input().split()))
            print(max(a) - min(a))

    main()
    """,
    ["2\n3\n1 5 3\n1\n7\n"],
    ["4\n0\n"],
)
stdio(
    "io_buffer_bytes",
    """
    import sys
    data = sys.stdin.buffer.read().split()
    out = [str(int(x) ** 2).encode() for x in data[1:]]
    sys.stdout.buffer.write(b'\\n'.join(out) + b'\\n')
    """,
    ["3\n2 3 4\n"],
    ["4\n9\n16\n"],
)
stdio(
    "io_eof_loop_and_exit",
    """
    import sys
    total = 0
    while True:
        try:
            line = input()
        except EOFError:
            break
        total += sum(map(int, line.split()))
    print(total)
    sys.exit(0)
    """,
    ["1 2\n3\n"],
    ["6\n"],
)
stdio(
    "io_float_format",
    """
    import math
    r = float(input())
    print('%.6f' % (math.pi * r * r))
    print(f'{r / 3:.3f}')
    """,
    ["2\n"],
    ["12.566371\n0.667\n"],
)
stdio(
    "io_numpy",
    """
    import sys
    import numpy as np
    a = np.array(sys.stdin.read().split(), dtype=np.int64)
    print(int(a.sum()), int(a.max()))
    """,
    ["5 1 9 2\n"],
    ["17 9\n"],
)
stdio(
    "io_sys_exit_main",
    """
    import sys
    def main():
        print(len(sys.stdin.readline().strip()))
        return 0
    if __name__ == '__main__':
        sys.exit(main())
    """,
    ["hello\n"],
    ["5\n"],
)
_add(
    "io_test_cases_dicts",
    "stdio",
    "print(' '.join(reversed(input().split())))",
    {"test_cases": [{"input": "a b c\n", "output": "c b a\n"}, {"input": "x\n", "output": "x\n"}]},
)

# ---------------------------------------------------------------- HumanEval check(candidate)
humaneval(
    "he_returns_time",
    "add_minutes",
    """
    from datetime import time
    def add_minutes(t: time, minutes: int) -> time:
        total = t.hour * 60 + t.minute + minutes
        return time(total // 60 % 24, total % 60)
    """,
    """
    from datetime import time
    def check(candidate):
        assert candidate(time(9, 45), 30) == time(10, 15)
        assert candidate(time(23, 50), 20) == time(0, 10)
    """,
)
humaneval(
    "he_returns_datetime_timedelta",
    "days_between",
    """
    from datetime import date, timedelta
    def days_between(a: date, b: date) -> timedelta:
        return b - a
    """,
    """
    from datetime import date, timedelta
    def check(candidate):
        assert candidate(date(2024, 1, 1), date(2024, 3, 1)) == timedelta(days=60)
        assert candidate(date(2024, 1, 1), date(2024, 3, 1)).days == 60
    """,
)
humaneval(
    "he_fraction_decimal",
    "harmonic",
    """
    from fractions import Fraction
    def harmonic(n):
        return sum(Fraction(1, k) for k in range(1, n + 1))
    """,
    """
    from fractions import Fraction
    from decimal import Decimal
    def check(candidate):
        assert candidate(3) == Fraction(11, 6)
        assert Decimal(candidate(4).numerator) / Decimal(candidate(4).denominator) > Decimal('2.08')
    """,
)
humaneval(
    "he_preamble_namedtuple",
    "midpoint",
    """
    def midpoint(a: Point, b: Point) -> Point:
        return Point((a.x + b.x) / 2, (a.y + b.y) / 2)
    """,
    """
    def check(candidate):
        assert candidate(Point(0, 0), Point(2, 4)) == Point(1.0, 2.0)
        assert candidate(Point(1, 1), Point(1, 1)).x == 1
    """,
    preamble="""
    from collections import namedtuple
    Point = namedtuple('Point', ['x', 'y'])
    """,
)
humaneval(
    "he_own_namedtuple_vs_tuple",
    "min_max",
    """
    from typing import NamedTuple
    class MinMax(NamedTuple):
        low: int
        high: int
    def min_max(xs):
        return MinMax(min(xs), max(xs))
    """,
    """
    def check(candidate):
        assert candidate([3, 1, 2]) == (1, 3)
        low, high = candidate([5])
        assert (low, high) == (5, 5)
    """,
)
humaneval(
    "he_preamble_dataclass",
    "cheapest",
    """
    def cheapest(items: list) -> Item:
        return min(items, key=lambda item: item.price)
    """,
    """
    def check(candidate):
        assert candidate([Item('a', 3.0), Item('b', 1.5)]) == Item('b', 1.5)
        assert candidate([Item('z', 0.0)]).name == 'z'
    """,
    preamble="""
    from dataclasses import dataclass
    @dataclass
    class Item:
        name: str
        price: float
    """,
)
humaneval(
    "he_preamble_list_subclass",
    "make_path",
    """
    def make_path(points):
        return Path(points)
    """,
    """
    def check(candidate):
        path = candidate([1, 2, 3])
        assert path == [1, 2, 3]
        assert path.length() == 3
        assert isinstance(path, Path)
    """,
    preamble="""
    class Path(list):
        def length(self):
            return len(self)
    """,
)
humaneval(
    "he_returns_userlist",
    "evens",
    """
    from collections import UserList
    def evens(xs):
        return UserList(x for x in xs if x % 2 == 0)
    """,
    """
    def check(candidate):
        assert candidate([1, 2, 3, 4]) == [2, 4]
        assert len(candidate([1, 3])) == 0
    """,
)
humaneval(
    "he_returns_exception_instance",
    "validate",
    """
    def validate(age):
        if age < 0:
            return ValueError('negative age')
        return None
    """,
    """
    def check(candidate):
        error = candidate(-1)
        assert isinstance(error, ValueError)
        assert str(error) == 'negative age'
        assert candidate(5) is None
    """,
)
humaneval(
    "he_raises_expected",
    "safe_sqrt",
    """
    import math
    def safe_sqrt(x):
        if x < 0:
            raise ValueError('x must be non-negative')
        return math.sqrt(x)
    """,
    """
    def check(candidate):
        assert candidate(9) == 3.0
        try:
            candidate(-1)
        except ValueError as e:
            assert 'non-negative' in str(e)
        else:
            assert False, 'no ValueError'
    """,
)
humaneval(
    "he_generator",
    "countdown",
    """
    def countdown(n):
        while n > 0:
            yield n
            n -= 1
    """,
    """
    def check(candidate):
        assert list(candidate(3)) == [3, 2, 1]
        g = candidate(2)
        assert next(g) == 2
        assert next(g) == 1
        try:
            next(g)
        except StopIteration:
            pass
        else:
            assert False
    """,
)
humaneval(
    "he_generator_send",
    "running_total",
    """
    def running_total():
        total = 0
        while True:
            x = yield total
            total += x
    """,
    """
    def check(candidate):
        g = candidate()
        assert next(g) == 0
        assert g.send(5) == 5
        assert g.send(3) == 8
    """,
)
humaneval(
    "he_coroutine_asyncio_run",
    "double_later",
    """
    import asyncio
    async def double_later(x):
        await asyncio.sleep(0)
        return 2 * x
    """,
    """
    import asyncio
    def check(candidate):
        assert asyncio.run(candidate(21)) == 42
    """,
)
humaneval(
    "he_sets_frozensets",
    "unique_pairs",
    """
    def unique_pairs(xs):
        return frozenset(frozenset((a, b)) for a in xs for b in xs if a < b)
    """,
    """
    def check(candidate):
        assert candidate([1, 2, 3]) == {frozenset({1, 2}), frozenset({1, 3}), frozenset({2, 3})}
        assert frozenset({1, 2}) in candidate([2, 1])
        assert candidate([]) == set()
    """,
)
humaneval(
    "he_nested_structures",
    "index_words",
    """
    def index_words(text):
        index = {}
        for pos, word in enumerate(text.split()):
            index.setdefault(word, {'count': 0, 'at': []})
            index[word]['count'] += 1
            index[word]['at'].append((pos, len(word)))
        return index
    """,
    """
    def check(candidate):
        assert candidate('a bb a') == {'a': {'count': 2, 'at': [(0, 1), (2, 1)]}, 'bb': {'count': 1, 'at': [(1, 2)]}}
    """,
)
humaneval(
    "he_numpy_allclose",
    "normalize",
    """
    import numpy as np
    def normalize(v):
        v = np.asarray(v, dtype=float)
        return v / np.linalg.norm(v)
    """,
    """
    import numpy as np
    def check(candidate):
        assert np.allclose(candidate([3, 4]), np.array([0.6, 0.8]))
        assert candidate(np.array([1.0, 0.0])).shape == (2,)
        assert abs(float(np.linalg.norm(candidate([1, 2, 2]))) - 1.0) < 1e-9
    """,
)
humaneval(
    "he_float_tolerance",
    "mean",
    """
    def mean(xs):
        return sum(xs) / len(xs)
    """,
    """
    import math
    def check(candidate):
        assert math.isclose(candidate([0.1, 0.2, 0.3]), 0.2)
        assert abs(candidate([1, 2]) - 1.5) < 1e-6
    """,
)
humaneval(
    "he_key_str_lower",
    "sort_words",
    """
    def sort_words(words, key=None):
        return sorted(words, key=key)
    """,
    """
    def check(candidate):
        assert candidate(['b', 'A', 'c'], key=str.lower) == ['A', 'b', 'c']
        assert candidate(['bb', 'a'], key=len) == ['a', 'bb']
    """,
)
humaneval(
    "he_map_math_sqrt",
    "total",
    """
    def total(values):
        return sum(values)
    """,
    """
    import math
    def check(candidate):
        assert candidate(map(math.sqrt, [4, 9, 16])) == 9.0
    """,
)
humaneval(
    "he_stdlib_function_argument",
    "apply_all",
    """
    def apply_all(f, xs):
        return [f(x) for x in xs]
    """,
    """
    import math
    def check(candidate):
        assert candidate(math.factorial, [3, 4]) == [6, 24]
        assert candidate(str.upper, ['a', 'b']) == ['A', 'B']
        assert candidate(abs, [-1, 2]) == [1, 2]
    """,
)
humaneval(
    "he_lambda_handed_back",
    "pick",
    """
    def pick(table, name):
        return table[name]
    """,
    """
    def check(candidate):
        ops = {'double': lambda x: 2 * x, 'neg': lambda x: -x}
        assert candidate(ops, 'double')(4) == 8
        assert candidate(ops, 'neg') is ops['neg']
    """,
)
humaneval(
    "he_returns_closure",
    "make_adder",
    """
    def make_adder(n):
        return lambda x: x + n
    """,
    """
    def check(candidate):
        add3 = candidate(3)
        assert add3(4) == 7
        assert list(map(candidate(1), [1, 2])) == [2, 3]
    """,
)
humaneval(
    "he_reference_reduce",
    "product",
    """
    from functools import reduce
    def product(xs):
        return reduce(lambda a, b: a * b, xs, 1)
    """,
    """
    from functools import reduce
    def check(candidate):
        assert candidate([1, 2, 3, 4]) == reduce(lambda a, b: a * b, [1, 2, 3, 4])
    """,
)
humaneval(
    "he_test_sets_random_seed",
    "shuffled",
    """
    import random
    def shuffled(xs):
        ys = list(xs)
        random.shuffle(ys)
        return ys
    """,
    """
    import random
    def check(candidate):
        random.seed(42)
        assert candidate(range(10)) == [7, 3, 2, 8, 5, 6, 9, 4, 0, 1]
    """,
)
humaneval(
    "he_redirect_stdout",
    "greet",
    """
    def greet(name):
        print(f'Hello, {name}!')
    """,
    """
    import io
    from contextlib import redirect_stdout
    def check(candidate):
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            candidate('Ada')
        assert buffer.getvalue() == 'Hello, Ada!\\n'
    """,
)
humaneval(
    "he_test_raises_recursion_limit",
    "depth",
    """
    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)
    """,
    """
    import sys
    def check(candidate):
        sys.setrecursionlimit(10000)
        assert candidate(5000) == 5000
    """,
)
humaneval(
    "he_decimal_context_set_by_test",
    "divide",
    """
    from decimal import Decimal
    def divide(a, b):
        return Decimal(a) / Decimal(b)
    """,
    """
    from decimal import Decimal, getcontext
    def check(candidate):
        getcontext().prec = 4
        assert candidate(1, 3) == Decimal('0.3333')
    """,
)
humaneval(
    "he_generator_side_effects",
    "logged_range",
    """
    def logged_range(n, log):
        for i in range(n):
            log.append(i)
            yield i
    """,
    """
    def check(candidate):
        log = []
        g = candidate(3, log)
        assert next(g) == 0
        assert log == [0]
    """,
)
humaneval(
    "he_test_defined_class_argument",
    "largest_box",
    """
    def largest_box(boxes):
        return max(box.volume for box in boxes)
    """,
    """
    def check(candidate):
        class Box:
            def __init__(self, volume):
                self.volume = volume
        assert candidate([Box(3), Box(7), Box(5)]) == 7
    """,
)
humaneval(
    "he_stringio_argument",
    "count_lines",
    """
    def count_lines(stream):
        return sum(1 for _ in stream)
    """,
    """
    import io
    def check(candidate):
        assert candidate(io.StringIO('a\\nb\\nc\\n')) == 3
    """,
)
humaneval(
    "he_type_checks",
    "parse_number",
    """
    def parse_number(s):
        return float(s) if '.' in s else int(s)
    """,
    """
    def check(candidate):
        assert type(candidate('3')) is int
        assert isinstance(candidate('3.5'), float)
        assert candidate('-2') == -2
    """,
)
humaneval(
    "he_stdlib_values_misc",
    "describe",
    """
    from pathlib import PurePosixPath
    from types import SimpleNamespace
    import uuid
    def describe(p):
        path = PurePosixPath(p)
        return SimpleNamespace(path=path, stem=path.stem, key=uuid.uuid5(uuid.NAMESPACE_DNS, p))
    """,
    """
    from pathlib import PurePosixPath
    import uuid
    def check(candidate):
        d = candidate('a/b/c.txt')
        assert d.path == PurePosixPath('a/b/c.txt')
        assert d.stem == 'c'
        assert d.key == uuid.uuid5(uuid.NAMESPACE_DNS, 'a/b/c.txt')
    """,
)
humaneval(
    "he_struct_time",
    "epoch_year",
    """
    import time
    def epoch_year(seconds):
        return time.gmtime(seconds)
    """,
    """
    def check(candidate):
        assert candidate(0).tm_year == 1970
        assert candidate(86400 * 366).tm_yday == 2
    """,
)
humaneval(
    "he_regex_match_object",
    "first_number",
    """
    import re
    def first_number(s):
        return re.search(r'\\d+', s)
    """,
    """
    def check(candidate):
        assert candidate('ab12cd').group() == '12'
        assert candidate('none') is None
    """,
)
humaneval(
    "he_ordered_dict_deque_chainmap",
    "collect",
    """
    from collections import OrderedDict, deque, ChainMap
    def collect(pairs):
        od = OrderedDict(pairs)
        return od, deque(od.values()), ChainMap(dict(od), {'extra': 0})
    """,
    """
    from collections import OrderedDict, deque
    def check(candidate):
        od, dq, cm = candidate([('b', 1), ('a', 2)])
        assert list(od.keys()) == ['b', 'a']
        assert dq == deque([1, 2])
        assert cm['extra'] == 0 and cm['a'] == 2
    """,
)
humaneval(
    "he_array_complex_bytes",
    "encode",
    """
    import array
    def encode(xs):
        return array.array('i', xs), complex(len(xs), 1), bytes(xs)
    """,
    """
    import array
    def check(candidate):
        arr, c, b = candidate([1, 2, 3])
        assert arr == array.array('i', [1, 2, 3])
        assert c == 3 + 1j
        assert b == b'\\x01\\x02\\x03'
    """,
)
humaneval(
    "he_preamble_enum",
    "parse_color",
    """
    def parse_color(name):
        return Color[name.upper()]
    """,
    """
    def check(candidate):
        assert candidate('red') is Color.RED
        assert candidate('green').value == 2
    """,
    preamble="""
    from enum import Enum
    class Color(Enum):
        RED = 1
        GREEN = 2
    """,
)
humaneval(
    "he_nan_inf_bigint",
    "extremes",
    """
    import math
    def extremes(n):
        return math.inf, math.nan, 3 ** n
    """,
    """
    import math
    def check(candidate):
        inf, nan, big = candidate(5000)
        assert inf == float('inf') and math.isnan(nan)
        assert big % 10 == pow(3, 5000, 10)
    """,
)

# ---------------------------------------------------------------- MBPP
mbpp(
    "mbpp_plain",
    """
    def remove_odd(xs):
        return [x for x in xs if x % 2 == 0]
    """,
    ["assert remove_odd([1,2,3]) == [2]", "assert remove_odd([2,4,6]) == [2,4,6]"],
)
mbpp(
    "mbpp_test_imports_math",
    """
    import math
    def hypotenuse(a, b):
        return math.sqrt(a * a + b * b)
    """,
    ["assert math.isclose(hypotenuse(3, 4), 5.0)", "assert math.isclose(hypotenuse(1, 1), 1.41421356, rel_tol=1e-6)"],
    imports=["import math"],
)
mbpp(
    "mbpp_setup_code_variable",
    """
    def count_above(xs, limit):
        return sum(1 for x in xs if x > limit)
    """,
    ["assert count_above(data, 2) == 3", "assert count_above(data, 10) == 0"],
    setup="data = [1, 2, 3, 4, 5]",
)
mbpp(
    "mbpp_setup_random_seed",
    """
    import random
    def pick(xs):
        return random.choice(xs)
    """,
    ["assert pick([1, 2, 3, 4, 5]) == 1"],
    setup="import random\nrandom.seed(42)",
)
mbpp(
    "mbpp_set_and_tuple",
    """
    def similar_elements(a, b):
        return tuple(sorted(set(a) & set(b)))
    """,
    [
        "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
        "assert similar_elements((1, 2),(3, 4)) == ()",
    ],
)
mbpp(
    "mbpp_regex_round",
    """
    import re
    def mean_of_numbers(text):
        nums = [float(x) for x in re.findall(r'-?\\d+(?:\\.\\d+)?', text)]
        return sum(nums) / len(nums)
    """,
    ["assert round(mean_of_numbers('a1 b2 c3.5'), 2) == 2.17"],
)
mbpp(
    "mbpp_reference_helper_reduce",
    """
    from functools import reduce
    def lcm_all(xs):
        from math import gcd
        return reduce(lambda a, b: a * b // gcd(a, b), xs)
    """,
    ["assert lcm_all([2, 3, 4]) == reduce(lambda a, b: a * b // __import__('math').gcd(a, b), [2, 3, 4])"],
    reference="""
    from functools import reduce
    from math import gcd
    def lcm_all(xs):
        return reduce(lambda a, b: a * b // gcd(a, b), xs)
    """,
)
mbpp(
    "mbpp_recursive_fib",
    """
    def fib(n):
        if n < 2:
            return n
        return fib(n - 1) + fib(n - 2)
    """,
    ["assert fib(10) == 55", "assert fib(1) == 1"],
)

# ---------------------------------------------------------------- class tasks
class_task(
    "cls_account_attrs_exceptions",
    """
    class InsufficientFunds(Exception):
        pass

    class Account:
        def __init__(self, balance=0):
            self.balance = balance
        def deposit(self, amount):
            if amount <= 0:
                raise ValueError('amount must be positive')
            self.balance += amount
        def withdraw(self, amount):
            if amount > self.balance:
                raise InsufficientFunds(f'balance {self.balance} < {amount}')
            self.balance -= amount
    """,
    [
        "acc = Account(10)\nacc.deposit(5)\nassert acc.balance == 15",
        "acc = Account(10)\ntry:\n    acc.withdraw(100)\nexcept InsufficientFunds as e:\n    assert '100' in str(e)\nelse:\n    assert False",
        "acc = Account()\ntry:\n    acc.deposit(-1)\n    raised = False\nexcept ValueError:\n    raised = True\nassert raised",
        "assert issubclass(InsufficientFunds, Exception)",
    ],
)
class_task(
    "cls_preamble_base_isinstance",
    """
    import math
    class Circle(Shape):
        def __init__(self, r):
            self.r = r
        def area(self):
            return math.pi * self.r ** 2
    """,
    [
        "c = Circle(1)\nassert isinstance(c, Shape)",
        "import math\nassert math.isclose(Circle(2).area(), 4 * math.pi)",
        "assert Circle(1).describe() == 'shape with area 3.14'",
    ],
    preamble="""
    class Shape:
        def area(self):
            raise NotImplementedError
        def describe(self):
            return f'shape with area {self.area():.2f}'
    """,
)
class_task(
    "cls_vector_dunders",
    """
    class Vector:
        def __init__(self, x, y):
            self.x, self.y = x, y
        def __add__(self, other):
            return Vector(self.x + other.x, self.y + other.y)
        def __eq__(self, other):
            return isinstance(other, Vector) and (self.x, self.y) == (other.x, other.y)
        def __hash__(self):
            return hash((self.x, self.y))
        def __repr__(self):
            return f'Vector({self.x}, {self.y})'
        def __abs__(self):
            return (self.x ** 2 + self.y ** 2) ** 0.5
    """,
    [
        "assert Vector(1, 2) + Vector(3, 4) == Vector(4, 6)",
        "assert repr(Vector(1, 2)) == 'Vector(1, 2)'",
        "assert abs(Vector(3, 4)) == 5.0",
        "assert len({Vector(1, 2), Vector(1, 2)}) == 1",
    ],
)
class_task(
    "cls_iterable_container",
    """
    class Countdown:
        def __init__(self, start):
            self.start = start
        def __iter__(self):
            return iter(range(self.start, 0, -1))
        def __len__(self):
            return self.start
        def __getitem__(self, i):
            return list(self)[i]
    """,
    ["assert list(Countdown(3)) == [3, 2, 1]", "assert len(Countdown(4)) == 4", "assert Countdown(5)[1] == 4"],
)
class_task(
    "cls_classmethod_property",
    """
    class Temperature:
        def __init__(self, celsius):
            self.celsius = celsius
        @classmethod
        def from_fahrenheit(cls, f):
            return cls((f - 32) * 5 / 9)
        @property
        def celsius(self):
            return self._celsius
        @celsius.setter
        def celsius(self, value):
            if value < -273.15:
                raise ValueError('below absolute zero')
            self._celsius = value
    """,
    [
        "assert Temperature.from_fahrenheit(212).celsius == 100",
        "t = Temperature(0)\ntry:\n    t.celsius = -300\nexcept ValueError:\n    pass\nelse:\n    assert False\nassert t.celsius == 0",
    ],
)
class_task(
    "cls_sorted_by_lt",
    """
    from functools import total_ordering
    @total_ordering
    class Task:
        def __init__(self, name, priority):
            self.name, self.priority = name, priority
        def __lt__(self, other):
            return self.priority < other.priority
        def __eq__(self, other):
            return self.priority == other.priority
    """,
    [
        "assert [t.name for t in sorted([Task('b', 2), Task('a', 1), Task('c', 3)])] == ['a', 'b', 'c']",
        "assert max(Task('x', 1), Task('y', 9)).name == 'y'",
    ],
)
class_task(
    "cls_callable_and_class_counter",
    """
    class Adder:
        created = 0
        def __init__(self, n):
            self.n = n
            Adder.created += 1
        def __call__(self, x):
            return x + self.n
    """,
    ["add2 = Adder(2)\nassert add2(3) == 5\nassert callable(add2)", "Adder(1)\nAdder(2)\nassert Adder.created >= 2"],
)
class_task(
    "cls_context_manager",
    """
    class Recorder:
        def __init__(self):
            self.events = []
        def __enter__(self):
            self.events.append('enter')
            return self
        def __exit__(self, *exc):
            self.events.append('exit')
            return False
    """,
    ["r = Recorder()\nwith r as inner:\n    assert inner is r\nassert r.events == ['enter', 'exit']"],
)
class_task(
    "cls_list_subclass_methods",
    """
    class Stack(list):
        def push(self, x):
            self.append(x)
        def peek(self):
            return self[-1]
    """,
    ["s = Stack()\ns.push(1)\ns.push(2)\nassert s.peek() == 2\nassert len(s) == 2\nassert s == [1, 2]"],
)
class_task(
    "cls_dict_subclass_missing",
    """
    class Tally(dict):
        def __missing__(self, key):
            return 0
    """,
    ["t = Tally()\nt['a'] += 1\nt['a'] += 1\nassert t['a'] == 2\nassert t['zzz'] == 0"],
)
class_task(
    "cls_keeps_argument_logger",
    """
    class Logger:
        def __init__(self, sink):
            self.sink = sink
        def log(self, message):
            self.sink.append(message)
    """,
    ["out = []\nlogger = Logger(out)\nlogger.log('a')\nlogger.log('b')\nassert out == ['a', 'b']"],
)
class_task(
    "cls_int_enum_name",
    """
    from enum import IntEnum
    class Priority(IntEnum):
        LOW = 1
        HIGH = 2
    """,
    ["assert Priority.HIGH > Priority.LOW", "assert Priority(2).name == 'HIGH'"],
)
class_task(
    "cls_dataclass_program",
    """
    from dataclasses import dataclass, field
    @dataclass
    class Basket:
        owner: str
        items: list = field(default_factory=list)
        def add(self, item):
            self.items.append(item)
            return self
    """,
    [
        "b = Basket('ann').add('egg')\nassert b.items == ['egg']\nassert b == Basket('ann', ['egg'])",
        "assert Basket('x').owner == 'x'",
    ],
)
class_task(
    "cls_type_name",
    """
    class Animal:
        def speak(self):
            return '...'
    class Dog(Animal):
        def speak(self):
            return 'woof'
    """,
    ["d = Dog()\nassert type(d).__name__ == 'Dog'\nassert isinstance(d, Animal)\nassert d.speak() == 'woof'"],
)
class_task(
    "cls_abstract_base",
    """
    from abc import ABC, abstractmethod
    class Base(ABC):
        @abstractmethod
        def run(self):
            ...
    class Impl(Base):
        def run(self):
            return 'ran'
    """,
    ["try:\n    Base()\nexcept TypeError:\n    pass\nelse:\n    assert False", "assert Impl().run() == 'ran'"],
)

# ---------------------------------------------------------------- other languages
CPP_IMPORTS = ["#include<assert.h>", "#include<bits/stdc++.h>"]
JAVA_IMPORTS = [
    "import java.util.*;",
    "import java.lang.reflect.*;",
    "import java.security.*;",
    "import java.math.*;",
    "import java.io.*;",
    "import java.util.stream.*;",
]

stdio(
    "cpp_stdio_fast_io",
    """
    #include <bits/stdc++.h>
    using namespace std;
    int main() {
        ios::sync_with_stdio(false);
        cin.tie(nullptr);
        int n; cin >> n;
        long long s = 0;
        for (int i = 0; i < n; ++i) { long long x; cin >> x; s += x; }
        cout << s << "\\n";
    }
    """,
    ["3\n1 2 3\n"],
    ["6\n"],
    language="cpp",
)
stdio(
    "cpp_stdio_large_output_printf",
    """
    #include <cstdio>
    int main() {
        int n; scanf("%d", &n);
        for (int i = 0; i < n; ++i) printf("%d\\n", i);
        fflush(stdout);
        return 0;
    }
    """,
    ["200000\n"],
    ["\n".join(str(i) for i in range(200000)) + "\n"],
    language="cpp",
)
stdio(
    "cpp_stdio_debug_stderr",
    """
    #include <bits/stdc++.h>
    int main() {
        int n; std::cin >> n;
        for (int i = 0; i < n; ++i) std::cerr << "debug line " << i << " ........................................\\n";
        std::cout << n << std::endl;
    }
    """,
    ["40000\n"],
    ["40000\n"],
    language="cpp",
)
stdio(
    "java_stdio_bufferedreader",
    """
    import java.io.*;
    import java.util.*;
    public class Main {
        public static void main(String[] args) throws IOException {
            BufferedReader br = new BufferedReader(new InputStreamReader(System.in));
            int n = Integer.parseInt(br.readLine().trim());
            StringTokenizer st = new StringTokenizer(br.readLine());
            long s = 0;
            for (int i = 0; i < n; i++) s += Long.parseLong(st.nextToken());
            PrintWriter out = new PrintWriter(new BufferedWriter(new OutputStreamWriter(System.out)));
            out.println(s);
            out.flush();
        }
    }
    """,
    ["3\n1 2 3\n"],
    ["6\n"],
    language="java",
)
stdio(
    "js_stdio_readfilesync",
    """
    const lines = require('fs').readFileSync(0, 'utf8').trim().split('\\n');
    const n = Number(lines[0]);
    const xs = lines[1].split(' ').map(Number);
    console.log(xs.slice(0, n).reduce((a, b) => a + b, 0));
    """,
    ["3\n1 2 3\n"],
    ["6\n"],
    language="javascript",
)
_add(
    "cpp_function_vector",
    "function",
    """
    #include <bits/stdc++.h>
    std::vector<long> unique(std::vector<long> l) {
        std::sort(l.begin(), l.end());
        l.erase(std::unique(l.begin(), l.end()), l.end());
        return l;
    }
    """,
    {
        "test_imports": CPP_IMPORTS,
        "test": "std::vector<long> unique(std::vector<long> l);\nint main() {\n    auto candidate = unique;\n"
        "    assert(candidate((std::vector<long>({(long)5, (long)3, (long)5, (long)2}))) == "
        "(std::vector<long>({(long)2, (long)3, (long)5})));\n}\n",
    },
    language="cpp",
)
_add(
    "java_function_hashmap",
    "function",
    """
    import java.util.*;
    class Problem {
        public static HashMap<String, Long> histogram(String test) {
            HashMap<String, Long> counts = new HashMap<>();
            for (String w : test.split(" ")) if (!w.isEmpty()) counts.merge(w, 1L, Long::sum);
            long best = counts.values().stream().mapToLong(Long::longValue).max().orElse(0);
            HashMap<String, Long> result = new HashMap<>();
            for (Map.Entry<String, Long> e : counts.entrySet()) if (e.getValue() == best) result.put(e.getKey(), best);
            return result;
        }
    }
    """,
    {
        "test_imports": JAVA_IMPORTS,
        "test": "class ProblemTests {\n    public static void main(String[] args) {\n"
        '    if (!(Objects.equals((new HashMap<String,Long>(Map.of("a", 2l, "b", 2l))), Problem.histogram(("a b b a"))))) '
        'throw new AssertionError("test 1 failed");\n'
        '    if (!(Objects.equals((new HashMap<String,Long>()), Problem.histogram(("")))))'
        ' throw new AssertionError("test 2 failed");\n    }\n}\n',
    },
    language="java",
)
_add(
    "js_function_deepequal",
    "function",
    """
    function sortByLength(words) {
        return [...words].sort((a, b) => a.length - b.length || a.localeCompare(b));
    }
    """,
    {
        "test": "const assert = require('node:assert');\n\n\nfunction test() {\n  let candidate = sortByLength;\n"
        "  assert.deepEqual(candidate(['ccc', 'a', 'bb']),['a', 'bb', 'ccc']);\n"
        "  assert.deepEqual(candidate([]),[]);\n}\n\ntest();",
    },
    language="javascript",
)


# ---------------------------------------------------------------- more forms
leetcode(
    "lc_reorder_list_in_place",
    "reorderList",
    """
    class Solution:
        def reorderList(self, head: Optional[ListNode]) -> None:
            nodes = []
            while head:
                nodes.append(head)
                head = head.next
            i, j = 0, len(nodes) - 1
            while i < j:
                nodes[i].next = nodes[j]
                i += 1
                if i == j:
                    break
                nodes[j].next = nodes[i]
                j -= 1
            if nodes:
                nodes[i].next = None
    """,
    """
    def check(candidate):
        head = list_node([1, 2, 3, 4, 5])
        candidate(head)
        assert is_same_list(head, list_node([1, 5, 2, 4, 3]))
    """,
)
leetcode(
    "lc_returns_none_list",
    "removeElements",
    """
    class Solution:
        def removeElements(self, head: Optional[ListNode], val: int) -> Optional[ListNode]:
            dummy = ListNode(0, head)
            node = dummy
            while node.next:
                if node.next.val == val:
                    node.next = node.next.next
                else:
                    node = node.next
            return dummy.next
    """,
    """
    def check(candidate):
        assert candidate(head = list_node([7, 7, 7]), val = 7) is None
        assert is_same_list(candidate(head = list_node([1, 2, 6, 3]), val = 6), list_node([1, 2, 3]))
    """,
)
leetcode(
    "lc_expected_uses_inf",
    "minCost",
    """
    class Solution:
        def minCost(self, costs: List[int]) -> float:
            return min(costs, default=inf)
    """,
    """
    def check(candidate):
        assert candidate(costs = []) == inf
        assert candidate(costs = [3, 1]) == 1
    """,
)
humaneval(
    "he_groupby_nested_iterators",
    "runs",
    """
    from itertools import groupby
    def runs(s):
        return groupby(s)
    """,
    """
    def check(candidate):
        assert [(k, len(list(g))) for k, g in candidate('aabccc')] == [('a', 2), ('b', 1), ('c', 3)]
    """,
)
humaneval(
    "he_generator_expression_argument",
    "total_squares",
    """
    def total_squares(values):
        return sum(values)
    """,
    """
    def check(candidate):
        assert candidate(x * x for x in range(4)) == 14
    """,
)
humaneval(
    "he_infinite_iterator_argument",
    "take",
    """
    def take(iterable, n):
        it = iter(iterable)
        return [next(it) for _ in range(n)]
    """,
    """
    import itertools
    def check(candidate):
        assert candidate(itertools.count(1), 3) == [1, 2, 3]
    """,
)
humaneval(
    "he_itemgetter_key",
    "sort_pairs",
    """
    def sort_pairs(pairs, key):
        return sorted(pairs, key=key)
    """,
    """
    from operator import itemgetter
    def check(candidate):
        assert candidate([(1, 'b'), (2, 'a')], itemgetter(1)) == [(2, 'a'), (1, 'b')]
    """,
)
humaneval(
    "he_partial_argument",
    "apply_twice",
    """
    def apply_twice(f, x):
        return f(f(x))
    """,
    """
    from functools import partial
    def check(candidate):
        def add(a, b):
            return a + b
        assert candidate(partial(add, 3), 1) == 7
    """,
)
humaneval(
    "he_bound_method_argument",
    "lookup_all",
    """
    def lookup_all(keys, getter):
        return [getter(k) for k in keys]
    """,
    """
    def check(candidate):
        table = {'a': 1, 'b': 2}
        assert candidate(['a', 'b', 'z'], table.get) == [1, 2, None]
    """,
)
humaneval(
    "he_mutates_dict_argument",
    "bump",
    """
    def bump(counts, key):
        counts[key] = counts.get(key, 0) + 1
    """,
    """
    def check(candidate):
        d = {'a': 1}
        candidate(d, 'a')
        candidate(d, 'b')
        assert d == {'a': 2, 'b': 1}
    """,
)
humaneval(
    "he_numpy_tolist_all",
    "transpose",
    """
    import numpy as np
    def transpose(m):
        return np.array(m).T
    """,
    """
    import numpy as np
    def check(candidate):
        assert candidate([[1, 2], [3, 4]]).tolist() == [[1, 3], [2, 4]]
        assert (candidate([[1, 2]]) == np.array([[1], [2]])).all()
        assert np.array_equal(candidate(np.eye(2)), np.eye(2))
    """,
)
humaneval(
    "he_numpy_bool_scalar",
    "all_positive",
    """
    import numpy as np
    def all_positive(xs):
        return np.all(np.asarray(xs) > 0)
    """,
    """
    def check(candidate):
        assert candidate([1, 2, 3])
        assert not candidate([1, -2])
        assert candidate([5]) == True
    """,
)
humaneval(
    "he_returns_map_and_filter",
    "evens_doubled",
    """
    def evens_doubled(xs):
        return map(lambda x: 2 * x, filter(lambda x: x % 2 == 0, xs))
    """,
    """
    def check(candidate):
        assert list(candidate([1, 2, 3, 4])) == [4, 8]
    """,
)
humaneval(
    "he_custom_exception_subclass_caught_as_base",
    "parse_positive",
    """
    class NotPositive(ValueError):
        pass
    def parse_positive(s):
        n = int(s)
        if n <= 0:
            raise NotPositive(s)
        return n
    """,
    """
    def check(candidate):
        assert candidate('4') == 4
        try:
            candidate('-3')
        except ValueError as e:
            assert str(e) == '-3'
        else:
            assert False
        try:
            candidate('x')
        except ValueError:
            pass
        else:
            assert False
    """,
)
humaneval(
    "he_keyerror_caught_as_lookuperror",
    "strict_get",
    """
    def strict_get(d, k):
        return d[k]
    """,
    """
    def check(candidate):
        try:
            candidate({}, 'missing')
        except LookupError:
            pass
        else:
            assert False
    """,
)
humaneval(
    "he_raises_helper_in_test",
    "divide",
    """
    def divide(a, b):
        return a / b
    """,
    """
    def raises(exc, f, *args):
        try:
            f(*args)
        except exc:
            return True
        return False

    def check(candidate):
        assert raises(ZeroDivisionError, candidate, 1, 0)
        assert not raises(ZeroDivisionError, candidate, 1, 2)
    """,
)
humaneval(
    "he_returns_partial",
    "multiplier",
    """
    from functools import partial
    from operator import mul
    def multiplier(n):
        return partial(mul, n)
    """,
    """
    def check(candidate):
        assert candidate(3)(5) == 15
    """,
)
class_task(
    "cls_test_sets_attribute",
    """
    class Account:
        def __init__(self):
            self.balance = 0
        def withdraw(self, amount):
            self.balance -= amount
            return self.balance
    """,
    ["acc = Account()\nacc.balance = 100\nassert acc.withdraw(30) == 70\nassert acc.balance == 70"],
)
class_task(
    "cls_test_subclasses_program_class",
    """
    class Greeter:
        def greeting(self):
            return 'Hello'
        def greet(self, name):
            return f'{self.greeting()}, {name}!'
    """,
    [
        "class Loud(Greeter):\n    def greeting(self):\n        return 'HEY'\nassert Loud().greet('bo') == 'HEY, bo!'",
    ],
)
class_task(
    "cls_program_objects_together",
    """
    class Node:
        def __init__(self, name):
            self.name = name
    class Graph:
        def __init__(self):
            self.nodes = []
        def add(self, node):
            self.nodes.append(node)
            return len(self.nodes)
        def names(self):
            return [n.name for n in self.nodes]
    """,
    ["g = Graph()\nn = Node('a')\ng.add(n)\ng.add(Node('b'))\nassert g.names() == ['a', 'b']\nassert g.nodes[0] is n"],
)
class_task(
    "cls_iterator_stopiteration",
    """
    class Upto:
        def __init__(self, n):
            self.i, self.n = 0, n
        def __iter__(self):
            return self
        def __next__(self):
            if self.i >= self.n:
                raise StopIteration
            self.i += 1
            return self.i
    """,
    [
        "assert list(Upto(3)) == [1, 2, 3]",
        "it = Upto(1)\nassert next(it) == 1\ntry:\n    next(it)\nexcept StopIteration:\n    pass\nelse:\n    assert False",
    ],
)
class_task(
    "cls_str_format_hasattr",
    """
    class Money:
        def __init__(self, amount):
            self.amount = amount
        def __str__(self):
            return f'${self.amount:.2f}'
        def __format__(self, spec):
            return format(self.amount, spec)
    """,
    [
        "m = Money(3.5)\nassert str(m) == '$3.50'\nassert f'{m}' == '3.5'\nassert format(m, '.1f') == '3.5'",
        "m = Money(1)\nassert hasattr(m, 'amount') and not hasattr(m, 'nope')\nassert getattr(m, 'amount') == 1",
        "m = Money(2)\nsetattr(m, 'amount', 5)\nassert vars(m) == {'amount': 5}",
    ],
)
class_task(
    "cls_deepcopy_in_test",
    """
    class Board:
        def __init__(self):
            self.cells = [[0] * 2 for _ in range(2)]
        def mark(self, r, c):
            self.cells[r][c] = 1
    """,
    [
        "import copy\nb = Board()\nb2 = copy.deepcopy(b)\nb.mark(0, 0)\nassert b.cells[0][0] == 1\nassert b2.cells[0][0] == 0"
    ],
)
stdio(
    "io_open_zero",
    """
    n, *a = map(int, open(0).read().split())
    print(max(a[:n]))
    """,
    ["3\n4 9 2\n"],
    ["9\n"],
)
stdio(
    "io_readlines_crlf",
    """
    import sys
    lines = sys.stdin.readlines()
    print(sum(int(line.strip()) for line in lines[1:]))
    """,
    ["2\r\n5\r\n6\r\n"],
    ["11\n"],
)
stdio(
    "io_fileinput",
    """
    import fileinput
    print(sum(len(line.split()) for line in fileinput.input()))
    """,
    ["a b\nc\n"],
    ["3\n"],
)
stdio(
    "io_os_read_fd0",
    """
    import os
    data = os.read(0, 1 << 25).split()
    os.write(1, str(sum(map(int, data))).encode() + b'\\n')
    """,
    ["1 2 3 4\n"],
    ["10\n"],
)
stdio(
    "io_empty_output",
    """
    import sys
    n = int(sys.stdin.readline())
    for i in range(n):
        print(i)
    """,
    ["0\n"],
    [""],
)
stdio(
    "io_exit_mid_program",
    """
    n = int(input())
    if n < 0:
        print('NO')
        exit()
    print('YES')
    """,
    ["-1\n", "3\n"],
    ["NO\n", "YES\n"],
)
stdio(
    "cpp_define_int_long_long_recursion",
    """
    #include <bits/stdc++.h>
    using namespace std;
    #define int long long
    vector<int> g[200005];
    int dfs(int u, int p) {
        int s = 1;
        for (int v : g[u]) if (v != p) s += dfs(v, u);
        return s;
    }
    signed main() {
        int n; cin >> n;
        for (int i = 2; i <= n; ++i) { g[i - 1].push_back(i); g[i].push_back(i - 1); }
        cout << dfs(1, 0) << '\\n';
        return 0;
    }
    """,
    ["100000\n"],
    ["100000\n"],
    language="cpp",
)
stdio(
    "cpp_threads",
    """
    #include <bits/stdc++.h>
    int main() {
        long long n; std::cin >> n;
        std::vector<long long> part(16);
        std::vector<std::thread> ts;
        for (int k = 0; k < 16; ++k)
            ts.emplace_back([&, k] { for (long long i = k; i < n; i += 16) part[k] += i; });
        for (auto &t : ts) t.join();
        std::cout << std::accumulate(part.begin(), part.end(), 0LL) << "\\n";
    }
    """,
    ["1000\n"],
    ["499500\n"],
    language="cpp",
)
stdio(
    "java_scanner_stringbuilder_nonpublic_main",
    """
    import java.util.*;
    class Main {
        public static void main(String[] args) {
            Scanner sc = new Scanner(System.in);
            int n = sc.nextInt();
            StringBuilder sb = new StringBuilder();
            for (int i = 1; i <= n; i++) sb.append(i * i).append(i < n ? " " : "\\n");
            System.out.print(sb);
        }
    }
    """,
    ["4\n"],
    ["1 4 9 16\n"],
    language="java",
)
stdio(
    "java_public_class_solution",
    """
    import java.util.Scanner;
    public class Solution {
        public static void main(String[] args) {
            Scanner in = new Scanner(System.in);
            System.out.println(in.nextLong() + in.nextLong());
        }
    }
    """,
    ["2 40\n"],
    ["42\n"],
    language="java",
)
stdio(
    "js_readline_events",
    """
    const readline = require('readline');
    const rl = readline.createInterface({ input: process.stdin });
    const lines = [];
    rl.on('line', (line) => lines.push(line));
    rl.on('close', () => {
        const n = Number(lines[0]);
        console.log(lines.slice(1, n + 1).map(Number).reduce((a, b) => a + b, 0));
    });
    """,
    ["2\n5\n6\n"],
    ["11\n"],
    language="javascript",
)
stdio(
    "js_stdin_data_events",
    """
    let input = '';
    process.stdin.on('data', (chunk) => { input += chunk; });
    process.stdin.on('end', () => {
        const words = input.trim().split(/\\s+/);
        process.stdout.write(words.reverse().join(' ') + '\\n');
    });
    """,
    ["a b c\n"],
    ["c b a\n"],
    language="javascript",
)
_add(
    "js_function_object_result",
    "function",
    """
    function countChars(s) {
        const out = {};
        for (const ch of s) out[ch] = (out[ch] || 0) + 1;
        return out;
    }
    """,
    {
        "test": "const assert = require('node:assert');\n\n\nfunction test() {\n  let candidate = countChars;\n"
        "  assert.deepEqual(candidate('aba'),{'a': 2, 'b': 1});\n  assert.deepEqual(candidate(''),{});\n}\n\ntest();",
    },
    language="javascript",
)
_add(
    "cpp_function_string_pair",
    "function",
    """
    #include <bits/stdc++.h>
    using namespace std;
    std::tuple<long, long> even_odd_count(long num) {
        long e = 0, o = 0;
        for (char c : to_string(labs(num))) ((c - '0') % 2 ? o : e)++;
        return make_tuple(e, o);
    }
    """,
    {
        "test_imports": CPP_IMPORTS,
        "test": "std::tuple<long, long> even_odd_count(long num);\nint main() {\n    auto candidate = even_odd_count;\n"
        "    assert(candidate((-12)) == (std::make_tuple(1, 1)));\n    assert(candidate((123)) == (std::make_tuple(1, 2)));\n}\n",
    },
    language="cpp",
)
_add(
    "java_function_arraylist_streams",
    "function",
    """
    import java.util.*;
    import java.util.stream.*;
    class Problem {
        public static ArrayList<Long> sortedEvens(ArrayList<Long> l) {
            return l.stream().filter(x -> x % 2 == 0).sorted().collect(Collectors.toCollection(ArrayList::new));
        }
    }
    """,
    {
        "test_imports": JAVA_IMPORTS,
        "test": "class ProblemTests {\n    public static void main(String[] args) {\n"
        "    if (!(Objects.equals((new ArrayList<Long>(Arrays.asList((long)2l, (long)4l))), "
        "Problem.sortedEvens((new ArrayList<Long>(Arrays.asList((long)4l, (long)1l, (long)2l))))))) "
        'throw new AssertionError("test 1 failed");\n    }\n}\n',
    },
    language="java",
)


# round 7 (correct-program adversary, 2026-12-04)
# ---------------------------------------------------------------- round 7: LeetCode
leetcode(
    "r7_lc_lca_nodes_shared_by_arguments",
    "lowestCommonAncestor",
    """
    class Solution:
        def lowestCommonAncestor(self, root: 'TreeNode', p: 'TreeNode', q: 'TreeNode') -> 'TreeNode':
            if root is None or root is p or root is q:
                return root
            left = self.lowestCommonAncestor(root.left, p, q)
            right = self.lowestCommonAncestor(root.right, p, q)
            if left and right:
                return root
            return left or right
    """,
    """
    def check(candidate):
        root = tree_node([3, 5, 1, 6, 2, 0, 8, None, None, 7, 4])
        assert candidate(root = root, p = root.left, q = root.right).val == 3
        assert candidate(root = root, p = root.left.right.left, q = root.left.right.right).val == 2
        p = root.left
        assert candidate(root = root, p = p, q = root.left.right.right) is p
    """,
)
leetcode(
    "r7_lc_intersection_shared_tail",
    "getIntersectionNode",
    """
    class Solution:
        def getIntersectionNode(self, headA: ListNode, headB: ListNode) -> Optional[ListNode]:
            a, b = headA, headB
            while a is not b:
                a = a.next if a else headB
                b = b.next if b else headA
            return a
    """,
    """
    def check(candidate):
        common = list_node([8, 4, 5])
        headA = ListNode(4, ListNode(1, common))
        headB = ListNode(5, ListNode(6, ListNode(1, common)))
        assert candidate(headA = headA, headB = headB).val == 8
        assert candidate(headA = headA, headB = headB) is common
        assert candidate(headA = list_node([2, 6, 4]), headB = list_node([1, 5])) is None
    """,
)
leetcode(
    "r7_lc_search_bst_returns_subtree_node",
    "searchBST",
    """
    class Solution:
        def searchBST(self, root: Optional[TreeNode], val: int) -> Optional[TreeNode]:
            while root and root.val != val:
                root = root.left if val < root.val else root.right
            return root
    """,
    """
    def check(candidate):
        root = tree_node([4, 2, 7, 1, 3])
        assert is_same_tree(candidate(root = root, val = 2), tree_node([2, 1, 3]))
        assert candidate(root = root, val = 7) is root.right
        assert candidate(root = root, val = 5) is None
    """,
)
leetcode(
    "r7_lc_largest_number_cmp_to_key",
    "largestNumber",
    """
    class Solution:
        def largestNumber(self, nums: List[int]) -> str:
            def compare(a, b):
                return (b + a > a + b) - (b + a < a + b)
            digits = sorted(map(str, nums), key=cmp_to_key(compare))
            result = ''.join(digits)
            return '0' if result[0] == '0' else result
    """,
    """
    def check(candidate):
        assert candidate(nums = [10, 2]) == "210"
        assert candidate(nums = [3, 30, 34, 5, 9]) == "9534330"
        assert candidate(nums = [0, 0]) == "0"
    """,
)

# ---------------------------------------------------------------- round 7: stdin/stdout
# Codeforces' default checker compares tokens, and a problem that allows an absolute or relative error of 1e-6
# accepts any digits within it (APPS's own evaluator compares floats with np.allclose too).
stdio(
    "r7_io_one_number_per_line_where_expected_has_spaces",
    """
    import sys
    data = sys.stdin.read().split()
    n = int(data[0])
    for x in sorted(map(int, data[1:1 + n])):
        print(x)
    """,
    ["4\n9 1 4 3\n"],
    ["1 3 4 9\n"],
)
stdio(
    "r7_io_float_full_repr_within_tolerance",
    """
    n = int(input())
    values = list(map(int, input().split()))
    print(sum(values) / n)
    """,
    ["3\n1 2 7\n", "2\n1 2\n"],
    ["3.3333333333\n", "1.5000000000\n"],
)

# ---------------------------------------------------------------- round 7: HumanEval check(candidate)
humaneval(
    "r7_he_heapq_on_test_class_with_lt",
    "schedule",
    """
    import heapq
    def schedule(tasks):
        heap = list(tasks)
        heapq.heapify(heap)
        return [heapq.heappop(heap) for _ in range(len(heap))]
    """,
    """
    def check(candidate):
        class Task:
            def __init__(self, priority, name):
                self.priority = priority
                self.name = name
            def __lt__(self, other):
                return self.priority < other.priority
        tasks = [Task(3, 'c'), Task(1, 'a'), Task(2, 'b')]
        assert [t.name for t in candidate(tasks)] == ['a', 'b', 'c']
        assert candidate([]) == []
    """,
)
humaneval(
    "r7_he_generator_return_value",
    "chunks",
    """
    def chunks(xs, n):
        count = 0
        for i in range(0, len(xs), n):
            yield xs[i:i + n]
            count += 1
        return count
    """,
    """
    def check(candidate):
        g = candidate([1, 2, 3, 4, 5], 2)
        assert next(g) == [1, 2]
        assert next(g) == [3, 4]
        assert next(g) == [5]
        try:
            next(g)
        except StopIteration as stop:
            assert stop.value == 3
        else:
            assert False
    """,
)
humaneval(
    "r7_he_async_generator",
    "ticker",
    """
    import asyncio
    async def ticker(n):
        for i in range(n):
            await asyncio.sleep(0)
            yield i * i
    """,
    """
    import asyncio
    def check(candidate):
        async def collect(n):
            return [x async for x in candidate(n)]
        assert asyncio.run(collect(4)) == [0, 1, 4, 9]
        assert asyncio.run(collect(0)) == []
    """,
)
humaneval(
    "r7_he_preamble_flag_combination",
    "parse_perms",
    """
    def parse_perms(text):
        result = Perm(0)
        for ch, perm in (('r', Perm.READ), ('w', Perm.WRITE), ('x', Perm.EXEC)):
            if ch in text:
                result |= perm
        return result
    """,
    """
    def check(candidate):
        assert candidate('x') == Perm.EXEC
        assert candidate('rw') == Perm.READ | Perm.WRITE
        assert Perm.WRITE in candidate('rwx')
        assert not candidate('')
    """,
    preamble="""
    from enum import Flag, auto
    class Perm(Flag):
        READ = auto()
        WRITE = auto()
        EXEC = auto()
    """,
)
humaneval(
    "r7_he_preamble_frozen_dataclass_inside_object",
    "regions",
    """
    def regions(grid):
        seen, found = set(), []
        for r, row in enumerate(grid):
            for c, color in enumerate(row):
                if (r, c) in seen:
                    continue
                cells, stack = set(), [(r, c)]
                seen.add((r, c))
                while stack:
                    i, j = stack.pop()
                    cells.add(Cell(i, j))
                    for a, b in ((i + 1, j), (i - 1, j), (i, j + 1), (i, j - 1)):
                        if 0 <= a < len(grid) and 0 <= b < len(grid[a]) and (a, b) not in seen and grid[a][b] == color:
                            seen.add((a, b))
                            stack.append((a, b))
                found.append(Region(color, frozenset(cells)))
        return found
    """,
    """
    def check(candidate):
        assert candidate(['ab', 'ab']) == [
            Region('a', frozenset({Cell(0, 0), Cell(1, 0)})),
            Region('b', frozenset({Cell(0, 1), Cell(1, 1)})),
        ]
        assert len(candidate(['aba'])) == 3
    """,
    preamble="""
    from dataclasses import dataclass
    @dataclass(frozen=True)
    class Cell:
        row: int
        col: int
    @dataclass
    class Region:
        color: str
        cells: frozenset
    """,
)
humaneval(
    "r7_he_preamble_exception_raised",
    "parse_age",
    """
    def parse_age(text):
        if not text.strip().isdigit():
            raise ValidationError(f'not an age: {text!r}')
        return int(text)
    """,
    """
    def check(candidate):
        assert candidate('42') == 42
        try:
            candidate('abc')
        except ValidationError as error:
            assert 'abc' in str(error)
        else:
            assert False, 'no ValidationError'
    """,
    preamble="""
    class ValidationError(Exception):
        pass
    """,
)
humaneval(
    "r7_he_stdlib_exception_class_caught",
    "load_config",
    """
    import json
    def load_config(text):
        config = json.loads(text)
        if not isinstance(config, dict):
            raise TypeError('a config must be a JSON object')
        return config
    """,
    """
    import json
    def check(candidate):
        assert candidate('{"a": 1}') == {'a': 1}
        try:
            candidate('{bad json')
        except json.JSONDecodeError as error:
            assert error.pos == 1
        else:
            assert False
    """,
)
humaneval(
    "r7_he_decorator_keeps_name_with_wraps",
    "count_calls",
    """
    import functools
    def count_calls(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            wrapper.calls += 1
            return func(*args, **kwargs)
        wrapper.calls = 0
        return wrapper
    """,
    """
    def check(candidate):
        def square(x):
            \"\"\"Square x.\"\"\"
            return x * x
        counted = candidate(square)
        assert counted(3) == 9
        assert counted(4) == 16
        assert counted.calls == 2
        assert counted.__name__ == 'square'
        assert counted.__doc__ == 'Square x.'
    """,
)
humaneval(
    "r7_he_warning_recorded_by_test",
    "old_total",
    """
    import warnings
    def old_total(xs):
        warnings.warn('old_total is deprecated; use sum', DeprecationWarning, stacklevel=2)
        return sum(xs)
    """,
    """
    import warnings
    def check(candidate):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            assert candidate([1, 2, 3]) == 6
        assert len(caught) == 1
        assert issubclass(caught[0].category, DeprecationWarning)
    """,
)
humaneval(
    "r7_he_mock_patch_builtins_input",
    "ask_number",
    """
    def ask_number(prompt='Enter a number: '):
        while True:
            text = input(prompt)
            try:
                return int(text)
            except ValueError:
                print('not a number, try again')
    """,
    """
    from unittest import mock
    def check(candidate):
        with mock.patch('builtins.input', side_effect=['x', '7']):
            assert candidate() == 7
        with mock.patch('builtins.input', return_value='-3'):
            assert candidate('n? ') == -3
    """,
)

# ---------------------------------------------------------------- round 7: numpy
humaneval(
    "r7_he_numpy_masked_array",
    "mask_outside",
    """
    import numpy as np
    def mask_outside(values, low, high):
        return np.ma.masked_outside(np.asarray(values, dtype=float), low, high)
    """,
    """
    import numpy as np
    def check(candidate):
        result = candidate([1.0, 5.0, -2.0, 3.0], 0, 4)
        assert isinstance(result, np.ma.MaskedArray)
        assert result.mask.tolist() == [False, True, True, False]
        assert result.mean() == 2.0
        assert result.filled(0).tolist() == [1.0, 0.0, 0.0, 3.0]
    """,
)
humaneval(
    "r7_he_numpy_datetime64",
    "add_business_days",
    """
    import numpy as np
    def add_business_days(start, days):
        return np.busday_offset(np.datetime64(start, 'D'), days, roll='forward')
    """,
    """
    import numpy as np
    def check(candidate):
        assert candidate('2024-03-01', 1) == np.datetime64('2024-03-04')
        assert str(candidate('2024-03-08', 5)) == '2024-03-15'
    """,
)
humaneval(
    "r7_he_numpy_random_seeded_by_test",
    "jitter",
    """
    import numpy as np
    def jitter(values, scale):
        values = np.asarray(values, dtype=float)
        return values + np.random.normal(0.0, scale, size=values.shape)
    """,
    """
    import numpy as np
    def check(candidate):
        np.random.seed(0)
        result = candidate([1.0, 2.0, 3.0], 0.1)
        np.random.seed(0)
        expected = np.array([1.0, 2.0, 3.0]) + np.random.normal(0.0, 0.1, size=3)
        assert np.allclose(result, expected)
    """,
)
mbpp(
    "r7_mbpp_numpy_in_place",
    """
    import numpy as np
    def clip_negative(arr):
        arr[arr < 0] = 0
    """,
    ["assert clip_negative(a) is None and a.tolist() == [3, 0, 2, 0]"],
    setup="a = np.array([3, -1, 2, -5])",
    imports=["import numpy as np"],
)

# ---------------------------------------------------------------- round 7: MBPP
mbpp(
    "r7_mbpp_writes_to_stringio",
    """
    def write_csv(out, rows):
        for row in rows:
            out.write(','.join(str(cell) for cell in row) + '\\n')
        return len(rows)
    """,
    ["assert write_csv(buffer, [[1, 'a'], [2, 'b']]) == 2 and buffer.getvalue() == '1,a\\n2,b\\n'"],
    setup="import io\nbuffer = io.StringIO()",
)
mbpp(
    "r7_mbpp_pathlib_path",
    """
    from pathlib import Path
    def change_suffix(path, suffix):
        return path.with_suffix(suffix)
    """,
    [
        "assert change_suffix(Path('notes/todo.txt'), '.md') == Path('notes/todo.md')",
        "assert change_suffix(Path('a/b.tar'), '.gz').name == 'b.gz'",
    ],
    imports=["from pathlib import Path"],
)
mbpp(
    "r7_mbpp_random_instance_argument",
    """
    def deal(deck, hands, rng):
        cards = list(deck)
        rng.shuffle(cards)
        return [cards[i::hands] for i in range(hands)]
    """,
    ["assert deal(range(6), 2, random.Random(7)) == [expected[0::2], expected[1::2]]"],
    setup="import random\nexpected = list(range(6))\nrandom.Random(7).shuffle(expected)",
)
mbpp(
    "r7_mbpp_cmp_to_key_argument",
    """
    def sort_with(items, key):
        return sorted(items, key=key)
    """,
    ["assert sort_with(['bb', 'a', 'ccc', 'aa'], cmp_to_key(by_length_then_reverse)) == ['a', 'bb', 'aa', 'ccc']"],
    setup=(
        "from functools import cmp_to_key\n"
        "def by_length_then_reverse(a, b):\n"
        "    if len(a) != len(b):\n"
        "        return len(a) - len(b)\n"
        "    return (a < b) - (a > b)"
    ),
)
mbpp(
    "r7_mbpp_program_reads_setup_global",
    """
    def restock_needed(item, threshold=5):
        return inventory.get(item, 0) < threshold
    """,
    [
        "assert restock_needed('pear') == True",
        "assert restock_needed('apple') == False",
        "assert restock_needed('kiwi') == True",
    ],
    setup="inventory = {'apple': 10, 'pear': 2}",
)
mbpp(
    "r7_mbpp_factorial_of_100000",
    """
    def factorial(n):
        def product(lo, hi):
            if hi - lo < 16:
                result = 1
                for k in range(lo, hi):
                    result *= k
                return result
            mid = (lo + hi) // 2
            return product(lo, mid) * product(mid, hi)
        return product(1, n + 1)
    """,
    ["assert factorial(10) == 3628800", "assert factorial(100000) == math.factorial(100000)"],
    imports=["import math"],
)

# ---------------------------------------------------------------- round 7: class tasks
class_task(
    "r7_cls_operators_with_numbers",
    """
    class Money:
        def __init__(self, cents):
            self.cents = cents
        def __add__(self, other):
            if isinstance(other, int):
                other = Money(other)
            return Money(self.cents + other.cents)
        __radd__ = __add__
        def __mul__(self, factor):
            return Money(self.cents * factor)
        __rmul__ = __mul__
        def __eq__(self, other):
            return isinstance(other, Money) and self.cents == other.cents
        def __repr__(self):
            return f'Money({self.cents})'
    """,
    [
        "assert Money(250) * 3 == Money(750)",
        "assert 2 * Money(5) == Money(10)",
        "assert sum([Money(1), Money(2), Money(3)]) == Money(6)",
        "assert Money(1) + Money(2) == Money(3)",
    ],
)
class_task(
    "r7_cls_eq_with_string",
    """
    from functools import total_ordering
    @total_ordering
    class Version:
        def __init__(self, text):
            parts = [int(p) for p in str(text).split('.')]
            while len(parts) > 1 and parts[-1] == 0:
                parts.pop()
            self.parts = tuple(parts)
        @staticmethod
        def _coerce(other):
            return other if isinstance(other, Version) else Version(other)
        def __eq__(self, other):
            return self.parts == self._coerce(other).parts
        def __lt__(self, other):
            return self.parts < self._coerce(other).parts
        def __hash__(self):
            return hash(self.parts)
    """,
    [
        "assert Version('1.2.0') == '1.2'",
        "assert Version('1.10') > '1.9'",
        "assert sorted([Version('1.10'), Version('1.9'), Version('1.2.1')]) == "
        "[Version('1.2.1'), Version('1.9'), Version('1.10')]",
    ],
)
class_task(
    "r7_cls_own_contains",
    """
    class IntervalSet:
        def __init__(self):
            self.intervals = []
        def add(self, lo, hi):
            merged = []
            for a, b in sorted(self.intervals + [(lo, hi)]):
                if merged and a <= merged[-1][1] + 1:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], b))
                else:
                    merged.append((a, b))
            self.intervals = merged
        def __contains__(self, x):
            return any(a <= x <= b for a, b in self.intervals)
        def __len__(self):
            return sum(b - a + 1 for a, b in self.intervals)
    """,
    [
        "s = IntervalSet()\ns.add(1, 3)\ns.add(5, 8)\nassert 2 in s\nassert 4 not in s\nassert 8 in s",
        "s = IntervalSet()\ns.add(1, 3)\ns.add(4, 6)\nassert s.intervals == [(1, 6)]\nassert len(s) == 6",
    ],
)
class_task(
    "r7_cls_test_subclass_calls_super",
    """
    class Greeter:
        def __init__(self, name):
            self.name = name
        def greet(self):
            return f'Hello, {self.name}!'
    """,
    [
        "class LoudGreeter(Greeter):\n    def greet(self):\n        return super().greet().upper()\n"
        "assert LoudGreeter('ada').greet() == 'HELLO, ADA!'",
        "assert Greeter('bo').greet() == 'Hello, bo!'",
    ],
)
class_task(
    "r7_cls_fields_named_like_str_methods",
    """
    class Record:
        def __init__(self, **fields):
            for key, value in fields.items():
                setattr(self, key, value)
        def keys(self):
            return sorted(vars(self))
    """,
    [
        "r = Record(title='Dune', count=3)\nassert r.title == 'Dune'\nassert r.count == 3",
        "assert Record(index=1, format='pdf').keys() == ['format', 'index']",
    ],
)
class_task(
    "r7_cls_namedtuple_with_methods",
    """
    import math
    from typing import NamedTuple
    class Point(NamedTuple):
        x: float
        y: float
        def distance(self, other):
            return math.hypot(self.x - other.x, self.y - other.y)
        @property
        def norm(self):
            return math.hypot(self.x, self.y)
    """,
    [
        "assert Point(3, 4).distance(Point(0, 0)) == 5.0",
        "assert Point(6, 8).norm == 10.0",
        "assert Point(1, 2) == (1, 2) and Point(1, 2).x == 1",
    ],
)
class_task(
    "r7_cls_dataclass_asdict_replace",
    """
    from dataclasses import dataclass, field
    @dataclass(order=True)
    class Employee:
        name: str
        salary: int
        skills: list = field(default_factory=list)
    """,
    [
        "from dataclasses import asdict\n"
        "assert asdict(Employee('ann', 100, ['py'])) == {'name': 'ann', 'salary': 100, 'skills': ['py']}",
        "from dataclasses import replace\ne = Employee('bo', 50)\nassert replace(e, salary=60).salary == 60\n"
        "assert e.salary == 50",
        "assert sorted([Employee('b', 2), Employee('a', 9)])[0].name == 'a'",
    ],
)
class_task(
    "r7_cls_exception_with_fields_and_str",
    """
    class ParseError(ValueError):
        def __init__(self, line, message):
            super().__init__(message)
            self.line = line
            self.message = message
        def __str__(self):
            return f'line {self.line}: {self.message}'

    def parse_assignments(text):
        result = {}
        for number, line in enumerate(text.splitlines(), 1):
            name, sep, value = line.partition('=')
            if not sep or not name.strip():
                raise ParseError(number, 'expected name=value')
            result[name.strip()] = int(value)
        return result
    """,
    [
        "assert parse_assignments('a=1\\nb=2') == {'a': 1, 'b': 2}",
        "try:\n    parse_assignments('a=1\\nbad\\nc=3')\nexcept ParseError as error:\n    assert error.line == 2\n"
        "    assert str(error) == 'line 2: expected name=value'\nelse:\n    assert False",
    ],
)
class_task(
    "r7_cls_context_manager_rolls_back",
    """
    class Store:
        def __init__(self):
            self.data = {}
            self._saved = []
        def __setitem__(self, key, value):
            self.data[key] = value
        def __getitem__(self, key):
            return self.data[key]
        def __enter__(self):
            self._saved.append(dict(self.data))
            return self
        def __exit__(self, exc_type, exc, tb):
            saved = self._saved.pop()
            if exc_type is not None:
                self.data = saved
            return False
    """,
    [
        "s = Store()\ns['a'] = 1\ntry:\n    with s:\n        s['a'] = 2\n        raise RuntimeError('abort')\n"
        "except RuntimeError:\n    pass\nassert s['a'] == 1",
        "s = Store()\nwith s:\n    s['b'] = 5\nassert s['b'] == 5",
    ],
)
class_task(
    "r7_cls_generator_advances_object_state",
    """
    class Tokenizer:
        def __init__(self, text):
            self.text = text
            self.consumed = 0
        def tokens(self):
            for token in self.text.split():
                self.consumed += 1
                yield token
    """,
    [
        "t = Tokenizer('let x = 1')\nit = t.tokens()\nassert next(it) == 'let'\nassert t.consumed == 1\n"
        "assert next(it) == 'x'\nassert t.consumed == 2",
        "assert list(Tokenizer('a b c').tokens()) == ['a', 'b', 'c']",
    ],
)

# ---------------------------------------------------------------- round 7: C++, Java, JavaScript
stdio(
    "r7_cpp_cxx20_ranges_and_contains",
    """
    #include <bits/stdc++.h>
    using namespace std;
    int main() {
        int n;
        cin >> n;
        vector<int> a(n);
        for (auto &x : a) cin >> x;
        ranges::sort(a);
        map<int, int> freq;
        for (int x : a) ++freq[x];
        int q;
        cin >> q;
        while (q--) {
            int x;
            cin >> x;
            cout << (freq.contains(x) ? "YES" : "NO") << '\\n';
        }
        cout << a.front() << ' ' << a.back() << ' ' << popcount(static_cast<unsigned>(n)) << '\\n';
    }
    """,
    ["5\n4 1 7 1 3\n3\n1\n2\n7\n"],
    ["YES\nNO\nYES\n1 7 2\n"],
    language="cpp",
)
stdio(
    "r7_cpp_online_judge_freopen_guard",
    """
    #include <bits/stdc++.h>
    using namespace std;
    int main() {
    #ifndef ONLINE_JUDGE
        freopen("input.txt", "r", stdin);
        freopen("output.txt", "w", stdout);
    #endif
        ios::sync_with_stdio(false);
        cin.tie(nullptr);
        long long a, b;
        cin >> a >> b;
        cout << a + b << '\\n';
    }
    """,
    ["2 40\n"],
    ["42\n"],
    language="cpp",
)
stdio(
    "r7_java_deep_recursion_in_big_stack_thread",
    """
    import java.io.*;
    public class Main implements Runnable {
        static int depth(int n) {
            return n == 0 ? 0 : 1 + depth(n - 1);
        }
        public void run() {
            try {
                BufferedReader br = new BufferedReader(new InputStreamReader(System.in));
                int n = Integer.parseInt(br.readLine().trim());
                System.out.println(depth(n));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        public static void main(String[] args) throws InterruptedException {
            Thread t = new Thread(null, new Main(), "solver", 1 << 28);
            t.start();
            t.join();
        }
    }
    """,
    ["1000000\n"],
    ["1000000\n"],
    language="java",
)
stdio(
    "r7_js_read_dev_stdin",
    """
    const data = require('fs').readFileSync('/dev/stdin', 'utf8').split(/\\s+/).filter(Boolean).map(Number);
    const [n, ...xs] = data;
    console.log(Math.max(...xs.slice(0, n)));
    """,
    ["3\n4 9 2\n"],
    ["9\n"],
    language="javascript",
)


# ---------------------------------------------------------------- round 8: values both processes hold, numeric protocols
class_task(
    "r8_cls_logger_sink_written_by_the_test_between_calls",
    """
    class Logger:
        def __init__(self, sink):
            self.sink = sink
        def log(self, message):
            self.sink.append(message)
            return len(self.sink)
    """,
    [
        """
        sink = []
        logger = Logger(sink)
        logger.log('a')
        sink.append('b')
        assert logger.log('c') == 3
        assert sink == ['a', 'b', 'c']
        """
    ],
)
humaneval(
    "r8_he_contextmanager_with_the_tests_list",
    "collecting",
    """
    from contextlib import contextmanager
    @contextmanager
    def collecting(sink):
        sink.append('start')
        yield sink
        sink.append(f'end after {len(sink)}')
    """,
    """
    def check(candidate):
        sink = []
        with candidate(sink):
            sink.append('body')
        assert sink == ['start', 'body', 'end after 2']
    """,
)
class_task(
    "r8_cls_in_place_add_of_two_vectors",
    """
    class Vector:
        def __init__(self, x, y):
            self.x, self.y = x, y
        def __iadd__(self, other):
            self.x += other.x
            self.y += other.y
            return self
        def __eq__(self, other):
            return (self.x, self.y) == (other.x, other.y)
    """,
    [
        """
        v = Vector(1, 2)
        w = v
        v += Vector(3, 4)
        assert v is w
        assert w == Vector(4, 6)
        """
    ],
)
class_task(
    "r8_cls_numeric_protocols",
    """
    import math
    class Amount:
        def __init__(self, value):
            self.value = value
        def __floor__(self):
            return math.floor(self.value)
        def __ceil__(self):
            return math.ceil(self.value)
        def __trunc__(self):
            return int(self.value)
        def __complex__(self):
            return complex(self.value, 0)
        def __bytes__(self):
            return str(self.value).encode()
        def __divmod__(self, other):
            return divmod(self.value, other.value)
    """,
    [
        "import math\nassert math.floor(Amount(2.5)) == 2 and math.ceil(Amount(2.5)) == 3",
        "import math\nassert math.trunc(Amount(-2.5)) == -2",
        "assert complex(Amount(1.5)) == 1.5 + 0j",
        "assert bytes(Amount(7)) == b'7'",
        "assert divmod(Amount(7), Amount(2)) == (3, 1)",
    ],
)
class_task(
    "r8_cls_generic_class_subscripted",
    """
    from typing import Generic, TypeVar
    T = TypeVar('T')
    class Box(Generic[T]):
        def __init__(self, item):
            self.item = item
        def get(self):
            return self.item
    """,
    ["assert Box[int](3).get() == 3", "assert Box(4).get() == 4"],
)
humaneval(
    "r8_he_zoneinfo_datetimes_both_ways",
    "in_zone",
    """
    from zoneinfo import ZoneInfo
    def in_zone(moment, key):
        return moment.astimezone(ZoneInfo(key))
    """,
    """
    from datetime import datetime
    from zoneinfo import ZoneInfo
    def check(candidate):
        paris = datetime(2024, 1, 1, 12, tzinfo=ZoneInfo('Europe/Paris'))
        assert candidate(paris, 'UTC').hour == 11
        assert candidate(paris, 'America/New_York') == paris
        assert candidate(paris, 'America/New_York').tzinfo == ZoneInfo('America/New_York')
    """,
)


# ---------------------------------------------------------------- rounds 9 and 10: the fidelity adversaries' rows
# as it wrote them (fixtures/fidelity_round9.jsonl): a class's own attributes named like str methods
# (Employee.count), LeetCode drivers that name the class in a string (globals()[op], eval(op)), changes to a list or
# dict read from a program object's attribute (e.tags.append), APPS/TACO call-based rows (fn_name)
# Round 10's (fixtures/fidelity_round10.jsonl): class tasks with an ABC preamble base, type(obj) is Cls, APPS/TACO
# call-based answers of tuples and int-keyed dicts, stdin given as lists of lines; JavaScript and C++ MultiPL-E rows.
# Round 11's (fixtures/fidelity_round11.jsonl; the r11_own_* rows are the judge fixes' own cases): OOP and LeetCode
# forms, iter(it) is it, a test's bound method passed twice, isinstance(gen, types.GeneratorType), a __getattr__
# proxy, issubclass and __mro__ of program classes, a matrix row the test holds while the program changes it
for _round in ("fidelity_round9.jsonl", "fidelity_round10.jsonl", "fidelity_round11.jsonl"):
    for _row in map(json.loads, (Path(__file__).parent / "fixtures" / _round).open()):
        CASES.append((_row["id"], _row.pop("form"), _row))


# ---------------------------------------------------------------- what the judge rejects today, by cause
REJECTED_TODAY: dict[str, str] = {  # case id -> why the judge rejects it
    "r7_he_numpy_masked_array": "a masked array travels as its data (a plain ndarray)",
    "r7_cls_operators_with_numbers": "a program object's arithmetic with a number is not forwarded",
    "r7_cls_eq_with_string": "a program object's own __eq__ with a str is not trusted (by design: forgeable)",
    "r7_cls_own_contains": "a program object's own __contains__ is not trusted (by design: forgeable)",
    "r7_cls_test_subclass_calls_super": "super() in the test's subclass of a program class meets a handle",
    "r9_np_test_passes_rng_generator": "a numpy Generator of the test does not travel",
    "r11_cls_getattr_delegating_proxy": "a str method a reference's __getattr__ proxy forwards is refused (by design: "
    "a proxy class's name is the program's to use, and its own startswith would answer; its fields are read)",
    "r11_cls_context_manager_suppresses_error": "a program's __exit__ is told of the test's exception but never "
    "suppresses it (by design: a suppressing context manager would pass any failing check in its body)",
    "r7_mbpp_program_reads_setup_global": "MBPP's setup code runs in the judge alone, never in the program's "
    "process: it may compute expected values (tests/test_reward_integrity.py), so its globals are not the program's",
}


# ---------------------------------------------------------------- the test
def _language(row: dict) -> str:
    return row.get("language", "python")


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    """The scored row of a case, by id: its language's cases are scored in one ``diffugrpo rewards score`` batch,
    once (Python's in the default run; C++, Java and JavaScript compile, so theirs are ``slow``)."""
    batches: dict[bool, dict[str, dict]] = {}

    def scored(case_id: str) -> dict:
        is_python = _language(ROWS[case_id]) == "python"
        if is_python not in batches:
            path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
            rows = [row for row in ROWS.values() if (_language(row) == "python") == is_python]
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
            command = [sys.executable, "-c", "import sys; from diffugrpo_plugin.cli import main; sys.exit(main())"]
            command += ["rewards", "score", str(path), "--reward", "code=1.0", "--timeout-s", "10"]
            done = subprocess.run(command + ["--max-concurrency", "2"], capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, done.stderr[-2000:]
            batches[is_python] = {row["id"]: row for row in map(json.loads, done.stdout.splitlines())}
        return batches[is_python][case_id]

    return scored


ROWS = {case_id: row for case_id, _, row in CASES}


def test_every_case_has_its_own_id_and_every_rejection_names_one():
    assert len(ROWS) == len(CASES)
    assert set(REJECTED_TODAY) <= set(ROWS)


def _marks(case_id: str) -> list:
    marks = [] if _language(ROWS[case_id]) == "python" else [pytest.mark.slow]
    return marks


@pytest.mark.parametrize(
    "case_id", [pytest.param(case_id, marks=_marks(case_id), id=f"{form}-{case_id}") for case_id, form, _ in CASES]
)
def test_correct_program_passes(scores, case_id):
    scored = scores(case_id)
    if case_id in REJECTED_TODAY:  # the judge's open limits (docs/guides/sandbox.md): fixing one moves it out
        assert scored["rewards"]["code"] < 1.0, f"now accepted, take it out of REJECTED_TODAY: {case_id}"
        return
    assert scored["rewards"]["code"] == 1.0, (scored.get("reasons"), scored.get("tests"))
