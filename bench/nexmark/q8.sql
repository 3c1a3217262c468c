-- Nexmark q8: monitor new users, the people who created an auction in the 10-second window
-- they registered in (a window join).
SELECT p.id, p.name, p.starttime
FROM (
    SELECT id, name, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '10' SECOND)
    GROUP BY id, name, window_start, window_end
) p
JOIN (
    SELECT seller, window_start AS starttime, window_end AS endtime
    FROM TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND)
    GROUP BY seller, window_start, window_end
) a
ON p.id = a.seller AND p.starttime = a.starttime AND p.endtime = a.endtime
