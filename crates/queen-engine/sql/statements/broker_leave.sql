-- A graceful stop (registry.rs): this broker's row goes, so the list drops it at once.
DELETE FROM queen.brokers WHERE id = $1
