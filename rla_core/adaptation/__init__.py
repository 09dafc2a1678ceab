"""Environment adaptation: the versioned task store (docs/design.md, "The loop", The task store), the
acceptance rule for rewritten tasks, critic feedback from judged failures, and the rewriters that propose
them (docs/design.md, "The formulas", Environment adaptation).

Import the submodules directly (`rla_core.adaptation.store`, `.acceptance`, `.critic`, `.rewriters`);
this package imports nothing on its own.
"""
