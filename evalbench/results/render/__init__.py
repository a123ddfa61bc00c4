"""Turning results into files and views: every report of a run directory (:mod:`.reports`:
report.html, junit.xml, summary.md, EvalBench's CSVs), ``evalbench explain``, and the listing and
``index.html`` over many runs (:mod:`.runs_index`, :mod:`.view`)."""
