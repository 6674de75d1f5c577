-- Wakes chainstore-populator as soon as rows are committed to the event table, instead of at
-- its next poll: a statement-level trigger that sends one NOTIFY per inserting statement
-- (PostgreSQL delivers it at commit, and folds repeats within a transaction into one).
-- Run with the table's name substituted for "events"; start the populator with
-- --notify-channel chainstore_events. Without the trigger the populator still follows the
-- table, one poll interval behind.

CREATE OR REPLACE FUNCTION chainstore_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify(TG_ARGV[0], '');
  RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS chainstore_notify ON events;
CREATE TRIGGER chainstore_notify
  AFTER INSERT ON events
  FOR EACH STATEMENT
  EXECUTE FUNCTION chainstore_notify('chainstore_events');
