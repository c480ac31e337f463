package redisstore

import "github.com/redis/go-redis/v9"

// current reads the verdict under KEYS[1] and validates it as
// strictly as the Go side does: it returns 0 for no key, -1 and a reason for a value that is
// not one of ours (which the scripts then leave alone), or the epoch and the raw fields.
// Lua numbers are doubles, so the since field (Unix nanoseconds) is only ever handled as a
// string; epochs and counts are checked as digit strings before tonumber, which would also
// accept "0x10" or "1e3".
const current = `
local key = KEYS[1]
local fmt = ARGV[1]

local function digits(s, max)
  return type(s) == 'string' and #s >= 1 and #s <= max and string.match(s, '^%d+$') ~= nil
end

local function current()
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'none' then return 0, nil end
  if kind ~= 'hash' then return -1, 'a ' .. kind end
  local f = redis.call('HMGET', key, 'format', 'epoch', 'state', 'since', 'hos', 'period')
  if f[1] ~= fmt then return -1, 'a hash of another format' end
  if not digits(f[2], 15) or tonumber(f[2]) < 1 then return -1, 'a bad epoch' end
  if f[3] ~= 'closed' and f[3] ~= 'open' and f[3] ~= 'half_open' then return -1, 'a bad state' end
  if not digits(f[4], 19) then return -1, 'a bad since' end
  if not digits(f[5], 15) then return -1, 'a bad half-open count' end
  return tonumber(f[2]), f
end

local function publish(epoch, state, since, hos, opens, openfor)
  local period = epoch .. ' ' .. opens .. ' ' .. openfor
  redis.call('HSET', key, 'format', fmt, 'epoch', epoch, 'state', state, 'since', since,
    'hos', hos, 'period', period, 'by', ARGV[#ARGV])
  redis.call('PEXPIRE', key, ARGV[#ARGV - 2])
  redis.call('PUBLISH', ARGV[#ARGV - 1],
    fmt .. ' ' .. epoch .. ' ' .. state .. ' ' .. since .. ' ' .. hos .. ' ' .. key)
  return {'ok', epoch, state, since, hos, period}
end
`

// casScript publishes a new verdict if the writer's view is current: the epoch it last
// knew (ARGV[2]) is at least the stored one. Then the verdict is written as epoch ARGV[2]+1,
// so two processes acting on the same view cannot both succeed, and one acting on an older
// view (a lower epoch) never overwrites a newer verdict: the loser gets the winner's verdict
// back to adopt. A stored epoch lower than the writer's means the store lost data (a Redis
// restart without persistence, an expired key), and the writer's newer view wins.
//
// ARGV: format, expected epoch, state, since, half-open successes (always 0: the v1 field
// kept for older readers, see fields), consecutive opens, open period (ns), TTL (ms),
// channel, writer. The period is written as "<epoch> <opens> <ns>", so that a reader can
// tell it from one an older writer left behind (see parsePeriod).
var casScript = redis.NewScript(current + `
local epoch, f = current()
if epoch < 0 then return {'garbage', f} end
local expect = tonumber(ARGV[2])
if epoch > expect then return {'conflict', f[2], f[3], f[4], f[5], f[6]} end
return publish(string.format('%d', expect + 1), ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
`)
