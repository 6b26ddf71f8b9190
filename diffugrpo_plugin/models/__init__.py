"""Checkpoints as diffusion LMs: the wrapper and loading (:mod:`.dlm`), how a checkpoint is built (:mod:`.load_plan`),
its tokenizer without remote code (:mod:`.tokenizer_files`), model families and their detection, weight fit, the fused
head's autograd kernels (:mod:`.kernels`), LoRA, our native Dream/LLaDA, the memory-lean MLP, and the tiny models
and tokenizer built in code.
"""
