-- gcra.lua: GCRA, the generic cell rate algorithm. A request of n events is
-- admitted when TAT + n × emission − now <= burst × emission, and then
-- moves the theoretical arrival time (TAT) forward by n × emission; what it
-- admits proceeds at once. This is meter.lua's meter, which keeps the TAT
-- as its state: GCRA is the meter that polices.
--
-- Params: a = units per tick, b = units per event (the emission interval is
-- b/a ticks), c = burst in units (burst × b), d = -2 (polices), e = the
-- cells of the key's TTL, in ticks. See meter.lua.
local gcra = meter
