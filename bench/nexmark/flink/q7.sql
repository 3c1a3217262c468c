-- Nexmark q7 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
-- (The bids' columns in the order of bench/nexmark/q7.sql.)
SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
FROM bid B
JOIN (
  SELECT MAX(price) AS maxprice, window_end as date_time
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY window_start, window_end
) B1
ON B.price = B1.maxprice
WHERE B.date_time BETWEEN B1.date_time - INTERVAL '10' SECOND AND B1.date_time
