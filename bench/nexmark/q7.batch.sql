-- q7 in batch SQL: the tumbling window as date_bin.
SELECT b.auction, b.price, b.bidder, b.date_time, b.extra
FROM bid b
JOIN (
    SELECT MAX(price) AS maxprice,
           date_bin(INTERVAL '10' SECOND, date_time) + INTERVAL '10' SECOND AS date_time
    FROM bid
    GROUP BY date_bin(INTERVAL '10' SECOND, date_time)
) b1
ON b.price = b1.maxprice
WHERE b.date_time BETWEEN b1.date_time - INTERVAL '10' SECOND AND b1.date_time
