from h import *
run("sanity", "def f(x):\n    return x*x\n", A("assert f(2) == 4"), "PASS")
