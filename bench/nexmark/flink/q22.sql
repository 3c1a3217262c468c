-- Nexmark q22 as nexmark/nexmark's Flink SQL writes it, the columns in snake case.
SELECT
  auction, bidder, price, channel,
  SPLIT_INDEX(url, '/', 3) as dir1,
  SPLIT_INDEX(url, '/', 4) as dir2,
  SPLIT_INDEX(url, '/', 5) as dir3
FROM bid
