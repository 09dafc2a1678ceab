"""Environment adaptation (DESIGN §2.1, §2.2 steps 4–5): the versioned task store, the acceptance
rule for rewritten tasks, critic feedback from judged failures, and the rewriters that propose them.

Import the submodules directly (`rla_core.adaptation.store`, `.acceptance`, `.critic`, `.rewriters`);
this package imports nothing on its own.
"""
