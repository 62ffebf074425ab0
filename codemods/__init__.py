"""Python codemods referenced from rules by name; each defines rewrite(call, site)."""
