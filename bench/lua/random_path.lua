-- wrk: each request takes a random path from the file named by $PATHS (one per line).
local paths = {}
for line in io.lines(os.getenv("PATHS")) do paths[#paths + 1] = line end
math.randomseed(os.time())
request = function()
  return wrk.format("GET", paths[math.random(#paths)])
end
