"""The sandbox that runs untrusted Python. The host side: :mod:`.host` (the sandbox, launching its jobs; its threat
model is the module docstring), :mod:`.config` (settings and errors), :mod:`.jobs` (a job, its result, parsing the
untrusted reports), :mod:`.probe` (what the interpreter and CPU offer), :mod:`.limits` (seccomp, cgroups, the host's
protections). The modules that run inside it (``sandbox_launcher``, ``sandbox_wire``, ``sandbox_program``, ``sandbox_judge``). Those keep
their ``sandbox_`` prefix because inside the sandbox they are top-level modules, beside the program's own.
Imports no torch.
"""
