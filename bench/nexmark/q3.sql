-- Nexmark q3: local item suggestion, a regular join of auctions and their sellers.
SELECT p.name, p.city, p.state, a.id
FROM auction AS a INNER JOIN person AS p ON a.seller = p.id
WHERE a.category = 10 AND (p.state = 'OR' OR p.state = 'ID' OR p.state = 'CA')
