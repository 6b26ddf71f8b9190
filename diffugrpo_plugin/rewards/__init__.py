"""Rewards and the judge: which reward functions run, with which options and weights (:mod:`.spec`), how their
values combine (:mod:`.aggregation`), running them in isolation (:mod:`.scoring`), learned weights, a row's tests
(:mod:`.code_tests`), run against a program and judged (:mod:`.test_runs`, :mod:`.judging`), the task's own Python
read without running it (:mod:`.task_code`), the other languages' harnesses (:mod:`.harnesses`). Imports no torch.
"""
