-- wrk script: X-User-Id cycling over USERS users (default 1000) and X-Forwarded-For over 100
-- client addresses, so per-user and per-ip limiters see many keys. CONNECTION_CLOSE=1 adds
-- "Connection: close": one TCP (and TLS) handshake per request.
local users = tonumber(os.getenv("USERS") or "1000")
local counter = 0
local close = os.getenv("CONNECTION_CLOSE") == "1"
request = function()
  counter = counter + 1
  local headers = {
    ["X-User-Id"] = "user" .. (counter % users),
    ["X-Forwarded-For"] = "198.51.100." .. (counter % 100),
  }
  if close then headers["Connection"] = "close" end
  return wrk.format("GET", wrk.path, headers)
end
