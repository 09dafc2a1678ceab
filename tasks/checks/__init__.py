"""What stops bad work before it costs anything: the data gates (gates), the reserved-content audit
(reserved), the checks before a run starts or resumes (preflight), and the injected crashes that prove
resume is safe (faults)."""
