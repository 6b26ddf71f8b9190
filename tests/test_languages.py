"""C++, Java and JavaScript: MultiPL-E's data prepared, programs compiled and run in the sandbox, verdicts.

The data tests read ``fixtures/multipl_e.jsonl``, rows written in MultiPL-E's published schema (``name``,
``language``, ``prompt``, ``tests``, ...) as its translators produce them. Everything that runs a program is
marked ``sandbox`` and ``toolchains``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from diffugrpo_plugin.cli import main as cli
from diffugrpo_plugin.data import DataError, prepare, write_parquet
from diffugrpo_plugin.data.rows import read_parquet_rows
from diffugrpo_plugin.data.sources import java_check
from diffugrpo_plugin.rewards.code_tests import extract_code
from diffugrpo_plugin.rewards.code_tests import tests_from_row as spec_of
from diffugrpo_plugin.rewards.judging import format_verdict
from diffugrpo_plugin.rewards.test_runs import Outcome, run_tests
from diffugrpo_plugin.sandbox import languages
from diffugrpo_plugin.sandbox.config import SandboxError
from diffugrpo_plugin.tools import evaluation
from reward_plugins.code import code_reward
from reward_plugins.code_format import code_format_reward
from reward_plugins.maintainability import diffugrpo_reward_functions as maintainability_functions
from reward_plugins.syntax import diffugrpo_reward_functions as syntax_functions
from reward_support import tight_sandbox

FIXTURE = Path(__file__).parent / "fixtures" / "multipl_e.jsonl"

SOLUTIONS = {  # (task, language) -> a correct completion, and a wrong one
    ("HumanEval_53_add", "cpp"): (
        "long add(long x, long y) { return x + y; }",
        "long add(long x, long y) { return x - y; }",
    ),
    ("HumanEval_34_unique", "cpp"): (
        "std::vector<long> unique(std::vector<long> l) {\n    std::set<long> s(l.begin(), l.end());\n"
        "    return std::vector<long>(s.begin(), s.end());\n}",
        "std::vector<long> unique(std::vector<long> l) { return l; }",
    ),
    ("HumanEval_53_add", "java"): (
        "class Problem {\n    public static long add(long x, long y) { return x + y; }\n}",
        "class Problem {\n    public static long add(long x, long y) { return x * y; }\n}",
    ),
    ("HumanEval_34_unique", "java"): (
        "class Problem {\n    public static ArrayList<Long> unique(ArrayList<Long> l) {\n"
        "        return new ArrayList<Long>(new TreeSet<Long>(l));\n    }\n}",
        "class Problem {\n    public static ArrayList<Long> unique(ArrayList<Long> l) { return l; }\n}",
    ),
    ("HumanEval_53_add", "javascript"): (
        "function add(x, y) {\n  return x + y;\n}",
        "function add(x, y) { return x + y + 1; }",
    ),
    ("HumanEval_111_histogram", "cpp"): (
        "std::map<std::string, long> histogram(std::string test) {\n"
        "    std::map<std::string, long> count;\n    std::stringstream words(test);\n    std::string word;\n"
        "    while (words >> word) count[word]++;\n    long most = 0;\n"
        "    for (auto& [letter, n] : count) most = std::max(most, n);\n    std::map<std::string, long> out;\n"
        "    for (auto& [letter, n] : count) if (n == most) out[letter] = n;\n    return out;\n}",
        "std::map<std::string, long> histogram(std::string test) { return {}; }",
    ),
    ("HumanEval_111_histogram", "java"): (
        "class Problem {\n    public static HashMap<String,Long> histogram(String test) {\n"
        "        HashMap<String,Long> count = new HashMap<>();\n"
        '        for (String word : test.split(" ")) if (!word.isEmpty()) count.merge(word, 1L, Long::sum);\n'
        "        long most = count.values().stream().mapToLong(Long::longValue).max().orElse(0);\n"
        "        HashMap<String,Long> out = new HashMap<>();\n"
        "        count.forEach((letter, n) -> { if (n == most) out.put(letter, n); });\n        return out;\n    }\n}",
        "class Problem {\n    public static HashMap<String,Long> histogram(String test) { return new HashMap<>(); }\n}",
    ),
    ("mbpp_3_is_not_prime", "cpp"): (
        "bool is_not_prime(long n) {\n    if (n < 2) return true;\n"
        "    for (long d = 2; d * d <= n; ++d) if (n % d == 0) return true;\n    return false;\n}",
        "bool is_not_prime(long n) { return false; }",
    ),
    ("HumanEval_34_unique", "javascript"): (
        "function unique(l) {\n  return [...new Set(l)].sort((a, b) => a - b);\n}",
        "function unique(l) { return l; }",
    ),
}


def fenced(code: str, fence: str) -> str:
    return f"```{fence}\n{code}\n```\n"


@pytest.fixture(scope="module")
def rows():
    return prepare("multipl-e", "test", FIXTURE)


@pytest.fixture(scope="module")
def box():
    return tight_sandbox(timeout_s=5.0, memory_mb=1024, max_output_bytes=20_000)


def columns_of(selected: list[dict]) -> dict[str, list]:
    names = ("language", "test", "test_imports", "inputs", "outputs")
    return {name: [row["extra_info"].get(name) for row in selected] for name in names}


# --------------------------------------------------------------------------- data preparation


def test_multipl_e_rows_become_self_contained_language_rows(rows):
    assert [(row["extra_info"]["task_id"], row["extra_info"]["language"]) for row in rows] == [
        ("cpp/HumanEval_53_add", "cpp"),
        ("cpp/HumanEval_34_unique", "cpp"),
        ("java/HumanEval_53_add", "java"),
        ("java/HumanEval_34_unique", "java"),
        ("javascript/HumanEval_53_add", "javascript"),
        ("javascript/HumanEval_34_unique", "javascript"),
        ("cpp/HumanEval_111_histogram", "cpp"),
        ("java/HumanEval_111_histogram", "java"),
        ("cpp/mbpp_3_is_not_prime", "cpp"),
    ]
    cpp, java, js = rows[0]["extra_info"], rows[2]["extra_info"], rows[4]["extra_info"]
    # C++: the function-closing brace is gone; the tests declare the function, then main; includes -> test_imports
    assert cpp["test"].startswith("long add(long x, long y);\nint main() {\n    auto candidate = add;")
    assert 'if (!(Problem.add((0l), (1l)) == (1l))) throw new AssertionError("test 1 failed");' in java["test"]
    assert cpp["test_imports"] == ["#include<assert.h>", "#include<bits/stdc++.h>"]
    prompt = rows[0]["prompt"][0]["content"]
    assert "```cpp\n// Add two numbers x and y" in prompt and "long add(long x, long y) {\n```" in prompt
    assert "#include" not in prompt
    # Java: main moves to class ProblemTests calling Problem.add, asserts become checks; javatuples is not imported
    assert java["test"].startswith("class ProblemTests {\n    public static void main(String[] args) {")
    assert "if (!(Problem.add((0l), (1l)) == (1l))) throw new AssertionError(" in java["test"]
    assert "import java.util.*;" in java["test_imports"] and not any(
        "javatuples" in line for line in java["test_imports"]
    )
    # JavaScript: kept as written
    assert js["test"].startswith("const assert = require('node:assert');") and js["test"].endswith("test();")
    assert json.loads(rows[0]["reward_model"]["ground_truth"])["language"] == "cpp"


def test_java_checks_call_problem_and_ask_the_expected_value():
    call = "unique((new ArrayList<Long>(Arrays.asList((long)5l))))"
    expected = "(new ArrayList<Long>(Arrays.asList((long)0l)))"
    # a failed check says its number only: the expected value stays out of what a program could catch
    assert java_check(f"    assert({call}.equals({expected}));", "unique", 3) == (
        f'    if (!(Objects.equals({expected}, Problem.{call}))) throw new AssertionError("test 3 failed");'
    )
    # only a whole-expression `a.equals(b)` is swapped; brackets and strings are skipped over
    assert "Objects" not in java_check("    assert(a.equals(b) && c.equals(d));", "f")
    assert "Objects" not in java_check("    assert(x.equals(y).equals(z));", "f")
    assert 'Objects.equals(("x)"), Problem.f("f(b)"))' in java_check('    assert(f("f(b)").equals(("x)")));', "f")
    assert java_check("    long x = g(3) + myf(2);", "f") == "    long x = g(3) + myf(2);"


def test_multipl_e_errors_name_the_fix(tmp_path):
    with pytest.raises(DataError, match="humaneval-\\* configs translate HumanEval, an evaluation set"):
        prepare("multipl-e", "train", FIXTURE, config="humaneval-cpp")
    record = json.loads(FIXTURE.read_text().splitlines()[0])
    for change, message in [
        ({"language": "rs"}, "field 'language' is 'rs'; the sandbox runs cpp, java, js"),
        ({"tests": "int main() {}\n"}, "field 'tests' should start by closing the prompt's function"),
        ({"prompt": None}, "missing field 'prompt'"),
    ]:
        path = tmp_path / "bad.jsonl"
        path.write_text(json.dumps({**record, **change}) + "\n")
        with pytest.raises(DataError, match=message):
            prepare("multipl-e", "test", path)
    with pytest.raises(DataError, match="pass --input FILE .* or --multipl-e-config"):
        prepare("multipl-e", "test")


def test_language_rows_survive_parquet_and_the_cli(rows, tmp_path, capsys):
    path = write_parquet(rows, tmp_path / "test.parquet")
    assert [row["extra_info"]["language"] for row in read_parquet_rows(path)] == [
        row["extra_info"]["language"] for row in rows
    ]
    assert (
        cli(["data", "prepare", "--source", "multipl-e", "--input", str(FIXTURE), "--output", str(tmp_path / "cli")])
        == 0
    )
    printed = capsys.readouterr()
    assert "test: 9 rows" in printed.out
    assert "left out 1 rows whose tests use javatuples" in printed.err


# --------------------------------------------------------------------------- reading rows, formats


def test_language_column_picks_the_fence_and_the_tests():
    row = {"language": "c++", "inputs": ["1\n"], "outputs": ["1\n"]}
    spec = spec_of(row)
    assert (spec.kind, spec.language, spec.stdio) == ("stdio", "cpp", (("1\n", "1\n"),))
    assert extract_code("text\n```c++\nint x;\n```\n```python\ny = 1\n```", language="cpp") == "int x;\n"
    assert extract_code("```python\ny = 1\n```", language="java") is None
    assert format_verdict("```javascript\nlet x = ;\n```\n", language="javascript") == (
        1.0,
        None,
    )  # no parser: 1.0 on shape
    score, reason = format_verdict("```python\nx = 1\n```\n", language="cpp")
    assert score == 0.0 and "the format needs ```cpp alone on its line" in reason.detail
    java, python = code_format_reward(["```java\nclass A {}\n```\n"] * 2, language=["java", "python"])
    assert java == 1.0 and python.value == 0.0 and "needs ```python" in python.reason.detail


def test_bad_language_rows_are_one_line_errors():
    with pytest.raises(ValueError, match="column 'language': unknown language 'cobol'; choose one of"):
        spec_of({"language": "cobol", "test": "x"})
    with pytest.raises(ValueError, match="assert strings are Python tests; a cpp row needs 'test'"):
        spec_of({"language": "cpp", "test_cases": ["assert f(1) == 2"]})
    with pytest.raises(ValueError, match="column 'test' must hold the java tests' source"):
        spec_of({"language": "java", "test": ""})
    assert spec_of({"language": "cpp"}) is None


def test_python_only_rewards_say_not_applicable_on_other_languages():
    syntax = syntax_functions()["syntax"]
    scores = syntax(["```python\nx = 1\n```\n", "```cpp\nint x;\n```\n"], language=["python", "cpp"])
    assert scores[0] == 1.0
    assert scores[1].value is None and scores[1].reason.kind == "not_applicable"
    maintainability = maintainability_functions()["maintainability"]
    [score] = maintainability(["```cpp\nint x;\n```\n"], language=["cpp"], test=["int main() {}"])
    assert score.value is None and "this row is cpp" in score.reason.detail


# --------------------------------------------------------------------------- running them


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_correct_programs_pass_and_wrong_ones_fail_in_every_language(rows, box):
    completions, wrong = [], []
    for row in rows:
        language = row["extra_info"]["language"]
        right, bad = SOLUTIONS[(row["extra_info"]["task_id"].split("/")[1], language)]
        fence = languages.language(language).fences[0]
        completions.append(fenced(right, fence))
        wrong.append(fenced(bad, fence))
    columns = columns_of(rows)
    assert code_reward(completions, sandbox=box, **columns) == [1.0] * len(rows)
    for score in code_reward(wrong, sandbox=box, **columns):
        assert score.value == 0.0 and "the tests failed" in score.reason.detail
    outcome = run_tests(SOLUTIONS[("HumanEval_53_add", "java")][0], spec_of(rows[2]["extra_info"]), box, cache=False)
    assert outcome[0].passed and outcome[0].judged_inside


CPP_READS_ITS_SOURCE = """long add(long x, long y) { return 0; }
#include <fstream>
#include <sstream>
#include <regex>
static int forged = [] {
    std::ifstream in("solution.cpp"); std::stringstream text; text << in.rdbuf();
    std::ifstream tests("tests.cpp"); text << tests.rdbuf();
    std::smatch found; std::string s = text.str();
    if (!std::regex_search(s, found, std::regex("masked\\[\\] = \\{([^}]*)\\}, mask\\[\\] = \\{([^}]*)\\}"))) return 0;
    std::stringstream a(found[1].str()), b(found[2].str()); std::string x, y;
    while (std::getline(a, x, ',') && std::getline(b, y, ',')) std::putchar(std::stoi(x) ^ std::stoi(y));
    std::puts(""); std::fflush(stdout); std::_Exit(0);
}();"""
JAVA_READS_ITS_SOURCE = """class Problem {
    public static long add(long x, long y) { return 0; }
    static {
        try {
            for (java.io.File f : new java.io.File(".").listFiles()) {
                if (!f.getName().endsWith(".java")) continue;
                String s = new String(java.nio.file.Files.readAllBytes(f.toPath()));
                java.util.regex.Matcher m = java.util.regex.Pattern.compile(
                    "int\\\\[\\\\] masked = \\\\{([^}]*)\\\\}, mask = \\\\{([^}]*)\\\\}").matcher(s);
                if (m.find()) {
                    String[] a = m.group(1).split(", "), b = m.group(2).split(", ");
                    StringBuilder line = new StringBuilder();
                    for (int i = 0; i < a.length; i++) line.append((char) (Integer.parseInt(a[i]) ^ Integer.parseInt(b[i])));
                    System.out.println(line); System.out.flush(); System.exit(0);
                }
            }
        } catch (Exception e) {}
    }
}"""
CPP_FORK_ORACLE = "#include <unistd.h>\n#include <sys/wait.h>\nlong add(long x, long y) {\n    for (long v = -20; v < 200; ++v) {\n        pid_t p = fork();\n        if (p == 0) return v;  // child: answer v and let the tests go on\n        int st; waitpid(p, &st, 0);\n        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) _exit(0);  // that child got through every test\n    }\n    _exit(1);\n}"
CPP_JUMPS_PAST_THE_TESTS = 'extern "C" int runner_main() __asm__("main");  // the runner\'s main (a string: -Dmain does not rename it)\nlong add(long x, long y) {\n    unsigned long *slot = (unsigned long *)__builtin_frame_address(0);\n    unsigned long start = (unsigned long)&runner_main;\n    for (int i = 0; i < 4096; ++i, ++slot)\n        if (*slot > start && *slot < start + 64)  // the return address of main\'s call of the tests\n            asm volatile("mov %0, %%rsp\\n\\tjmp *%1" :: "r"(slot + 1), "r"(*slot));\n    return 0;\n}'
CPP_UNIQUE_SYMBOLS_REPLACE_THE_MAP = '#include <bits/stdc++.h>\n// STB_GNU_UNIQUE (\'u\' in nm) copies of the two insert-position helpers the tests\' std::map literals use: the\n// localisation keeps them global (it keeps the program\'s \'u\' symbols the tests also define), and the linker\n// prefers a unique (global) definition over the tests\' weak one. Every map the tests build stays empty.\n#define HELPER(name) asm(".text\\n.globl " name "\\n.type " name ", @gnu_unique_object\\n" name ":\\n xor %eax, %eax\\n xor %edx, %edx\\n ret\\n");\nHELPER("_ZNSt8_Rb_treeINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt4pairIKS5_lESt10_Select1stIS8_ESt4lessIS5_ESaIS8_EE24_M_get_insert_unique_posERS7_")\nHELPER("_ZNSt8_Rb_treeINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt4pairIKS5_lESt10_Select1stIS8_ESt4lessIS5_ESaIS8_EE29_M_get_insert_hint_unique_posESt23_Rb_tree_const_iteratorIS8_ERS7_")\nstd::map<std::string, long> histogram(std::string test) { return {}; }'
JAVA_CALLS_THE_TESTS_FOR_THEIR_FAILURES = 'import java.util.*;\nimport java.util.regex.*;\nclass Problem {\n    static Map<String, Long> known = new HashMap<>();\n    static boolean learning = false;\n    public static long add(long x, long y) {\n        if (!learning) {\n            learning = true;\n            for (int i = 0; i < 100; i++) {\n                try { ProblemTests.main(new String[0]); break; }  // the tests, run again from here\n                catch (AssertionError e) {  // its message is the failed line, expected value included\n                    Matcher m = Pattern.compile("add\\\\(\\\\((-?\\\\d+)l\\\\), \\\\((-?\\\\d+)l\\\\)\\\\) == \\\\((-?\\\\d+)l\\\\)").matcher(e.getMessage());\n                    if (!m.find()) break;\n                    known.put(m.group(1) + "," + m.group(2), Long.parseLong(m.group(3)));\n                }\n            }\n            learning = false;\n        }\n        return known.getOrDefault(x + "," + y, 0L);\n    }\n}'
JS_REQUIRES_A_FILE_FOR_THE_INSPECTOR = "const fs = require('fs');\nfs.writeFileSync('/tmp/x.js', \"module.exports = require('inspector');\");  // a file's own require is node's\nconst inspector = require('/tmp/x.js');\nconst session = new inspector.Session();\nsession.connect();\nconst scripts = [];\nsession.on('Debugger.scriptParsed', (m) => scripts.push(m.params));\nsession.post('Debugger.enable');\nfor (const script of scripts) if (/diffugrpo_runner/.test(script.url))\n  session.post('Debugger.getScriptSource', { scriptId: script.scriptId }, (error, result) => {\n    const m = /const masked = \\[([^\\]]*)\\], mask = \\[([^\\]]*)\\]/.exec(result.scriptSource);\n    const a = m[1].split(',').map(Number), b = m[2].split(',').map(Number);\n    fs.writeSync(1, String.fromCharCode(...a.map((x, i) => x ^ b[i])) + '\\n');\n    process.exit(0);\n  });\nfunction add(x, y) { return 0; }"
JAVA_ALWAYS_EQUAL_LIST = "new ArrayList<Long>() { public boolean equals(Object o) { return true; } }"


@pytest.mark.sandbox
@pytest.mark.toolchains
@pytest.mark.parametrize(
    "task, code",
    [  # each wrong (returns 0, or its input) and trying to pass anyway; found by an adversarial review
        (
            "cpp/HumanEval_53_add",
            "#include <cstdlib>\nstatic int ended = (std::exit(0), 0);\nlong add(long x, long y) { return 0; }",
        ),
        ("cpp/HumanEval_53_add", "#include <cstdlib>\nlong add(long x, long y) { std::exit(0); }"),
        ("cpp/HumanEval_53_add", "#define NDEBUG\n#define assert(x) ((void)0)\nlong add(long x, long y) { return 0; }"),
        ("cpp/HumanEval_53_add", "long add(long x, long y) { return 0; }\n#define candidate(...) 1 ? true : 0"),
        ("cpp/HumanEval_53_add", "long add(long x, long y) { return 0; }\n#define __assert_fail(...) ((void)0)"),
        (
            "cpp/HumanEval_53_add",
            'extern "C" void __assert_fail(const char*, const char*, unsigned, const char*) {}\nlong add(long x, long y) { return 0; }',
        ),
        (
            "cpp/HumanEval_53_add",
            "long add(long x, long y) { return 0; }\nint my_ok() { return 0; }\n#define diffugrpo_tests_main my_ok(); int unused",
        ),
        ("cpp/HumanEval_53_add", CPP_READS_ITS_SOURCE),
        (
            "cpp/HumanEval_34_unique",
            '#include <cstddef>\nextern "C" int memcmp(const void*, const void*, std::size_t) { return 0; }\n#include <vector>\nstd::vector<long> unique(std::vector<long> l) { return std::vector<long>(l.size()); }',
        ),
        (
            "cpp/HumanEval_34_unique",
            "#include <vector>\nbool operator==(const std::vector<long>&, const std::vector<long>&) { return true; }\nstd::vector<long> unique(std::vector<long> l) { return l; }",
        ),
        (
            "java/HumanEval_53_add",
            "class Problem {\n    static { System.exit(0); }\n    public static long add(long x, long y) { return 0; }\n}",
        ),
        (
            "java/HumanEval_53_add",
            "class Problem {\n    static { ClassLoader.getSystemClassLoader().setDefaultAssertionStatus(false); }\n    public static long add(long x, long y) { return 0; }\n}",
        ),
        ("java/HumanEval_53_add", JAVA_READS_ITS_SOURCE),
        (
            "java/HumanEval_34_unique",
            "class Problem {\n    public static ArrayList<Long> unique(ArrayList<Long> l) { return l; }\n    static J java = new J();\n    static class J { U util = new U(); }\n    static class U { O Objects = new O(); }\n    static class O { boolean equals(Object a, Object b) { return true; } }\n}",
        ),
        (
            "java/HumanEval_34_unique",
            f"class Problem {{\n    public static ArrayList<Long> unique(ArrayList<Long> l) {{ return l; }}\n    static class Arrays {{ static List<Long> asList(Long... a) {{ return {JAVA_ALWAYS_EQUAL_LIST}; }} }}\n}}",
        ),
        (
            "java/HumanEval_34_unique",
            "class Arrays { static java.util.List<Long> asList(Long... a) { return new java.util.ArrayList<Long>() { public boolean equals(Object o) { return true; } }; } }\nclass Problem {\n    public static ArrayList<Long> unique(ArrayList<Long> l) { return l; }\n}",
        ),
        (
            "java/HumanEval_34_unique",
            f"class Problem {{\n    public static ArrayList<Long> unique(ArrayList<Long> l) {{ return {JAVA_ALWAYS_EQUAL_LIST}; }}\n}}",
        ),
        ("javascript/HumanEval_53_add", "function add(x, y) { process.exit(0); }"),
        (
            "javascript/HumanEval_53_add",
            "require('node:assert').deepEqual = () => {};\nfunction add(x, y) { return 0; }",
        ),
        ("javascript/HumanEval_53_add", "function add(x, y) { return 0; }\nrequire = () => ({ deepEqual() {} });"),
        ("javascript/HumanEval_53_add", "function add(x, y) { return 0; }\ntest = () => {};"),
        (
            "javascript/HumanEval_53_add",
            "const M = require('module'), load = M._load;\nM._load = function (name, ...rest) { return /assert/.test(name) ? { deepEqual() {} } : load.call(this, name, ...rest); };\nfunction add(x, y) { return 0; }",
        ),
        (
            "javascript/HumanEval_53_add",
            "function add(x, y) {\n  const table = new Map();\n  for (const m of add.caller.toString().matchAll(/candidate\\((.*)\\),(.*)\\);/g)) table.set(m[1], eval(m[2]));\n  return table.get(x + ', ' + y);\n}",
        ),
        (
            "javascript/HumanEval_53_add",
            "const source = require('fs').readFileSync(__filename, 'utf8');\nfunction add(x, y) { return source.length; }",
        ),
        ("javascript/HumanEval_53_add", "const { Session } = require('inspector');\nfunction add(x, y) { return 0; }"),
        # a second review's
        ("cpp/HumanEval_53_add", CPP_FORK_ORACLE),
        ("cpp/HumanEval_53_add", CPP_JUMPS_PAST_THE_TESTS),
        ("cpp/HumanEval_111_histogram", CPP_UNIQUE_SYMBOLS_REPLACE_THE_MAP),
        ("java/HumanEval_53_add", JAVA_CALLS_THE_TESTS_FOR_THEIR_FAILURES),
        ("javascript/HumanEval_53_add", JS_REQUIRES_A_FILE_FOR_THE_INSPECTOR),
        (
            "javascript/HumanEval_53_add",
            "const inspector = process.getBuiltinModule('inspector');\nfunction add(x, y) { return 0; }",
        ),
    ],
)
def test_a_wrong_program_cannot_make_its_in_language_tests_pass(rows, box, task, code):
    row = next(row["extra_info"] for row in rows if row["extra_info"]["task_id"] == task)
    [outcome] = run_tests(code, spec_of(row), box, cache=False)
    assert not outcome.passed, outcome
    assert outcome.judged_inside or outcome.outcome is Outcome.COMPILATION_ERROR


@pytest.mark.slow  # 25 compiles; the default run judges correct programs in every language in the tests above
@pytest.mark.sandbox
@pytest.mark.toolchains
@pytest.mark.parametrize(
    "task, code",
    [  # correct programs written as models write them: every one passes
        (
            "cpp/HumanEval_34_unique",
            "#include <bits/stdc++.h>\nusing namespace std;\nvector<long> unique(vector<long> l) {\n    set<long> s(l.begin(), l.end());\n    return vector<long>(s.begin(), s.end());\n}",
        ),
        (
            "cpp/HumanEval_34_unique",
            "#include <bits/stdc++.h>\nusing namespace std;\nvector<long> unique(const vector<long>& l) {\n    set<long> s(l.begin(), l.end());\n    return {s.begin(), s.end()};\n}",
        ),
        ("cpp/HumanEval_53_add", "int add(int x, int y) { return x + y; }"),
        ("cpp/HumanEval_53_add", "inline long add(long x, long y) { return x + y; }"),
        ("cpp/HumanEval_53_add", "constexpr long add(long x, long y) { return x + y; }"),
        (
            "cpp/HumanEval_53_add",
            "#include <iostream>\nlong add(long x, long y) { return x + y; }\nint main() { std::cout << add(2, 3) << std::endl; return 0; }",
        ),
        (
            "cpp/HumanEval_53_add",
            "#include <bits/stdc++.h>\n#define int long long\nlong add(long x, long y) { return x + y; }\nsigned main() { return 0; }",
        ),
        (
            "java/HumanEval_53_add",
            "public class Problem {\n    public static long add(long x, long y) { return x + y; }\n}",
        ),
        (
            "java/HumanEval_53_add",
            "final class Problem {\n    private Problem() {}\n    public static long add(long x, long y) { return x + y; }\n    public static void main(String[] args) { System.out.println(add(2, 3)); }\n}",
        ),
        (
            "java/HumanEval_53_add",
            "import java.util.*;\nclass Util { static long sum(long a, long b) { return a + b; } }\nclass Problem {\n    public static long add(long x, long y) { return Util.sum(x, y); }\n}",
        ),
        (
            "javascript/HumanEval_53_add",
            "'use strict';\nconst assert = require('assert');\nfunction test() { return 1; }\nconst add = (x, y) => x + y;\nmodule.exports = add;",
        ),
        (
            "javascript/HumanEval_34_unique",
            "function unique(l) {\n  const seen = new Set(l);\n  console.log('debug', seen.size);\n  return [...seen].sort((a, b) => a - b);\n}",
        ),
        # a second review's: output without a final newline, and the ways C++ spells a function
        ("cpp/HumanEval_53_add", 'long add(long x, long y) { std::printf("%ld ", x + y); return x + y; }'),
        (
            "java/HumanEval_53_add",
            'class Problem {\n    public static long add(long x, long y) { System.out.print(x + y + " "); return x + y; }\n}',
        ),
        ("javascript/HumanEval_53_add", "function add(x, y) { process.stdout.write(x + y + ' '); return x + y; }"),
        (
            "java/HumanEval_53_add",
            "    public class Problem {\n        public static long add(long x, long y) { return x + y; }\n    }",
        ),
        (
            "cpp/HumanEval_53_add",
            "#include <bits/stdc++.h>\nusing namespace std;\ntypedef long long ll;\nll add(ll x, ll y) { return x + y; }",
        ),
        ("cpp/HumanEval_53_add", "auto add(long x, long y) { return x + y; }"),
        ("cpp/HumanEval_53_add", "template <typename T>\nT add(T x, T y) { return x + y; }"),
        ("cpp/HumanEval_53_add", "static long add(long x, long y) { return x + y; }"),
        ("cpp/HumanEval_53_add", "namespace sol {\nlong add(long x, long y) { return x + y; }\n}\nusing sol::add;"),
        (
            "cpp/HumanEval_53_add",
            "long add(long x, long y, long carry) { return x + y + carry; }\nlong add(long x, long y) { return add(x, y, 0); }",
        ),
        ("cpp/HumanEval_53_add", "long\nadd(long x,\n    long y)\n{\n    return x + y;\n}"),
        (
            "cpp/HumanEval_34_unique",
            "#include <vector>\n#include <set>\nstd::vector<long> unique(std::vector<long> &&l) {\n    std::set<long> s(l.begin(), l.end());\n    return {s.begin(), s.end()};\n}",
        ),
        (
            "cpp/HumanEval_34_unique",
            "#include <bits/stdc++.h>\nusing namespace std;\nusing vl = vector<long>;\nvector<int> unique(vector<int> l) { return l; }\nvl unique(vl l) {\n    set<long> s(l.begin(), l.end());\n    return vl(s.begin(), s.end());\n}",
        ),
    ],
)
def test_correct_programs_pass_their_in_language_tests_however_they_are_written(rows, box, task, code):
    row = next(row["extra_info"] for row in rows if row["extra_info"]["task_id"] == task)
    [outcome] = run_tests(code, spec_of(row), box, cache=False)
    assert outcome.passed, outcome


STDIO = {"language": "cpp", "inputs": ["3 4\n", "10 20\n"], "outputs": ["7\n", "30\n"]}
CPP_SUM = "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }"


@pytest.mark.sandbox
@pytest.mark.toolchains
@pytest.mark.parametrize(
    "code, outcome, detail",
    [
        (CPP_SUM, Outcome.PASSED, ""),
        ("#include <iostream>\nint main() { std::cout << 8 << std::endl; }", Outcome.FAILED, "wrong output"),
        ("int main() { int *p = nullptr; return *p; }", Outcome.RUNTIME_ERROR, "killed by signal 11"),
        ("int main() { return 3; }", Outcome.RUNTIME_ERROR, "exited with code 3"),
        ("int main() { volatile long i = 0; for (;;) ++i; }", Outcome.TIME_LIMIT_EXCEEDED, "time limit exceeded"),
        ('#include <cstdio>\nint main() { for (;;) std::puts("spam"); }', Outcome.FAILED, "output longer than"),
        ("int main() { return undeclared; }", Outcome.COMPILATION_ERROR, "solution.cpp:1:21: error:"),
    ],
)
def test_stdio_verdicts_in_cpp(box, code, outcome, detail):
    outcomes = run_tests(
        code, spec_of(STDIO), tight_sandbox(timeout_s=1.0, memory_mb=1024, max_output_bytes=20_000), cache=False
    )
    assert [result.outcome for result in outcomes] == [outcome] * 2
    assert detail in outcomes[0].detail
    assert not outcomes[0].judged_inside


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_stdio_in_java_and_javascript(box):
    java = (
        "import java.util.*;\npublic class Solution {\n    public static void main(String[] args) {\n"
        "        Scanner in = new Scanner(System.in);\n        System.out.println(in.nextLong() + in.nextLong());\n    }\n}"
    )
    js = "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\nconsole.log(a + b);"
    helper_first = (
        "import java.util.*;\nclass Helper { static long add(long a, long b) { return a + b; } }\nclass Main {\n"
        "    public static void main(String[] args) {\n        Scanner in = new Scanner(System.in);\n"
        "        System.out.println(Helper.add(in.nextLong(), in.nextLong()));\n    }\n}"
    )
    in_a_package = "package solution;\n" + java
    for language, code in [("java", java), ("java", helper_first), ("java", in_a_package), ("javascript", js)]:
        outcomes = run_tests(code, spec_of({**STDIO, "language": language}), box, cache=False)
        assert [result.outcome for result in outcomes] == [Outcome.PASSED] * 2, outcomes


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_a_compiler_fed_forever_is_stopped():
    box = tight_sandbox(timeout_s=1.0, memory_mb=1024, compile_timeout_s=2.0)
    outcomes = run_tests("#include </dev/zero>\nint main() {}", spec_of(STDIO), box, cache=False)
    assert outcomes[0].outcome in (Outcome.COMPILATION_ERROR,)
    assert outcomes[0].detail.startswith("compilation")


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_compiled_programs_see_no_host_files_network_or_other_completions(box):
    probe = (
        "#include <cstdio>\n#include <fstream>\n#include <sys/socket.h>\n#include <netinet/in.h>\n"
        "#include <arpa/inet.h>\n#include <unistd.h>\nint main() {\n"
        '    bool host = std::ifstream("/etc/passwd").good() || std::ifstream("/root/.bashrc").good();\n'
        '    bool left = std::ifstream("/tmp/left_behind").good() || std::ifstream("/work/left_behind").good();\n'
        '    std::ofstream("/tmp/left_behind") << 1; std::ofstream("/work/left_behind") << 1;\n'
        "    int s = socket(AF_INET, SOCK_STREAM, 0); sockaddr_in a{}; a.sin_family = AF_INET; a.sin_port = htons(53);\n"
        '    inet_pton(AF_INET, "1.1.1.1", &a.sin_addr);\n'
        "    bool net = s >= 0 && connect(s, (sockaddr*)&a, sizeof a) == 0;\n"
        '    std::printf("%d %d %d\\n", host, left, net);\n}'
    )
    row = {"language": "cpp", "inputs": [""], "outputs": ["0 0 0\n"]}
    for _ in range(2):  # the second completion must not see what the first left behind
        [outcome] = run_tests(probe, spec_of(row), box, cache=False)
        assert outcome.passed, outcome


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_a_fork_bomb_fails_only_itself(box):
    bomb = "#include <unistd.h>\nint main() { for (;;) fork(); }"
    quick = tight_sandbox(timeout_s=1.0, memory_mb=1024)
    [outcome] = run_tests(bomb, spec_of({"language": "cpp", "inputs": [""], "outputs": ["x\n"]}), quick, cache=False)
    assert not outcome.passed
    assert all(result.passed for result in run_tests(CPP_SUM, spec_of(STDIO), box, cache=False))


@pytest.mark.sandbox
def test_a_missing_toolchain_is_one_line_naming_the_package(monkeypatch, box):
    monkeypatch.setattr(languages, "resolved_tool", lambda tool: None)
    with pytest.raises(
        SandboxError, match="java tests need javac, java on this machine: apt-get install -y default-jdk-headless"
    ):
        run_tests("class Problem {}", spec_of({"language": "java", "test": "class Main {}"}), box, cache=False)


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_eval_judges_language_rows_and_counts_verdicts_judged_inside(rows, box):
    problems = evaluation.problems_from_rows(rows)
    completions = {
        problem.task_id: [
            evaluation.Completion(
                fenced(
                    SOLUTIONS[(problem.task_id.split("/")[1], problem.language)][0],
                    languages.language(problem.language).fences[0],
                )
            )
        ]
        for problem in problems
    }
    summary = evaluation.summarize(evaluation.judge_completions(problems, completions, sandbox=box))
    assert summary["pass@1"] == 1.0
    assert summary["num_test_runs_judged_inside"] == summary["num_test_runs"] == len(rows)
    assert problems[0].starter_code.rstrip().endswith("long add(long x, long y) {")


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_the_languages_benchmark_runs_and_prints_its_table(capsys):
    import importlib.util

    # by its file: the bare name ``languages`` is also the sandbox's module, which sandbox_launcher's own import
    # path serves to a test process that imported it first
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "languages.py"
    spec = importlib.util.spec_from_file_location("languages_benchmark", script)
    benchmark = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = benchmark  # its dataclasses look their module up
    spec.loader.exec_module(benchmark)

    assert benchmark.main(["--repeats", "1", "--tests", "2", "--languages", "python", "cpp", "javascript"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2] == "| language | sandboxed s | direct s | sandboxed / direct (range) | vs python sandboxed |"
    assert [line.split(" | ")[0] for line in table[4:]] == ["| python", "| cpp", "| javascript"]


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_rewards_score_judges_a_language_row_with_every_default_reward(rows, tmp_path, capsys):
    row = rows[0]["extra_info"]  # cpp/HumanEval_53_add, as verl's reward manager passes extra_info's columns
    right, wrong = SOLUTIONS[("HumanEval_53_add", "cpp")]
    lines = [{"completion": fenced(code, "cpp"), **row} for code in (right, wrong)]
    path = tmp_path / "scored.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert (
        cli(
            ["rewards", "score", str(path), "--reward", "code=2", "--reward", "code_format=0.5", "--reward", "syntax=1"]
        )
        == 0
    )
    right_row, wrong_row = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert right_row["rewards"] == {"code": 1.0, "code_format": 1.0, "syntax": None}, right_row["reasons"]
    assert right_row["total"] == pytest.approx(2.5)
    assert right_row["reasons"]["syntax"]["kind"] == "not_applicable"
    assert wrong_row["rewards"]["code"] == 0.0 and wrong_row["total"] == pytest.approx(0.5)


def test_multipl_e_loads_the_hub_config_by_its_real_path(monkeypatch):
    import datasets  # installed with verl

    calls = []
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines() if '"language": "cpp"' in line]
    monkeypatch.setattr(
        datasets, "load_dataset", lambda *args, **kwargs: calls.append((args, kwargs)) or [dict(r) for r in records]
    )
    rows = prepare("multipl-e", "test", config="humaneval-cpp")
    assert calls == [(("nuprl/MultiPL-E", "humaneval-cpp"), {"split": "test"})]
    assert [row["extra_info"]["task_id"] for row in rows] == [
        "cpp/HumanEval_53_add",
        "cpp/HumanEval_34_unique",
        "cpp/HumanEval_111_histogram",
        "cpp/mbpp_3_is_not_prime",
    ]


@pytest.mark.sandbox
@pytest.mark.toolchains
def test_in_language_tests_run_without_fork_and_stdio_programs_with_it(rows, box):
    # a forked copy of the tests' process could try answers against them and report back: refused there
    probe = (
        "#include <unistd.h>\n#include <sys/wait.h>\nlong add(long x, long y) {\n    pid_t child = fork();\n"
        "    if (child == 0) _exit(0);\n    if (child > 0) { waitpid(child, 0, 0); return 0; }\n    return x + y;\n}"
    )
    row = next(row["extra_info"] for row in rows if row["extra_info"]["task_id"] == "cpp/HumanEval_53_add")
    assert run_tests(probe, spec_of(row), box, cache=False)[0].passed  # fork failed, so it answered x + y
    forks = (
        "#include <unistd.h>\n#include <cstdio>\n#include <sys/wait.h>\nint main() {\n    pid_t child = fork();\n"
        '    if (child == 0) _exit(0);\n    waitpid(child, 0, 0);\n    std::puts(child > 0 ? "forked" : "refused");\n}'
    )
    stdio_row = {"language": "cpp", "inputs": [""], "outputs": ["forked\n"]}
    assert run_tests(forks, spec_of(stdio_row), box, cache=False)[0].passed


def test_no_precompiled_header_where_the_sandbox_would_hide_it(monkeypatch):
    from diffugrpo_plugin.rewards import harnesses

    monkeypatch.setenv("DIFFUGRPO_HOME", "/tmp/diffugrpo-home-test")  # the sandbox mounts a fresh /tmp
    harnesses.precompiled_stdcpp.cache_clear()
    try:
        assert harnesses.precompiled_stdcpp() is None
    finally:
        harnesses.precompiled_stdcpp.cache_clear()
