-- A stand-in for the parts of nginx's `ngx` that handler.lua touches, for running it outside
-- nginx: returns the `ngx` of one request from `addr`, and a function giving its status.
return function(addr)
  local status = 200
  local ngx = {
    var = { remote_addr = addr }, header = {}, ERR = "error",
    log = function(...) io.stderr:write(table.concat({ ... }), "\n") end,
    exit = function(code) status = code end,
  }
  return ngx, function() return status end
end
