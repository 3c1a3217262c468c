-- q8 in batch SQL: the tumbling windows as date_bin.
SELECT p.id, p.name, p.starttime
FROM (
    SELECT id, name, date_bin(INTERVAL '10' SECOND, date_time) AS starttime
    FROM person
    GROUP BY id, name, date_bin(INTERVAL '10' SECOND, date_time)
) p
JOIN (
    SELECT seller, date_bin(INTERVAL '10' SECOND, date_time) AS starttime
    FROM auction
    GROUP BY seller, date_bin(INTERVAL '10' SECOND, date_time)
) a
ON p.id = a.seller AND p.starttime = a.starttime
