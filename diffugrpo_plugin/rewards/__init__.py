"""Rewards and the judge: which reward functions run, with which options and weights (:mod:`.spec`), how their
values combine (:mod:`.aggregation`), running them in isolation (:mod:`.scoring`), learned weights, the code tests
and their verdicts (:mod:`.code_tests`, :mod:`.judging`), parsing untrusted source (:mod:`.verdicts`). Imports no
torch.
"""
