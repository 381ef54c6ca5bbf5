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


def check(size: int, k: int = 20, *, verbose: bool = True) -> dict:
    """The comparison as numbers: dcaudit's cuts == quantile_cont's, and per library the candidates it bins
    on the wrong side of an exact cut (among the values lying between two libraries' cuts)."""
    import duckdb
    import numpy as np
    import pandas as pd

    path = dataset(size)
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
    if verbose:
        print(f"dcaudit's selected cut points {'are' if same else 'are NOT'} DuckDB's quantile_cont ones "
              f"({len(selected)} distinct cuts)")
    ranks = sorted({r for i in range(1, k) for r in ((n - 1) * i // k, -(-(n - 1) * i // k))})
    part = np.partition(x, ranks)
    disagreements = duck_wrong = pandas_wrong = 0
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
            duck_wrong += count * (duck_bin != right)
            pandas_wrong += count * (pandas_bin != right)
            if verbose:
                print(f"cut {i}/{k}: duckdb {d!r}  pandas {p!r}  exact {float(exact)!r} (exact - value = "
                      f"{float(exact - fv):.3g}); value {v!r} x{count}: duckdb puts it {duck_bin}, pandas "
                      f"{pandas_bin}, right: {right}")
    out = {"cuts_equal_quantile_cont": bool(same),
           "cuts_differing_from_pandas": int(sum(d != p for d, p in zip(duck, pand, strict=True))),
           "values_binned_differently": int(disagreements), "candidates_dcaudit_bins_wrong": int(duck_wrong),
           "candidates_pandas_bins_wrong": int(pandas_wrong)}
    if verbose:
        print(f"n = {n:,}; {out['cuts_differing_from_pandas']} of {k - 1} cuts differ in the last bits; "
              f"{disagreements} value(s) binned differently; candidates on the wrong side of an exact cut: "
              f"dcaudit {duck_wrong}, pandas {pandas_wrong}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1e7")
    parser.add_argument("--bins", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="print only the verdict, as one JSON line")
    args = parser.parse_args()
    out = check(int(float(args.size)), args.bins, verbose=not args.json)
    if args.json:
        import json

        print(json.dumps(out))
        return
    if not out["cuts_equal_quantile_cont"]:
        raise SystemExit("dcaudit's cut points differ from quantile_cont's")
    if out["candidates_dcaudit_bins_wrong"]:
        raise SystemExit("dcaudit bins candidates on the wrong side of an exact cut")


if __name__ == "__main__":
    main()
