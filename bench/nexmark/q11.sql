-- Nexmark q11: user sessions, bids per bidder per session of activity with gaps under
-- 10 seconds.
SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS endtime
FROM bid
GROUP BY bidder
WINDOW SESSION (date_time, INTERVAL '10' SECOND)
