-- Every request a new key: each one is a durable decision (fsync).
dofile(os.getenv("WRK_LUA_DIR") .. "/common.lua")

request = function()
  n = n + 1
  return wrk.format("POST", "/v1/webhook",
                    headers_for("u-" .. run .. "-" .. id .. "-" .. n), body)
end
