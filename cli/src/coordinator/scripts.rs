//! The Lua scripts that change a run's keys in one atomic step, and the
//! entries of stream replies. Each script may be sent again when its reply
//! was lost (Redis restarted or froze): running it twice does what running
//! it once did.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::streams::StreamId;

/// Records an item's end in one atomic step: sets its result (KEYS[1],
/// field ARGV[1], value ARGV[2]) keeping the count of `done` results
/// (KEYS[2]) right (an item redone after its worker died before
/// acknowledging is counted once), adds the dead-letter entry (KEYS[4],
/// fields ARGV[5..]) if there is one, and acknowledges the message (stream
/// KEYS[3], group ARGV[3], message ARGV[4]).
///
/// A `done` result is never turned `dead`: the item's output is complete.
/// That happens when an item was reclaimed from a worker that was slow, not
/// dead, and the slow one then failed it (with `exists = "error"`, on the
/// output the other worker wrote). Returns 1 when it refused so, else 0.
/// A result already recorded (the same call sent again after its reply was
/// lost) only acknowledges: no second dead-letter entry.
pub(crate) static RECORD: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old == 'done' and ARGV[2] == 'dead' then
  redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
  return 1
end
if old == ARGV[2] then
  redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[2] == 'done' then redis.call('HINCRBY', KEYS[2], 'done', 1) end
if #ARGV > 4 then redis.call('XADD', KEYS[4], '*', unpack(ARGV, 5)) end
redis.call('XACK', KEYS[3], ARGV[3], ARGV[4])
return 0
",
    )
});

/// Adds input ARGV[1] (source ARGV[2], and what the source knows of it as
/// JSON ARGV[3] when not empty: the input's `meta`) to the stream KEYS[2]
/// unless the set KEYS[1] has it: 1 when added.
pub(crate) static ENQUEUE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
            if ARGV[3] ~= '' then
              redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'source', ARGV[2], 'meta', ARGV[3])
            else
              redis.call('XADD', KEYS[2], '*', 'id', ARGV[1], 'source', ARGV[2])
            end
            return 1
          end
          return 0",
    )
});

/// Moves the dead-letter entry ARGV[1] (stream KEYS[1]) of item ARGV[2]
/// (source ARGV[3]) back to the queue (KEYS[2]): forgets its result
/// (KEYS[3]), deliveries (KEYS[4]) and last error (KEYS[5]). Returns 1 when
/// moved, 0 when the entry is gone (already requeued).
pub(crate) static REQUEUE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[3], ARGV[2]) == 'dead' then
  redis.call('HDEL', KEYS[3], ARGV[2])
end
redis.call('HDEL', KEYS[4], ARGV[2])
redis.call('HDEL', KEYS[5], ARGV[2])
redis.call('XADD', KEYS[2], '*', 'id', ARGV[2], 'source', ARGV[3])
return 1
",
    )
});

/// The learnt margin of bucket KEYS[3] (a hash: `m` the margin at `at`,
/// µs on Redis's clock) at `now`: kept for ARGV[3] µs after `at`, then
/// narrowing by ARGV[4] per µs (the engine's `MARGIN` rule).
const LEARNT: &str = r"
local function learnt(key, now, hold, creep)
  local h = redis.call('HMGET', key, 'm', 'at', 'widened')
  if not h[1] then return 0, h[3] end
  local m = tonumber(h[1])
  local quiet = now - tonumber(h[2]) - hold
  if quiet > 0 then m = math.max(0, m - creep * quiet) end
  return m, h[3]
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
";

/// A token bucket (GCRA, on Redis's clock) that hands out reservations:
/// every call takes the next token of bucket KEYS[1] (period ARGV[1] µs,
/// burst ARGV[2]) and returns the microseconds until that token's time,
/// 0 when it is due now. The caller sleeps that long and goes: one call
/// per token, however many wait. The period is widened by the learnt
/// margin (KEYS[3], see [`LEARNT`]; ARGV[3] and ARGV[4] its hold and
/// creep). A pause (KEYS[2], set on `Retry-After`) moves the next token to
/// its end, and after it tokens come at the rate, not in a burst.
pub(crate) static GCRA: LazyLock<String> = LazyLock::new(|| {
    LEARNT.to_owned()
        + r"
local m = learnt(KEYS[3], now, tonumber(ARGV[3]), tonumber(ARGV[4]))
local period = tonumber(ARGV[1]) / (1 - m)
local tolerance = (tonumber(ARGV[2]) - 1) * period
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local pause = redis.call('PTTL', KEYS[2])
if pause > 0 then
  local resume = now + pause * 1000 + tolerance
  if tat < resume then tat = resume end
end
local at = tat - tolerance
if at < now then at = now end
local new_tat = tat + period
redis.call('SET', KEYS[1], new_tat, 'PX', math.ceil((new_tat - now) / 1000) + 1000)
return at - now
"
});

/// A request at the rate of bucket KEYS[1]'s limiter was refused: its
/// learnt margin widens by ARGV[1] (at most ARGV[2]), once per burst
/// (refusals within ARGV[5] µs of the last widening are one), and is held
/// again from now (ARGV[3], ARGV[4]: hold and creep, see [`LEARNT`]).
/// Returns the margin, as text (a number reply would be cut to an
/// integer). Sent twice, it widens once.
pub(crate) static WIDEN: LazyLock<String> = LazyLock::new(|| {
    LEARNT.to_owned()
        + r"
local hold, creep = tonumber(ARGV[3]), tonumber(ARGV[4])
local m, widened = learnt(KEYS[1], now, hold, creep)
if not widened or now - tonumber(widened) >= tonumber(ARGV[5]) then
  m = math.min(tonumber(ARGV[2]), m + tonumber(ARGV[1]))
  redis.call('HSET', KEYS[1], 'widened', now)
end
redis.call('HSET', KEYS[1], 'm', m, 'at', now)
redis.call('PEXPIRE', KEYS[1], math.ceil((hold + m / creep) / 1000) + 60000)
return tostring(m)
"
});

/// A stream entry: its message id and fields.
pub(crate) type Entry = (String, HashMap<String, String>);

/// The entries of a stream reply, as redis's own `streams` types parse it
/// (`StreamReadReply`, `StreamAutoClaimReply`, `StreamRangeReply`), with
/// their fields as text. An entry deleted since it was delivered (its
/// fields nil, so none) is left out.
pub(crate) fn entries(ids: impl IntoIterator<Item = StreamId>) -> Vec<Entry> {
    ids.into_iter()
        .filter(|e| !e.map.is_empty())
        .map(|e| {
            let fields = (e.map.keys())
                .filter_map(|k| Some((k.clone(), e.get::<String>(k)?)))
                .collect();
            (e.id, fields)
        })
        .collect()
}
