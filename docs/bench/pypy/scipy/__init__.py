"""Stub: PyPy has no scipy wheel; the transit-stub matrix comes from a CPython-made .npy (TS_CACHE)."""
