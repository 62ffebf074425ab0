"""All rendering: diffs, plans, audits, verification and status as text and JSON."""
