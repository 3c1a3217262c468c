-- q11 in batch SQL: a bid opens a new session when it comes 10 seconds or more after its
-- bidder's previous bid; sessions are numbered by a running count of those openings.
WITH openings AS (
    SELECT bidder, date_time,
           CASE WHEN date_time - LAG(date_time) OVER (PARTITION BY bidder ORDER BY date_time)
                     < INTERVAL '10' SECOND THEN 0 ELSE 1 END AS opens
    FROM bid
),
sessions AS (
    SELECT bidder, date_time,
           SUM(opens) OVER (PARTITION BY bidder ORDER BY date_time
                            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session
    FROM openings
)
SELECT bidder, COUNT(*) AS bid_count, MIN(date_time) AS starttime,
       MAX(date_time) + INTERVAL '10' SECOND AS endtime
FROM sessions
GROUP BY bidder, session
