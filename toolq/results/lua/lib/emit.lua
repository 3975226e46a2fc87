-- lib/emit.lua: a call's event appended to its run's stream, in the script that changes the
-- state, so a record and its event never disagree. Readers block on the stream itself
-- (XREAD BLOCK), which the XADD wakes: there is no separate wake-up to publish.
--
-- emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now, known) binds one
-- call's event destination and returns emit(etype, data) -> the stream entry id.
--   stream      KEYS: the run's event stream (Keys.run_stream)
--   hook_types  KEYS: event types some worker's webhooks want (Keys.webhook_events)
--   outbox      KEYS: the webhook outbox stream (Keys.webhook_outbox)
--   archive     KEYS: finished calls waiting for the history store (Keys.history_archive)
--   known       the record's {name, risk, notify} (false where it has none) when the calling
--               script read them already with its own HMGET; nil: read with each event
-- An event of a type in hook_types is also appended to the outbox here, in the same script
-- as the event itself, so no notification can be lost between the two. Whether a type is
-- wanted is asked once per type per script invocation, shared by every emitter of the
-- invocation.
--
-- A final event is also copied to the inbox stream the call's record names (field 'notify',
-- Keys.wait_inbox: the stream the dispatching client's shared reader blocks on), so that
-- client reads one stream for all its waits instead of one per run. The copy is a
-- wake-up with the outcome, not the record of it: the run's stream above stays the durable
-- event. A record naming anything but an inbox of this prefix gets no copy, and a failed
-- copy (say the key holds another type) never fails the state change. An inbox keeps an
-- hour of entries (trimmed by their ids' time, and expiring an hour after the last one): a
-- client waits through it only on calls dispatched less than half an hour ago.
-- An event that makes a call final (or changes a final call: an undo) also appends the call
-- to the archive stream, in the same script, when a history store is on (the archivers made
-- the stream with their consumer group): no finished call can miss the history store.
-- Most deployments have neither webhooks nor a history store: one EXISTS over both keys,
-- once per invocation, tells so (0), and then neither is asked about again.
local hooked = {}
local neither = nil
local FINAL = {['call.succeeded'] = true, ['call.failed'] = true, ['call.denied'] = true,
               ['call.expired'] = true, ['call.cancelled'] = true}
local INBOX_KEEP_MS = 3600000
-- The prefix of toolq's keys, from the run's stream name (nil for a stream named otherwise):
-- the record's key and the metrics hash are found from it.
local function prefix_of(stream, run_id)
  local suffix = ':run:' .. run_id .. ':events'
  if stream:sub(-#suffix) ~= suffix then return nil end
  return stream:sub(1, #stream - #suffix)
end
local function notify(prefix, inbox, call_id, etype, data, id)
  if not inbox or inbox:sub(1, #prefix + 7) ~= prefix .. ':waits:' or inbox:sub(-6) ~= ':inbox' then
    return
  end
  local oldest = string.format('%d', tonumber(string.match(id, '^(%d+)')) - INBOX_KEEP_MS)
  local ok = redis.pcall('XADD', inbox, 'MINID', '~', oldest, '*', 'type', etype,
                         'call_id', call_id, 'data', data, 'event_id', id)
  if type(ok) ~= 'table' or ok.err == nil then
    redis.pcall('EXPIRE', inbox, INBOX_KEEP_MS / 1000)
  end
end
-- Every event also counts, in the same script, under its call's tool and risk in the metrics
-- hash next to the run's stream (Keys.metrics_events, derived from the prefix as the record's
-- key is): /metrics reads those counters instead of the calls themselves. The record's
-- tool, risk and inbox are read in one HMGET per event, unless the script passed them (known).
local archived_types = {['call.succeeded'] = true, ['call.failed'] = true,
                        ['call.denied'] = true, ['call.expired'] = true,
                        ['call.cancelled'] = true, ['call.undone'] = true,
                        ['call.undo_failed'] = true}
local archiving = nil
local function emitter(stream, maxlen, hook_types, outbox, archive, call_id, run_id, now, known)
  local prefix = prefix_of(stream, run_id)
  return function(etype, data)
    local id = redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*',
                          'type', etype, 'call_id', call_id, 'ts', now, 'data', data)
    if neither == nil then neither = redis.call('EXISTS', hook_types, archive) == 0 end
    if hooked[etype] == nil then
      hooked[etype] = not neither and redis.call('SISMEMBER', hook_types, etype) == 1
    end
    if hooked[etype] then
      redis.call('XADD', outbox, '*', 'type', etype, 'call_id', call_id, 'run_id', run_id,
                 'ts', now, 'data', data, 'event_id', id)
    end
    if archived_types[etype] then
      if archiving == nil then archiving = not neither and redis.call('EXISTS', archive) == 1 end
      if archiving then
        redis.call('XADD', archive, '*', 'call_id', call_id, 'run_id', run_id, 'ts', now)
      end
    end
    if prefix then
      local f = known
        or redis.call('HMGET', prefix .. ':call:' .. call_id, 'name', 'risk', 'notify')
      if f[1] then
        redis.call('HINCRBY', prefix .. ':metrics:events',
                   f[1] .. '|' .. (f[2] or '') .. '|' .. etype, 1)
      end
      if FINAL[etype] then notify(prefix, f[3], call_id, etype, data, id) end
    end
    return id
  end
end
