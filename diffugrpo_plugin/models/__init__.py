"""Checkpoints as diffusion LMs: loading (:mod:`.dlm`), model families and their detection, weight fit, the fused
head's autograd kernels (:mod:`.kernels`), LoRA, our native Dream/LLaDA, the memory-lean MLP, and the tiny models
and tokenizer built in code.
"""
