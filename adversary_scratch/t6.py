from h import *
import resource, time
rce = r'''
CODE = """
import os
chunk = b"x" * (1 << 24)
for _ in range(128):   # 2 GiB to the harness's stderr pipe
    os.write(2, chunk)
"""
def encode(s):
    return CODE
decode = exec
'''
t = time.time()
run("H1 judge floods harness stderr", rce, A("assert decode(encode('hello')) == 'hello'"), "bounded")
print("harness peak RSS MB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, "secs", time.time() - t)
