"""deepchecks' ConflictingLabels on the same complete cases a fiber audit reads: the share of samples whose
feature values (the evidence) appear with more than one label (the claim). That share is the audit's
ambiguous fraction (members of mixed fibers over audited candidates), so the two must agree exactly.

Runs in its own environment (bench/peers/deepchecks.lock; `make bench-deepchecks` builds it): deepchecks
0.19 needs numpy < 2, pandas < 2.3, scikit-learn < 1.6 and setuptools' pkg_resources, which dcaudit's lock
does not hold.

    python bench/peers/conflicts_deepchecks.py FILE --evidence a,b,c --claim-column y

Prints one JSON line: n (complete cases), conflicting (samples with conflicting labels), fraction, and
check_seconds (the check alone, after the read).
"""

import argparse
import json
import time
import warnings

warnings.filterwarnings("ignore")  # deepchecks' own deprecation and telemetry notices

import pandas as pd  # noqa: E402
from deepchecks.tabular import Dataset  # noqa: E402
from deepchecks.tabular.checks import ConflictingLabels  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--evidence", required=True)
p.add_argument("--claim-column", required=True)
a = p.parse_args()
ev = a.evidence.split(",")
df = pd.read_parquet(a.file, columns=[*ev, a.claim_column]) if a.file.endswith(".parquet") else \
    pd.read_csv(a.file, usecols=[*ev, a.claim_column])
df = df.dropna(subset=[*ev, a.claim_column]).reset_index(drop=True)
df["claim"] = (df.pop(a.claim_column) == 1).astype(int)
start = time.perf_counter()
# with_display=False: only the value (a display would add rendering time no audit spends)
result = ConflictingLabels(columns=ev).run(Dataset(df, label="claim", cat_features=ev), with_display=False)
seconds = time.perf_counter() - start
value = result.value
fraction = float(value["percent_of_conflicting_samples"])
conflicting = sum(len(group) for group in value["samples_indices"])
print(json.dumps({"n": len(df), "conflicting": conflicting, "fraction": fraction, "check_seconds": seconds}))
