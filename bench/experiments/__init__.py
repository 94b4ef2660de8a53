"""The experiments of ``python -m bench``, one module each."""
