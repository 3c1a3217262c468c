-- Nexmark q17 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
SELECT auction, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS `day`, count(*) AS total_bids,
  count(*) FILTER (WHERE price < 10000) AS rank1_bids,
  count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
  count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
  min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price,
  sum(price) AS sum_price
FROM bid
GROUP BY auction, DATE_FORMAT(date_time, 'yyyy-MM-dd')
