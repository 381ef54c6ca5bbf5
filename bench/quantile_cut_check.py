"""Which quantile cut is right where DuckDB's and pandas' differ (the bench's off-by-one at 1e7)?

For each interior cut of ``quantile:K`` on the synthetic column ``x``: DuckDB's ``quantile_cont`` (which
dcaudit's selected cut points must equal: checked first) and pandas' ``Series.quantile`` (what ``qcut``
uses; polars' ``qcut`` breaks bin the same candidates as pandas in the suite's 1e7 row), against the exact
value — linear interpolation between the order statistics at floor/ceil of ``(n - 1) q`` computed
in rational arithmetic with ``q = i / K`` exactly. A candidate whose value lies between two
libraries' cuts is binned differently by them; the exact cut decides which bin is right.

    .venv/bin/python bench/quantile_cut_check.py --size 1e7
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from data import dataset  # noqa: E402


def main() -> None:
    import duckdb
    import numpy as np
    import pandas as pd

    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1e7")
    parser.add_argument("--bins", type=int, default=20)
    args = parser.parse_args()
    k = args.bins
    path = dataset(int(float(args.size)))
    con = duckdb.connect()
    x = con.execute(f"SELECT CAST(x AS DOUBLE) AS x FROM read_parquet('{path}') WHERE r IS NOT NULL "
                    "AND isfinite(x)").fetchnumpy()["x"]
    n = len(x)
    probs = [i / k for i in range(1, k)]
    duck = con.execute(f"SELECT quantile_cont(CAST(x AS DOUBLE), [{', '.join(map(repr, probs))}]) "
                       f"FROM read_parquet('{path}')").fetchall()[0][0]
    pand = pd.Series(x).quantile(probs).to_numpy()
    # dcaudit's cut points (selection: histogram + exact passes) must be quantile_cont's, bit for bit
    from dcaudit.audits.evidence import quantile_cuts

    con.execute(f"CREATE VIEW cand AS SELECT * FROM read_parquet('{path}')")
    con.execute("SET disabled_optimizers = 'statistics_propagation'")  # as the audit runs (x is a float)
    selected = quantile_cuts(con, "cand", ["x"], k, "r IS NOT NULL")["x"]
    same = selected == sorted({float(v) for v in duck})
    print(f"dcaudit's selected cut points {'are' if same else 'are NOT'} DuckDB's quantile_cont ones "
          f"({len(selected)} distinct cuts)")
    ranks = sorted({r for i in range(1, k) for r in ((n - 1) * i // k, -(-(n - 1) * i // k))})
    part = np.partition(x, ranks)
    disagreements = 0
    for i, (d, p) in enumerate(zip(duck, pand, strict=True), start=1):
        rn = Fraction((n - 1) * i, k)
        f = rn.numerator // rn.denominator
        lo, hi = Fraction(float(part[f])), Fraction(float(part[-(-rn.numerator // rn.denominator)]))
        exact = lo + (rn - f) * (hi - lo)
        a, b = min(d, p), max(d, p)
        between = x[(x >= a) & (x <= b)] if d != p else x[:0]
        for v in np.unique(between):
            fv = Fraction(float(v))
            right = "lower" if fv <= exact else "upper"
            duck_bin = "lower" if v <= d else "upper"
            pandas_bin = "lower" if v <= p else "upper"
            count = int((x == v).sum())
            disagreements += duck_bin != pandas_bin
            print(f"cut {i}/{k}: duckdb {d!r}  pandas {p!r}  exact {float(exact)!r} (exact - value = "
                  f"{float(exact - fv):.3g}); value {v!r} x{count}: duckdb puts it {duck_bin}, pandas {pandas_bin}, "
                  f"right: {right}")
    print(f"n = {n:,}; {sum(d != p for d, p in zip(duck, pand, strict=True))} of {k - 1} cuts differ in the last "
          f"bits; {disagreements} value(s) binned differently")
    if not same:
        raise SystemExit("dcaudit's cut points differ from quantile_cont's")


if __name__ == "__main__":
    main()
