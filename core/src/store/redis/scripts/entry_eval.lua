-- sluicegate: the tail of the EVAL form of the script (SCRIPTS.md, "Loading").
return run(KEYS, ARGV)
