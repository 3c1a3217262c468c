-- Nexmark q4: average price for a category, the average of each auction's winning bid
-- (bids during the auction's life).
SELECT q.category, AVG(q.final) AS final
FROM (
    SELECT MAX(b.price) AS final, a.category
    FROM auction a, bid b
    WHERE a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category
) q
GROUP BY q.category
