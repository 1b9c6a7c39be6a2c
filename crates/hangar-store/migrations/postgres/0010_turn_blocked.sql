-- A turn that ended right after a denied call (issue 21's "blocked by rules or Tower"): which
-- call, in words (`rules (rm-rf-root) denied Bash: ...`, `denied Bash by ada@example.com: ...`).
-- NULL when the agent went on after every denial, or nothing was denied. Written once, with
-- the turn's end.
ALTER TABLE turns ADD COLUMN blocked TEXT;
