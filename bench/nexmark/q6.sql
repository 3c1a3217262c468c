-- Nexmark q6: average selling price by seller, over each seller's last 10 closed auctions
-- (Flink cannot run it: FLINK-19059).
-- On an endless stream (or with EMIT CHANGES) its window reads the changelog of the top-1 and
-- emits an upsert changelog keyed by auction and seller (docs/sql.md).
SELECT q.seller,
       AVG(q.price) OVER (PARTITION BY q.seller ORDER BY q.date_time
                          ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_price
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY id, seller ORDER BY price DESC) AS rownum
    FROM (
        SELECT a.id, a.seller, b.price, b.date_time
        FROM auction AS a, bid AS b
        WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires
    )
) AS q
WHERE q.rownum <= 1
