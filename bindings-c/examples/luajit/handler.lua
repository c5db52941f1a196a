-- An OpenResty access handler on libsluicegate: one decision per request, keyed by the
-- client address; the library renders the IETF RateLimit fields (and Retry-After on a
-- denial, which gets 429).
--
-- In nginx.conf:
--   init_worker_by_lua_block {
--     limiter = require("sluicegate").keyed("10/s; burst=2", 100000, nil, "shm:/api-limits")
--   }
--   access_by_lua_block { require("handler").access(limiter) }
--
-- With the "shm:" store every worker opens the same region, so the limit holds for the host;
-- without it (or with "memory") each worker counts alone. test_handler.lua and workers.lua
-- run it outside nginx with a stand-in `ngx` (ngx_stub.lua).
local M = {}

-- `ngx`: nginx's (the global, by default) or a stand-in with var, header, log, ERR, exit.
function M.access(limiter, ngx)
  ngx = ngx or _G.ngx
  local d, err = limiter:acquire(ngx.var.remote_addr, 1)
  if not d then
    ngx.log(ngx.ERR, "rate limiter: ", err)
    return ngx.exit(500)
  end
  for name, value in pairs(assert(limiter:headers("per-ip"))) do
    ngx.header[name] = value
  end
  if not d.allowed then
    return ngx.exit(429)
  end
end

return M
