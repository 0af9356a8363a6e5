"""leaklab: controlled data-leakage experiments on code LLMs.

The flow, one direction: recipe -> data -> training -> signals -> detectors -> metrics -> report.
"""

__version__ = "0.1.0"


def load_run(path):
    """A run's, a sweep's or an mia folder's results as pandas DataFrames (`leaklab.load.load_run`;
    docs/results-in-python.md). Imported on call, so `import leaklab` stays light."""
    from leaklab.load import load_run as load

    return load(path)
