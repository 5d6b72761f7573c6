def shortest_path(*a, **k):
    raise RuntimeError("scipy stub")
