-- Nexmark q10 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
SELECT auction, bidder, price, date_time, extra,
  DATE_FORMAT(date_time, 'yyyy-MM-dd'), DATE_FORMAT(date_time, 'HH:mm')
FROM bid
