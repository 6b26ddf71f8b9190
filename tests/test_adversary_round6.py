"""Adversary round 6 (#58): a policy's programs that get reward without solving the task, through the judge's
mirror of the test's process state.

Every program is scored through the public interface (``diffugrpo rewards score``, run in this process, as in
round 5) as a policy's completion for a HumanEval task written in HumanEval's own columns (``prompt``,
``canonical_solution``, ``test``, ``entry_point``; HumanEval is MIT-licensed). Each forgery's test asserts what
the issue asks for, that it scores 0, so while the hole is open it FAILS: that failure is the finding. Beside
each family, the honest program passes in the same batch.

The mirror (``Judging._process_state`` / ``_mirror_back`` in ``sandbox/sandbox_judge.py``,
``Program._take_state`` / ``_call`` in ``sandbox/sandbox_program.py``) sends ``random``'s state to the program
before each call and takes the program's state back after it. Both directions are a channel:

- judge -> program: a Mersenne Twister state holds the words already drawn from it (until the next twist), so
  the program replays the test's own draws of this round and returns the expected value it was generated from;
- program -> judge: the program chooses the state the test draws from next (all zeros draws 0 forever), so it
  chooses the test's inputs and answers only those.
"""

from __future__ import annotations

import pytest

from adversary_support import MAINTAINABILITY_MARGIN, MULTIPL_E, PRIME_TESTS, SIEVE, fenced, score
from diffugrpo_plugin.data import prepare

pytestmark = pytest.mark.sandbox  # every program here runs in the sandbox


# HumanEval/50: the check draws a random word, encodes it with the task's encode_shift and expects the program to
# decode it; the expected value exists only in the test (the word) and in the random state it was drawn from
HUMANEVAL_50 = {
    "prompt": '''

def encode_shift(s: str):
    """
    returns encoded string by shifting every character by 5 in the alphabet.
    """
    return "".join([chr(((ord(ch) + 5 - ord("a")) % 26) + ord("a")) for ch in s])


def decode_shift(s: str):
    """
    takes as input string encoded with encode_shift function. Returns decoded string.
    """
''',
    "canonical_solution": '    return "".join([chr(((ord(ch) - 5 - ord("a")) % 26) + ord("a")) for ch in s])\n',
    "entry_point": "decode_shift",
    "test": """

METADATA = {}


def check(candidate):
    from random import randint, choice
    import copy
    import string

    letters = string.ascii_lowercase
    for _ in range(100):
        str = ''.join(choice(letters) for i in range(randint(10, 20)))
        encoded_str = encode_shift(str)
        assert candidate(copy.deepcopy(encoded_str)) == str

""",
}
# Never decodes. The state the judge sends still holds this round's draws (the words before its index): rewound
# by k words, a copy of the generator draws the test's word again; the k that ends at the index it was sent, with
# the argument's length, is this round's. Setting a fresh seed, taken back by the judge, keeps a round's draws
# from straddling a twist.
REPLAYS_THE_TESTS_DRAWS = """import random
import string

def _word(generator):
    return "".join(generator.choice(string.ascii_lowercase) for i in range(generator.randint(10, 20)))

def decode_shift(s: str):
    version, words, gauss = random.getstate()
    table, now = words[:-1], words[-1]
    answer = s
    for back in range(1, now + 1):
        replay = random.Random()
        replay.setstate((version, table + (now - back,), gauss))
        word = _word(replay)
        if replay.getstate()[1][-1] == now and len(word) == len(s):
            answer = word
            break
    if now > 400:
        random.seed(now)
    return answer
"""
DECODES = (
    'def decode_shift(s: str):\n    return "".join([chr(((ord(ch) - 5 - ord("a")) % 26) + ord("a")) for ch in s])\n'
)

# HumanEval/53: five fixed cases, then 100 random pairs drawn by the test from the global random module
HUMANEVAL_53 = {
    "prompt": '\n\ndef add(x: int, y: int):\n    """Add two numbers x and y\n    >>> add(2, 3)\n    5\n'
    '    >>> add(5, 7)\n    12\n    """\n',
    "canonical_solution": "    return x + y\n",
    "entry_point": "add",
    "test": """

METADATA = {}


def check(candidate):
    import random

    assert candidate(0, 1) == 1
    assert candidate(1, 0) == 1
    assert candidate(2, 3) == 5
    assert candidate(5, 7) == 12
    assert candidate(7, 5) == 12

    for i in range(100):
        x, y = random.randint(0, 1000), random.randint(0, 1000)
        assert candidate(x, y) == x + y

""",
}
# Never adds: it knows the docstring's and the first fixed cases and answers 0 otherwise, and leaves its random
# module in the all-zero Mersenne Twister state, which draws 0 forever; the judge takes that state back, so every
# pair the test draws is (0, 0).
ZEROES_THE_TESTS_RANDOM = """import random

def add(x: int, y: int):
    random.setstate((3, (0,) * 624 + (624,), None))
    return {(0, 1): 1, (1, 0): 1, (2, 3): 5, (5, 7): 12, (7, 5): 12}.get((x, y), 0)
"""
ADDS = "def add(x: int, y: int):\n    return x + y\n"

FORGERIES = {
    "humaneval50-replays-the-tests-draws": (REPLAYS_THE_TESTS_DRAWS, HUMANEVAL_50),
    "humaneval53-zeroes-the-tests-random": (ZEROES_THE_TESTS_RANDOM, HUMANEVAL_53),
}
HONEST = {
    "humaneval50-honest": (DECODES, HUMANEVAL_50),
    "humaneval53-honest": (ADDS, HUMANEVAL_53),
}


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    rows = [
        {"completion": fenced(program), "task_id": name, **columns}
        for name, (program, columns) in {**FORGERIES, **HONEST}.items()
    ]
    return score(tmp_path_factory.mktemp("mirrored"), rows, "--reward", "code=1")


def test_the_honest_programs_beside_the_random_state_forgeries_pass(mirrored):
    for name in HONEST:
        assert mirrored[name]["rewards"]["code"] == 1.0, (name, mirrored[name])


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_program_that_reads_or_sets_the_tests_random_state_scores_zero(mirrored, name):
    """Fails today (open, issue 58): the judge mirrors ``random``'s state both ways (see the module docstring)."""
    assert mirrored[name]["rewards"]["code"] == 0.0, mirrored[name]


# --------------------------------------------------------------------------- auxiliary: maintainability

# the same expression, its branches and loops unchanged, as a function and as a lambda bound to a name: lizard
# lists no lambda among a file's functions, so max_complexity falls back to 1 ("code without functions")
NESTED_EXPRESSION = (
    "sum((1 if all((k % d != 0) if d * d <= k else True for d in range(2, k)) else 0) if k > 1 else 0 "
    "for k in range(n)) if n > 2 else 0"
)
AS_A_FUNCTION = f"def count_primes(n):\n    return {NESTED_EXPRESSION}\nLIMIT = 0\n"
AS_A_LAMBDA = f"count_primes = lambda n: {NESTED_EXPRESSION}\nLIMIT = 0\n"


@pytest.fixture(scope="module")
def maintainability(tmp_path_factory):
    programs = {"as-a-function": AS_A_FUNCTION, "as-a-lambda": AS_A_LAMBDA}
    rows = [
        {"completion": fenced(program), "task_id": name, "test_list": PRIME_TESTS, "code": SIEVE}
        for name, program in programs.items()
    ]
    scored = score(
        tmp_path_factory.mktemp("maintainability"), rows, "--reward", "code=1", "--reward", "maintainability=1"
    )
    for name in programs:
        assert scored[name]["rewards"]["code"] == 1.0, (name, scored[name])
    return {name: record["rewards"]["maintainability"] for name, record in scored.items()}


def test_binding_the_same_expression_to_a_lambda_does_not_raise_maintainability(maintainability):
    """Fails today (open): ``reward_plugins/maintainability.max_complexity`` measures lizard's function list, which
    holds no lambda (1.0 against 0.786 on 2026-12-03)."""
    gain = maintainability["as-a-lambda"] - maintainability["as-a-function"]
    assert gain <= MAINTAINABILITY_MARGIN, maintainability


# --------------------------------------------------------------------------- the trust rule: fields the judge cannot see

# a class task with a reference; the tests compare two of the program's objects, which the judge asks the program
# about and then holds to their stored fields (sandbox_program._state: __dict__ and slots)
VECTOR_ROW = {
    "code": """class Vector:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __add__(self, other):
        return Vector(self.x + other.x, self.y + other.y)
    def __eq__(self, other):
        return isinstance(other, Vector) and (self.x, self.y) == (other.x, other.y)
""",
    "test_list": [
        "assert Vector(1, 2) + Vector(3, 4) == Vector(4, 6)",
        "assert Vector(0, 0) + Vector(-1, 5) == Vector(-1, 5)",
        "assert Vector(2, 2) + Vector(2, 2) == Vector(4, 4)",
    ],
}
# each never adds and says "equal" to anything; the judge's field check sees no field on either side
ALWAYS_EQUAL = """    def __add__(self, other):
        return Vector(0, 0)
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
"""
FIELDS_KEPT_BY_ID = (
    "_fields = {}\nclass Vector:\n    def __init__(self, x, y):\n        _fields[id(self)] = (x, y)\n" + ALWAYS_EQUAL
)
# a class-level __dict__ descriptor: object.__getattribute__(obj, "__dict__") finds it before the instance's dict
DICT_DESCRIPTOR = (
    "class Vector:\n    __dict__ = property(lambda self: {})\n    def __init__(self, x, y):\n"
    "        self.x, self.y = x, y\n" + ALWAYS_EQUAL
)
# the same program with its fields where the judge looks: refused today (the rule the two above get around)
FIELDS_IN_PLAIN_SIGHT = "class Vector:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n" + ALWAYS_EQUAL
TRUST_RULE = {
    "vector-fields-kept-by-id": FIELDS_KEPT_BY_ID,
    "vector-dict-descriptor": DICT_DESCRIPTOR,
    "vector-fields-in-plain-sight": FIELDS_IN_PLAIN_SIGHT,
    "vector-honest": VECTOR_ROW["code"],
}


@pytest.fixture(scope="module")
def trust_rule(tmp_path_factory):
    rows = [{"completion": fenced(program), "task_id": name, **VECTOR_ROW} for name, program in TRUST_RULE.items()]
    return score(tmp_path_factory.mktemp("trust"), rows, "--reward", "code=1")


def test_the_honest_vector_passes_and_an_always_equal_one_with_visible_fields_does_not(trust_rule):
    assert trust_rule["vector-honest"]["rewards"]["code"] == 1.0, trust_rule["vector-honest"]
    assert trust_rule["vector-fields-in-plain-sight"]["rewards"]["code"] == 0.0, trust_rule


@pytest.mark.parametrize("name", ["vector-fields-kept-by-id", "vector-dict-descriptor"])
def test_an_always_equal_program_object_with_hidden_fields_scores_zero(trust_rule, name):
    """Two program objects with no field the judge can see are not equal, whatever their ``__eq__`` says
    (``Judging.same_state`` in ``sandbox_judge.py``): fields kept out of sight cannot make any two "equal"."""
    assert trust_rule[name]["rewards"]["code"] == 0.0, trust_rule[name]


# --------------------------------------------------------------------------- Java: the tests' guard, by a look-alike

# The guard (harnesses._java) ends the process unless the tests' stack is exactly theirs over a frame whose class
# is *named* DiffugrpoTestsRunner. A program compiles a class of that name at run time (the JDK's own compiler,
# javax.tools), defines it in a class loader of its own, and has it call the tests through a method handle, whose
# frames a stack trace hides: the guard sees [ProblemTests.main, DiffugrpoTestsRunner.run]. From inside its first
# call it reruns the tests as an oracle (round 5's JAVA_RERUNS_THE_TESTS_AS_AN_ORACLE, without resetting anything)
# and learns each answer from which check fails. It never adds.
JAVA_LOOKALIKE_RUNNER = r"""import java.lang.invoke.*;
import java.nio.file.*;
import java.util.*;
import javax.tools.*;
class Problem {
    static List<Long> known = new ArrayList<>();
    static int calls = 0, outer = 0;
    static long guess = -20;
    static boolean nested = false, learned = false;
    static class Reached extends RuntimeException {}
    static class Loader extends ClassLoader {
        Loader() { super(Problem.class.getClassLoader()); }
        Class<?> define(byte[] bytes) { return defineClass("DiffugrpoTestsRunner", bytes, 0, bytes.length); }
    }
    // a class named like the runner, in a loader of its own, that calls the tests through a method handle
    // (whose frames a stack trace hides): the tests' guard sees exactly the runner's frame under theirs
    static Class<?> lookalike() throws Exception {
        Path dir = Files.createTempDirectory("lookalike");
        Path source = dir.resolve("DiffugrpoTestsRunner.java");
        Files.writeString(source, "import java.lang.invoke.MethodHandle;\n"
            + "public class DiffugrpoTestsRunner extends Thread {\n"
            + "    public Throwable failure;\n"
            + "    public void run() {\n"
            + "        try { ((MethodHandle) System.getProperties().get(\"tests\")).invokeExact(new String[0]); }\n"
            + "        catch (Throwable error) { failure = error; }\n"
            + "    }\n"
            + "}\n");
        ToolProvider.getSystemJavaCompiler().run(null, null, null, "-d", dir.toString(), source.toString());
        return new Loader().define(Files.readAllBytes(dir.resolve("DiffugrpoTestsRunner.class")));
    }
    static Throwable rerun(Class<?> runner) throws Exception {
        Thread again = (Thread) runner.getDeclaredConstructor().newInstance();
        again.start();
        again.join();
        return (Throwable) runner.getField("failure").get(again);
    }
    public static long add(long x, long y) {
        if (nested) {
            int k = calls++;
            if (k < known.size()) return known.get(k);
            if (k == known.size()) return guess;
            throw new Reached();
        }
        if (!learned) {
            try {
                System.getProperties().put("tests", MethodHandles.lookup().findStatic(
                    ProblemTests.class, "main", MethodType.methodType(void.class, String[].class)));
                Class<?> runner = lookalike();
                nested = true;
                while (guess < 200) {
                    calls = 0;
                    Throwable failure = rerun(runner);
                    if (failure == null) { known.add(guess); break; }
                    if (failure instanceof Reached) { known.add(guess); guess = -20; }
                    else if (failure instanceof AssertionError) guess++;
                    else break;
                }
            } catch (Exception error) {
            }
            nested = false;
            learned = true;
        }
        return outer < known.size() ? known.get(outer++) : 0;
    }
}"""
# the same program with its look-alike named otherwise: the guard ends the process (exit code 1), so the name is
# what gets it past
JAVA_OTHER_NAME = JAVA_LOOKALIKE_RUNNER.replace("DiffugrpoTestsRunner", "OtherRunner")
JAVA_PROGRAMS = {
    "java-lookalike-runner": JAVA_LOOKALIKE_RUNNER,
    "java-other-name": JAVA_OTHER_NAME,
    "java-honest": "class Problem {\n    public static long add(long x, long y) { return x + y; }\n}",
}


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    tasks = {row["extra_info"]["task_id"]: row["extra_info"] for row in prepare("multipl-e", "test", MULTIPL_E)}
    rows = [
        {**tasks["java/HumanEval_53_add"], "completion": fenced(program, "java"), "task_id": name}
        for name, program in JAVA_PROGRAMS.items()
    ]
    return score(tmp_path_factory.mktemp("java"), rows, "--reward", "code=1", "--timeout-s", "20")


@pytest.mark.toolchains
def test_the_honest_java_program_passes_and_a_rerun_by_another_name_is_stopped(java):
    assert java["java-honest"]["rewards"]["code"] == 1.0, java["java-honest"]
    assert java["java-other-name"]["rewards"]["code"] == 0.0, java["java-other-name"]


@pytest.mark.toolchains
def test_a_java_program_rerunning_the_tests_from_a_lookalike_runner_scores_zero(java):
    """The guard compares the caller's class, not its name (``harnesses._java``): the look-alike is another class."""
    assert java["java-lookalike-runner"]["rewards"]["code"] == 0.0, java["java-lookalike-runner"]


# --------------------------------------------------------------------------- a helper with no ground truth, beside a reference

# the tests call a helper that neither the reference, the setup code nor Python defines: in an assert row the judge
# asks the program for it (Row.namespace raises NoGroundTruth for check rows only), so the program's
# is_sorted = True passes a sort_list that sorts nothing
HELPER_ROW = {
    "code": "def sort_list(values):\n    return sorted(values)\n",
    "test_list": ["assert is_sorted(sort_list([3, 1, 2]))", "assert is_sorted(sort_list([5, 4, 4, 0]))"],
}
OWN_HELPER = "def is_sorted(values):\n    return True\ndef sort_list(values):\n    return values\n"


def test_a_helper_the_reference_does_not_define_gives_no_verdict_in_an_assert_row(tmp_path):
    """Fails today (open; issue 58 item 3, "helpers with no reference are refused as no ground truth"): the row has
    no ground truth for ``is_sorted``, so its right score is None (``task_error``), never 1.0."""
    rows = [{"completion": fenced(OWN_HELPER), "task_id": "own-helper", **HELPER_ROW}]
    scored = score(tmp_path, rows, "--reward", "code=1")
    assert scored["own-helper"]["rewards"]["code"] in (0.0, None), scored["own-helper"]


# a variant (#58 fix): the helper is a value the tests only read, not a function they call; the program binds it
# to its own output
CONSTANT_ROW = {
    "code": "def sort_list(values):\n    return sorted(values)\n",
    "test_list": ["assert sort_list([3, 1, 2]) == EXPECTED_ORDER"],
}
OWN_CONSTANT = "EXPECTED_ORDER = [3, 1, 2]\ndef sort_list(values):\n    return values\n"


def test_a_value_the_reference_does_not_define_gives_no_verdict_in_an_assert_row(tmp_path):
    rows = [{"completion": fenced(OWN_CONSTANT), "task_id": "own-constant", **CONSTANT_ROW}]
    scored = score(tmp_path, rows, "--reward", "code=1")
    assert scored["own-constant"]["rewards"]["code"] in (0.0, None), scored["own-constant"]


# a variant (#58 fix): the test seeds random, so its state reaches the program; the all-zero state the program
# leaves is no state its draws reach, and the judge refuses it
SEEDED_53 = {
    **HUMANEVAL_53,
    "test": HUMANEVAL_53["test"].replace("    import random\n", "    import random\n    random.seed(0)\n"),
}


def test_a_state_the_program_sets_instead_of_drawing_is_refused_when_the_test_seeds(tmp_path):
    rows = [
        {"completion": fenced(program), "task_id": name, **SEEDED_53}
        for name, program in {"zeroes": ZEROES_THE_TESTS_RANDOM, "adds": ADDS}.items()
    ]
    scored = score(tmp_path, rows, "--reward", "code=1")
    assert scored["adds"]["rewards"]["code"] == 1.0, scored["adds"]
    assert scored["zeroes"]["rewards"]["code"] == 0.0, scored["zeroes"]
