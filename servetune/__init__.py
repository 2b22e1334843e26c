"""servetune: resolve, launch and tune SGLang serving configurations.

Importing this package is cheap on purpose: heavy modules (optuna, pynvml, sglang, torch)
are imported inside the functions that need them.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
