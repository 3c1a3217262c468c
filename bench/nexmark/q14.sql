-- Nexmark q14: calculation, a filter and projection with a user-defined function
-- (`count_char`, the number of times a character occurs, ships with Freshet). Flink's
-- HOUR(t) is date_part('hour', t).
SELECT auction, bidder, 0.908 * price AS price,
       CASE
           WHEN date_part('hour', date_time) >= 8 AND date_part('hour', date_time) <= 18 THEN 'dayTime'
           WHEN date_part('hour', date_time) <= 6 OR date_part('hour', date_time) >= 20 THEN 'nightTime'
           ELSE 'otherTime'
       END AS bid_time_type,
       date_time, extra, count_char(extra, 'c') AS c_counts
FROM bid
WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000
