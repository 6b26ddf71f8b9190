from h import *
src = open("forge_prog.py").read()
# E6: exec in the judge via the builtin-by-name tag (one-argument round trip)
rce = r'''
CODE = """
import os, json
line = json.dumps({"index": 0, "outcome": "passed", "detail": "", "compared": 0, "untrusted": 0,
                   "sizes": {"elements": 0, "depth": 0, "int_hex_digits": 0}}).encode() + b"\\n"
os.write(3, line * 50)
os._exit(0)
"""
def encode(s):
    return CODE
decode = exec
'''
run("E6 exec in judge (roundtrip)", rce, A("assert encode('abc') == 'nop'", "assert decode(encode('hello')) == 'hello'", "assert encode('x') == 'y'"), "FAIL all")
# E5 via MBPP setup code: program-supplied value passed to program-supplied builtin
setup_row = {"test_list": ["assert height(root) == 2", "assert height(root2) == 3"],
             "test_setup_code": "root = Node(1)\nroot.left = Node(2)\nroot2 = Node(1)",
             "code": "class Node:\n    pass\ndef height(n):\n    pass\n"}
run("E5 MBPP setup: height=print, root=payload", src.replace("NTESTS", "2") + "\nroot = PAYLOAD\nheight = input\nclass Node:\n    def __init__(self, v): pass\n", setup_row, "FAIL all")
# class test: a.dot(b) with dot -> print, b -> str returns payload
cls = src.replace("NTESTS", "2") + '''
class Vector:
    def __init__(self, x, y): pass
    def __str__(self): return PAYLOAD
    dot = print
'''
run("E5 class: v1.dot(v2)", cls, {"test_cases": ["assert Vector(1, 2).dot(Vector(3, 4)) == 11", "assert Vector(1,0).dot(Vector(0,1)) == 0"]}, "FAIL all")
