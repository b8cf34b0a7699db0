-- plain KV getPrefix: a 100-row page of prefix k: after a random start in a
-- namespace of :n keys (-D ns=p1k -D n=1000, and so on): one index range
-- scan (ns and key are COLLATE "C", so the prefix is the byte range
-- ['k:', 'k;')), live rows only, in key order.
\set s random(0, :n - 101)
SELECT key, value, version, expires_at, updated_at FROM queen.kv
 WHERE ns = :ns AND key > 'k:' || lpad(:s::text, 7, '0') AND key < 'k;'
   AND (expires_at IS NULL OR expires_at > now())
 ORDER BY key LIMIT 100;
