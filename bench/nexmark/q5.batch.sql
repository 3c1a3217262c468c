-- q5 in batch SQL: each bid in the five 10-second windows sliding every 2 seconds that hold it.
WITH hops AS (
    SELECT auction, date_bin(INTERVAL '2' SECOND, date_time) - k.back AS starttime
    FROM bid CROSS JOIN (VALUES (INTERVAL '0' SECOND), (INTERVAL '2' SECOND), (INTERVAL '4' SECOND),
                                (INTERVAL '6' SECOND), (INTERVAL '8' SECOND)) AS k(back)
),
counts AS (
    SELECT auction, COUNT(*) AS num, starttime, starttime + INTERVAL '10' SECOND AS endtime
    FROM hops GROUP BY auction, starttime
)
SELECT c.auction, c.num
FROM counts c
JOIN (SELECT MAX(num) AS maxn, starttime, endtime FROM counts GROUP BY starttime, endtime) m
  ON c.starttime = m.starttime AND c.endtime = m.endtime AND c.num >= m.maxn
