-- The leasehold fence, for SQLite (leasehold fence sql --dialect sqlite).
-- Apply it as is, as often as you like: every statement is idempotent.
-- The check, inside the transaction that writes (a lower token is refused by the guard):
--   INSERT INTO leasehold_fence (task, token) VALUES (?, ?) ON CONFLICT (task) DO UPDATE
--   SET token = excluded.token, updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now')

CREATE TABLE IF NOT EXISTS leasehold_fence (
  task       TEXT    PRIMARY KEY NOT NULL,
  token      INTEGER NOT NULL CHECK (token >= 1),
  updated_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- The guard: no statement may lower a task's token, whoever writes the row.
CREATE TRIGGER IF NOT EXISTS leasehold_fence_guard
BEFORE UPDATE OF token ON leasehold_fence
WHEN NEW.token < OLD.token
BEGIN SELECT RAISE(ABORT, 'leasehold_fence: stale token'); END;
