"""A run directory's journal: the record of one conversation (:mod:`.record`), what a journal line
must be (:mod:`.lines`), how the run directory is written as the run goes (:mod:`.rundir`, with
:mod:`.files` and :mod:`.csvsafe`) and how it is read back (:mod:`.reader`, :mod:`.dataframes`)."""
