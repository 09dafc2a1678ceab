"""The coding setting: policy-written Python programs run against stdin/stdout tests in a sandbox."""
