-- Nexmark q12: bids per bidder in 10-second windows. The standard query windows by processing
-- time (PROCTIME()), which Freshet does not have: this runs it on event time, where it is
-- repeatable.
SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)
GROUP BY bidder, window_start, window_end
