"""Nanoseconds per Router.resolve of a cached path: one a route serves, one none does, a client's reply path
(the best of 15 runs of 20 x 1,000 look-ups; the loop's own cost included, printed apart).

    PYTHONPATH=<tree> python bench/profiling/router_lookup.py
"""

from __future__ import annotations

import timeit

from actors.transport import Router


def main() -> None:
    """Print ns per look-up for each kind of path."""
    router = Router()
    router.replace({"/user/a": "addr-a", "/user/b": "addr-b", "/temp/c1": "addr-c"}, 1)
    kinds = {"known": [f"/user/a/{i}" for i in range(1000)], "unknown": [f"/user/nobody/{i}" for i in range(1000)],
             "reply": [f"/temp/c1/ask-{i}" for i in range(1000)]}
    for paths in kinds.values():
        for path in paths:
            router.resolve(path)
    resolve = router.resolve
    for kind, paths in kinds.items():
        t = min(timeit.repeat(lambda paths=paths: [resolve(p) for p in paths], number=20, repeat=15))
        print(f"{kind:8s} {t / (20 * len(paths)) * 1e9:6.1f} ns/look-up")
    loop = min(timeit.repeat(lambda: [len(p) for p in kinds["known"]], number=20, repeat=15))
    print(f"(loop   {loop / (20 * 1000) * 1e9:6.1f} ns)")


if __name__ == "__main__":
    main()
