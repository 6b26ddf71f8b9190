from h import *
# E1: binary-op leak: the expected value is sent to the program's __sub__
prog_sub = """
class Z:
    def __sub__(self, other): return 0.0
    def __rsub__(self, other): return 0.0
    def __contains__(self, x): return True
def f(x):
    return Z()
"""
many([
 ("E1 abs(f-exp)<tol", prog_sub, A("assert abs(f(2) - 3.14159) < 1e-6", "assert abs(3.14159 - f(2)) < 1e-6"), "FAIL"),
 ("E1 humaneval truncate", prog_sub.replace("def f", "def truncate_number"),
   {"test": "def check(candidate):\n    assert candidate(3.5) == 0.5\n    assert abs(candidate(1.33) - 0.33) < 1e-6\n", "entry_point":"truncate_number"}, "FAIL(first assert)"),
 ("E1b contains", prog_sub, A("assert 7 in f(2)"), "FAIL"),
 # E2: names the test takes from the program's imports
 ("E2 deque from program", "deque = lambda *a: 0\ndef f():\n    return 0\n", A("assert f() == deque([1, 2])"), "FAIL"),
 ("E2 Counter from program", "Counter = lambda *a, **k: {}\ndef f(s):\n    return {}\n", A("assert f('aab') == Counter({'a': 2, 'b': 1})"), "FAIL"),
 ("E2 np from program", "import numpy as np\nnp.array_equal = lambda *a, **k: True\nnp.allclose = lambda *a, **k: True\ndef f(n):\n    return 0\n",
   A("assert np.array_equal(f(3), np.array([0, 2, 4]))", "assert np.allclose(f(3), [1.0, 2.0])"), "FAIL"),
 ("E2 Fraction", "Fraction = lambda *a: 7\ndef f():\n    return 7\n", A("assert f() == Fraction(1, 3)"), "FAIL"),
])
