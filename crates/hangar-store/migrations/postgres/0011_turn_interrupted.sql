-- A turn's last interrupt, in words (issue 21's "an interrupt reports what it interrupted and
-- what it dropped"): who sent it, the answer it stopped, the approvals it withdrew, the queued
-- messages that still ran. NULL when no interrupt came. Written once, with the turn's end.
ALTER TABLE turns ADD COLUMN interrupted TEXT;
