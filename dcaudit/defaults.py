"""Every default of an audit option, and the names of its choices, defined once.

The config objects (``EvidenceMap``, ``AuditTask``, ``ReplayConfig``, ``CompletionConfig``) take their
defaults from here, and the spec parser, the Python API and the CLI all resolve through those objects;
this module imports nothing but ``typing``, so ``dcaudit --help`` can show the values without loading DuckDB.
The name tuples are the values the package tables hold (``status``, ``policy``): the audits write them, the
config objects check against them, the CLI offers them and the reports order by them.
"""

from typing import Final

# Where the candidate passes run (dcaudit.engine): this machine, or Spark for the fiber audit and replay
ENGINES: Final = ("duckdb", "spark")
ENGINE: Final = "duckdb"

# DuckDB's resources (--memory-limit / DCAUDIT_MEMORY_LIMIT, --threads / DCAUDIT_THREADS)
MEMORY_LIMIT: Final = "8GB"
# DuckDB refuses limits from 2**64 bytes on (a ParserException mid-run); no machine has 1024 TiB of memory, so a
# larger limit is a typo, not a setting
MAX_MEMORY_LIMIT: Final = 2**50
MAX_MEMORY_LIMIT_TEXT: Final = "1024TiB"  # how the limit is written (DuckDB reads no PiB)
# DuckDB starts every thread when the limit is set and aborts the process natively (std::system_error) when
# the OS refuses one (100000 here); past the cores a thread adds only memory. 1024 is above the hardware threads
# of the largest machines (2 × 192 cores × 2) and far below the OS's usual per-user limits.
MAX_THREADS: Final = 1024

# The mixed-fiber audit
STATUSES: Final = ("certified_true", "certified_false", "ambiguous", "unsupported")  # a fiber's status, report order
MISSING_CHOICES: Final = ("drop", "as-value")
DUPLICATES_CHOICES: Final = ("error", "keep")
FIBER_RULE = "exact"
MISSING = "drop"              # complete cases; "as-value" makes missing (and NaN, ±inf) a value of its own
MIN_SUPPORT = 1               # pure fibers smaller than this are "unsupported"
MAX_SUPPORT = 2**53  # support counts are BIGINT in every package; larger numbers are a typo, not a count
DUPLICATES: Final = "error"       # repeated candidate ids; "keep" audits each row and reports them as findings

# Held-out replays
REPLAY_POLICIES: Final = ("fiber_majority", "global_majority", "certified_only", "certify_then_acquire")
PRICE_AWARE_POLICIES: Final = ("price_aware", "price_aware_conservative")  # the costs table's, beside the fixed ones
REPLAY_MODES: Final = ("exact", "calibrated", "familywise")
REPLAY_SEEDS = 100
SEED_OFFSET = 0
MAX_SEED_OFFSET = 2**62  # seed numbers are BIGINT (DuckDB, the package tables): offset + seeds must fit
MAX_SEEDS = 100_000  # more seeds (or random draws) per run outgrow any machine's disk: a typo, not a design
CALIBRATION_FRACTION = 0.5
REPLAY_MODE: Final = "exact"       # or "calibrated" (Clopper-Pearson bound on the minority rate <= epsilon)
EPSILON = 0.05
DELTA = 0.05
MIN_SUPPORT_FIBERS = 50       # calibration members a fiber needs to certify (the paper's Tox21 replay)
MIN_SUPPORT_WINDOWS = 5       # calibration neighbours a tolerance window needs (the paper's JARVIS replay)
PRICE_GRID = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5)  # price of a measurement per false decision
MAX_PRICE = 1e6  # larger prices are a typo (and their squares overflow the cost intervals)

# Completion curves
REFINEMENTS: Final = ("mixed", "full")
TIE_BREAKS: Final = ("entropy", "first", "last")
COMPLETION_SEEDS = 100
COMPLETION_MIN_SUPPORT = 1
COMPLETION_POLICIES = ("response_rank", "uncertainty", "diversity", "benchmark_aligned", "random", "oracle")
RANDOM_DRAWS = 100
REFINEMENT = "mixed"          # or "full": every fiber recomputed after each probe (the paper's script)
TIE_BREAK = "entropy"         # or "first" / "last" listed probe
MAX_PROBES = 62               # probe sets are kept as 64-bit masks
# A probe's price, like MAX_PRICE: larger is a typo, and bounded prices keep every cumulative cost and its mean
# over seeds finite (two probes at 1e308 made the mean row inf and "over budget" while every seed was within it)
MAX_COST = 1e6
MAX_BUDGET = MAX_PROBES * MAX_COST  # every probe bought at the largest price

# Sensitivity to the fiber resolution
SENSITIVITY_RULES = ("quantile:5", "quantile:10", "quantile:20", "quantile:40", "knn:25", "knn:50", "knn:100")
SENSITIVITY_SUMMARY_RULE = "quantile:20"  # the summary's audit when only window rules are compared


def replay_min_support(*, windowed: bool) -> int:
    """The replay's default support: 5 neighbours for tolerance windows, 50 members for fibers."""
    return MIN_SUPPORT_WINDOWS if windowed else MIN_SUPPORT_FIBERS
FRAME_SPEC = "dataframe"  # the spec name of an audit of a frame given no name= (files are named after themselves)

# How a vision predictions table's confidence is read: "score" (the default: a margin, a logit, a probability;
# any finite number) or "probability" (also checked to be in [0, 1]). Only its deciles per split x model enter
# the audit, so every monotone score audits alike; "probability" names a column of percentages or logits
# written where probabilities were meant.
CONFIDENCE_KINDS = ("probability", "score")
CONFIDENCE = "score"
