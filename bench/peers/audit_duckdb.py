"""The same fiber audit as audit_pandas.py, written as a short DuckDB script: what dcaudit's engine costs with
nothing around it (no input contract, no findings, no manifest or catalog), so the floor of a whole command
on DuckDB. It ends with os._exit, as the dcaudit console script does, so interpreter teardown is not timed."""

import argparse
import os
import sys
from pathlib import Path

import duckdb

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


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


reader = f"read_parquet('{a.file}')" if a.file.endswith(".parquet") else f"read_csv('{a.file}')"
claim = f"{q(a.claim_column)} > {a.claim_gt}" if a.claim_gt is not None else f"{q(a.claim_column)} = 1"
keys = [q(c) for c in ev]
con = duckdb.connect()
complete = " AND ".join(f"{k} IS NOT NULL" for k in [*keys, q(a.claim_column)])
con.execute(f"CREATE TEMP TABLE c AS SELECT {q(a.id) if a.id else 'row_number() OVER ()'} AS candidate_id, "
            f"{', '.join(keys)}, {claim} AS claim FROM {reader} WHERE {complete}")
if a.quantile:
    probs = ", ".join(str(i / a.quantile) for i in range(1, a.quantile))
    con.execute(f"CREATE TEMP TABLE cuts AS SELECT unnest(list_distinct(quantile_cont({keys[0]}, [{probs}]))) AS cut "
                "FROM c")
    con.execute(f"CREATE OR REPLACE TEMP TABLE c AS SELECT candidate_id, (SELECT count(*) FROM cuts WHERE cut < "
                f"{keys[0]}) AS bin, claim FROM c")
    keys = ["bin"]
con.execute(f"""CREATE TEMP TABLE f AS SELECT {', '.join(keys)}, count(*) AS n, count_if(claim) AS n_true,
                CASE WHEN count_if(claim) = count(*) THEN 'certified_true' WHEN count_if(claim) = 0
                     THEN 'certified_false' ELSE 'ambiguous' END AS status,
                row_number() OVER (ORDER BY {', '.join(keys)}) - 1 AS fiber_key
                FROM c GROUP BY {", ".join(keys)}""")
out = Path(a.out)
out.mkdir(parents=True, exist_ok=True)
con.execute(f"COPY f TO '{out / 'fibers.parquet'}' (FORMAT parquet)")
con.execute(f"COPY (SELECT c.candidate_id, f.fiber_key, f.status FROM c JOIN f USING ({', '.join(keys)})) "
            f"TO '{out / 'candidates.parquet'}' (FORMAT parquet)")
n, fibers, mixed = con.execute("SELECT sum(n), count(*), count_if(status = 'ambiguous') FROM f").fetchall()[0]
counts = con.execute("SELECT status, sum(n) FROM f GROUP BY 1 ORDER BY 1").fetchall()
print(f"candidates {n}, fibers {fibers}, mixed {mixed}, " + ", ".join(f"{s} {k}" for s, k in counts))
sys.stdout.flush()
os._exit(0)
