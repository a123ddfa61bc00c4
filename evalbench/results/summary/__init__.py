"""Aggregating verdicts: the streaming summary of a run (:mod:`.aggregate`), recomputed from a
journal (:mod:`.rebuild`), with pass-rate statistics (:mod:`.stats`), repeated trials
(:mod:`.trials`), the failure taxonomy (:mod:`.taxonomy`) and the comparison of two runs
(:mod:`.comparison`)."""
