from h import *
many([
 ("FN21 generator prefetch + islice(2)", "def nat():\n    n = 0\n    while True:\n        yield n\n        n += 1\n", A("from itertools import islice\ng = nat()\nassert list(islice(g, 2)) == [0, 1]\nassert next(g) == 2", "g = nat()\nfor x in g:\n    if x == 1:\n        break\nassert next(g) == 2", "g = nat()\nassert list(zip(g, 'ab')) == [(0, 'a'), (1, 'b')]\nassert next(g) == 2"), "PASS"),
 ("FN25 generator side effects seen by test", "log = []\ndef gen():\n    for i in range(10):\n        log.append(i)\n        yield i\n", A("g = gen()\nnext(iter(g))\nassert len(log) == 1", "for x in gen():\n    break\nassert log == [0]"), "PASS"),
 ("FN26 stdlib-name program fn (no reference row)", "def calendar(y):\n    return y % 4 == 0\n", A("assert calendar(2024) == True"), "PASS"),
 ("FN27 Decimal via program but test compares float", "def f():\n    return float('nan')\n", A("import math\nassert math.isnan(f())"), "PASS"),
])
