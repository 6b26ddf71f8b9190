from h import *
LP = open("/work/main/tests/test_judge.py").read().split('LEETCODE_PREAMBLE = """')[1].split('"""')[0]
def lc(test, entry): return {"test": test, "entry_point": entry, "test_imports": [LP]}
he4 = {"test": "\n\nMETADATA = {\n    'author': 'jt',\n    'dataset': 'test'\n}\n\n\ndef check(candidate):\n    assert abs(candidate([1.0, 2.0, 3.0]) - 2.0/3.0) < 1e-6\n    assert abs(candidate([1.0, 2.0, 3.0, 4.0]) - 1.0) < 1e-6\n    assert abs(candidate([1.0, 2.0, 3.0, 4.0, 5.0]) - 6.0/5.0) < 1e-6\n\n",
       "entry_point": "mean_absolute_deviation",
       "prompt": "from typing import List\n\n\ndef mean_absolute_deviation(numbers: List[float]) -> float:\n    \"\"\" doc \"\"\"\n",
       "canonical_solution": "    mean = sum(numbers) / len(numbers)\n    return sum(abs(x - mean) for x in numbers) / len(numbers)\n"}
many([
 ("E1 HumanEval/4 verbatim", "class Z:\n    __sub__ = __rsub__ = lambda self, other: 0.0\ndef mean_absolute_deviation(numbers):\n    return Z()\n", he4, "FAIL"),
 ("E1c str method leak", "class S:\n    def startswith(self, p): return True\ndef f(x):\n    return S()\n", A("assert f(3).startswith('abc')"), "FAIL"),
 ("FN21 generator prefetch + islice", "def nat():\n    n = 0\n    while True:\n        yield n\n        n += 1\n", A("from itertools import islice\ng = nat()\nassert list(islice(g, 3)) == [0, 1, 2]\nassert next(g) == 3"), "PASS"),
 ("FN22 program objects as dict keys / set members", "class P:\n    def __init__(self, v):\n        self.v = v\n    def __eq__(self, o):\n        return self.v == o.v\n    def __hash__(self):\n        return hash(self.v)\n", A("assert len({P(1), P(1)}) == 1", "assert {P(1): 'a'}[P(1)] == 'a'"), "PASS"),
 ("FN23 returned linked list of 600 nodes", "class Solution:\n    def build(self, n):\n        head = None\n        for v in reversed(range(n)):\n            head = ListNode(v, head)\n        return head\n",
   lc("def check(candidate):\n    h = candidate(600)\n    n = 0\n    while h:\n        n += 1\n        h = h.next\n    assert n == 600\n", "Solution().build"), "PASS"),
 ("FN24 a skewed tree of depth 700 sent to program", "class Solution:\n    def depth(self, root):\n        d = 0\n        while root:\n            d += 1\n            root = root.right\n        return d\n",
   lc("def check(candidate):\n    r = TreeNode(0)\n    c = r\n    for i in range(699):\n        c.right = TreeNode(i)\n        c = c.right\n    assert candidate(r) == 700\n", "Solution().depth"), "PASS"),
])
