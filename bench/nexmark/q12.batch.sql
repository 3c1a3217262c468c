-- q12 in batch SQL: the tumbling window as date_bin.
SELECT bidder, COUNT(*) AS bid_count, date_bin(INTERVAL '10' SECOND, date_time) AS starttime,
       date_bin(INTERVAL '10' SECOND, date_time) + INTERVAL '10' SECOND AS endtime
FROM bid
GROUP BY bidder, date_bin(INTERVAL '10' SECOND, date_time)
