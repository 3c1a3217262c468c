-- Nexmark q7: highest bid, the bids at the highest price of their 10-second window. The
-- columns are in the standard query's order (Flink's sink names bidder and price the other
-- way round).
SELECT b.auction, b.price, b.bidder, b.date_time, b.extra
FROM bid b
JOIN (
    SELECT MAX(price) AS maxprice, window_end AS date_time
    FROM TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)
    GROUP BY window_start, window_end
) b1
ON b.price = b1.maxprice
WHERE b.date_time BETWEEN b1.date_time - INTERVAL '10' SECOND AND b1.date_time
