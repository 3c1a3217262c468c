-- Nexmark q17: auction statistics per day, over the whole stream (an updating result).
SELECT auction, to_char(date_time, '%Y-%m-%d') AS day,
     COUNT(*) AS total_bids,
     COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
     COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
     COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
     MIN(price) AS min_price, MAX(price) AS max_price, AVG(price) AS avg_price,
     SUM(price) AS sum_price
FROM bid
GROUP BY auction, to_char(date_time, '%Y-%m-%d')
