"""Dataset-level contamination tests: one p-value for "was this benchmark, as a set, trained on?".

Beside dataset inference (`leaklab.dataset_inference`, which combines per-sample scores), these read the
model directly: `sharded_likelihood` (Oren et al., 2023) asks whether the benchmark's canonical order is
more likely than random orders of the same examples.
"""
