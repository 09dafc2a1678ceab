"""`rla bench`: measurements of this project's speed against its peers and the machine's limit.

Each part (engine, step, iteration, scaling) prints a table and writes a JSON file; everything a ratio
needs is measured in the same process and run, so that the ratio holds on a noisy shared machine.
Nothing here is a test: the numbers are reported, not asserted (docs/performance.md).
"""
