-- sluicegate: the head of the FUNCTION LOAD form (SCRIPTS.md, "Loading"), after the loader's
-- '#!lua name=NAME' line. Redis runs a library's top level with no globals but `redis`, so the
-- whole script is the body of this function, run by the first call (entry_function.lua).
local function sluicegate()
