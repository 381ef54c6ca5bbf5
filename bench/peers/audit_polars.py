"""The same fiber audit as audit_pandas.py, written with polars (lazy scan, group_by, qcut)."""

import argparse
from pathlib import Path

import polars as pl

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--id")
p.add_argument("--evidence", required=True)
p.add_argument("--claim-column", required=True)
p.add_argument("--claim-gt", type=float)
p.add_argument("--quantile", type=int)
p.add_argument("--out", required=True)
a = p.parse_args()
ev = a.evidence.split(",")
lf = pl.scan_parquet(a.file) if a.file.endswith(".parquet") else pl.scan_csv(a.file, infer_schema_length=10000)
lf = lf.drop_nulls([*ev, a.claim_column])
claim = pl.col(a.claim_column) > a.claim_gt if a.claim_gt is not None else pl.col(a.claim_column) == 1
lf = lf.with_columns(claim=claim)
keys = ev
if a.quantile:
    lf = lf.with_columns(bin=pl.col(ev[0]).qcut(a.quantile, allow_duplicates=True).to_physical())
    keys = ["bin"]
df = lf.select([a.id or ev[0], *keys, "claim"]).collect()
fibers = (df.group_by(keys).agg(n=pl.len(), n_true=pl.col("claim").sum()).sort(keys)
          .with_columns(status=pl.when(pl.col("n_true") == pl.col("n")).then(pl.lit("certified_true"))
                        .when(pl.col("n_true") == 0).then(pl.lit("certified_false")).otherwise(pl.lit("ambiguous")),
                        fiber_key=pl.int_range(pl.len())))
cands = df.join(fibers.select([*keys, "fiber_key", "status"]), on=keys)
out = Path(a.out)
out.mkdir(parents=True, exist_ok=True)
fibers.write_parquet(out / "fibers.parquet")
cands.write_parquet(out / "candidates.parquet")
counts = fibers.group_by("status").agg(pl.col("n").sum()).sort("status")
print(f"candidates {df.height}, fibers {fibers.height}, mixed {(fibers['status'] == 'ambiguous').sum()}, "
      + ", ".join(f"{s} {n}" for s, n in counts.iter_rows()))
