-- sluicegate: the tail of the FUNCTION LOAD form (SCRIPTS.md, "Loading").
return run, one
end

-- The loader replaces every SLUICEGATE_NAME with the library's name, so that each version of
-- the script is its own library and functions: 'sluicegate_' and the first 16 hex digits of
-- the SHA-1 of the EVAL form.
local run, one = nil, nil

local function call(keys, args)
  if run == nil then run, one = sluicegate() end   -- once per library load, not per call
  return run(keys, args)
end

redis.register_function { function_name = 'SLUICEGATE_NAME', callback = call }

-- One bucket of a continuous token bucket or GCRA, acquire (fast.lua): NAME_tb, NAME_gcra.
local function register_one(algo)
  redis.register_function {
    function_name = 'SLUICEGATE_NAME_' .. algo,
    callback = function(keys, args)
      if run == nil then run, one = sluicegate() end
      return one(algo, keys, args)
    end,
  }
end
register_one('tb')
register_one('gcra')

-- Peeks only, declared read-only: FCALL_RO may run it on a replica.
redis.register_function {
  function_name = 'SLUICEGATE_NAME_ro',
  callback = function(keys, args)
    if args[1] ~= 'peek' then
      return redis.error_reply('sluicegate: the read-only function only peeks')
    end
    return call(keys, args)
  end,
  flags = { 'no-writes' },
}
