-- Maintenance switches: a single row, so every broker sees the same mode.
CREATE TABLE queen.maintenance_switches (
    id          boolean PRIMARY KEY DEFAULT true CHECK (id),
    push_paused boolean NOT NULL DEFAULT false,
    pop_paused  boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
