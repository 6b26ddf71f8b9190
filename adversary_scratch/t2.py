from h import *
import marshal
src = open("forge_prog.py").read()
# local sanity of the forged frames
ns = {}; exec(src.replace("NTESTS", "2"), ns)
raw = ns["PAYLOAD"].encode()
print(marshal.loads(raw[8:8+int.from_bytes(raw[:8],'little')])["judge"])
row = A("assert encrypt('abc', 1) == 'bcd'", "assert decrypt(encrypt('hello', 3), 3) == 'hello'", "assert encrypt('xyz', 2) == 'zab'")
run("E5 frame forgery via judge stdout", src.replace("NTESTS", "3"), row, "FAIL all")
