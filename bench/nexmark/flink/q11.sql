-- Nexmark q11 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
SELECT
  B.bidder,
  count(*) as bid_count,
  SESSION_START(B.date_time, INTERVAL '10' SECOND) as starttime,
  SESSION_END(B.date_time, INTERVAL '10' SECOND) as endtime
FROM bid B
GROUP BY B.bidder, SESSION(B.date_time, INTERVAL '10' SECOND)
