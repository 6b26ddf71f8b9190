import sys, json
sys.path.insert(0, "/work/main")
from diffugrpo_plugin.code_execution import run_tests, tests_from_row, run_tests_many
from diffugrpo_plugin.sandbox import Sandbox, SandboxConfig
box = Sandbox(SandboxConfig(timeout_s=3, memory_mb=1024, max_concurrency=4))
def run(name, program, row, expect=None):
    try:
        out = run_tests(program, tests_from_row(row), box, cache=False)
        s = [(o.outcome.value, o.detail[:150], o.compared) for o in out]
    except Exception as e:
        s = f"EXC {type(e).__name__}: {e}"
    print(f"== {name} (expect {expect}):", s, flush=True)
    return s
def many(cases):
    res = run_tests_many([(p, tests_from_row(r)) for _, p, r, _ in cases], box, cache=False)
    for (name, _, _, exp), r in zip(cases, res):
        s = r if isinstance(r, Exception) else [(o.outcome.value, o.detail[:150], o.compared) for o in r]
        print(f"== {name} (expect {exp}):", s, flush=True)
def A(*t, **kw): return {"test_cases": list(t), **kw}
