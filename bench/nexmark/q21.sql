-- Nexmark q21: add a channel id, from the channel's name or from the url's channel_id
-- parameter. Flink's REGEXP_EXTRACT(s, p, 2) is regexp_match(s, p)[2] (a list of the
-- capture groups, counted from 1).
SELECT auction, bidder, price, channel,
       CASE
           WHEN lower(channel) = 'apple' THEN '0'
           WHEN lower(channel) = 'google' THEN '1'
           WHEN lower(channel) = 'facebook' THEN '2'
           WHEN lower(channel) = 'baidu' THEN '3'
           ELSE regexp_match(url, '(&|^)channel_id=([^&]*)')[2]
       END AS channel_id
FROM bid
WHERE regexp_match(url, '(&|^)channel_id=([^&]*)')[2] IS NOT NULL
   OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')
