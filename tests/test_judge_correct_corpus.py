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


# ---------------------------------------------------------------- what the judge rejects today, by cause
REJECTED_TODAY: dict[str, str] = {}  # case id -> why the judge rejects it (none today)


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
